// The optimizer concept against stand-in types: one with every member, and one missing each requirement.

#include <catch2/catch.hpp>

#include <array>
#include <string_view>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/optim/sgd.hpp"

namespace {

struct no_state {
    std::uint64_t steps = 0;
    std::array<hitch::tensor_view<float>, 0> buffers() const { return {}; }
};

struct good {
    struct options_type {
        void validate() const {}
    };
    template <hitch::device D>
    using state_type = no_state;
    good() = default;
    explicit good(const options_type&) {}
    const options_type& options() const { return o_; }
    static constexpr std::string_view name = "good";
    template <hitch::device D>
    no_state make_state(D&, std::size_t) const {
        return {};
    }
    void step(const hitch::layer&, no_state&, float, const hitch::parallel_options&) const {}
    options_type o_;
};

struct missing_options {  // no options_type
    template <hitch::device D>
    using state_type = no_state;
    static constexpr std::string_view name = "x";
    template <hitch::device D>
    no_state make_state(D&, std::size_t) const {
        return {};
    }
    void step(const hitch::layer&, no_state&, float, const hitch::parallel_options&) const {}
};

struct missing_name : good {
    using good::good;
    static constexpr int name = 0;  // not a name
};

struct missing_state_type {
    struct options_type {
        void validate() const {}
    };
    missing_state_type() = default;
    explicit missing_state_type(options_type) {}
    const options_type& options() const { return o_; }
    static constexpr std::string_view name = "x";
    no_state make_state(hitch::cpu&, std::size_t) const { return {}; }
    void step(const hitch::layer&, no_state&, float, const hitch::parallel_options&) const {}
    options_type o_;
};

struct state_without_buffers {
    std::uint64_t steps = 0;
};
struct missing_buffers : good {
    using good::good;
    template <hitch::device D>
    using state_type = state_without_buffers;
    template <hitch::device D>
    state_without_buffers make_state(D&, std::size_t) const {
        return {};
    }
    void step(const hitch::layer&, state_without_buffers&, float, const hitch::parallel_options&) const {}
};

struct missing_make_state {
    struct options_type {
        void validate() const {}
    };
    template <hitch::device D>
    using state_type = no_state;
    missing_make_state() = default;
    explicit missing_make_state(options_type) {}
    const options_type& options() const { return o_; }
    static constexpr std::string_view name = "x";
    void step(const hitch::layer&, no_state&, float, const hitch::parallel_options&) const {}
    options_type o_;
};

struct missing_step {
    struct options_type {
        void validate() const {}
    };
    template <hitch::device D>
    using state_type = no_state;
    missing_step() = default;
    explicit missing_step(options_type) {}
    const options_type& options() const { return o_; }
    static constexpr std::string_view name = "x";
    template <hitch::device D>
    no_state make_state(D&, std::size_t) const {
        return {};
    }
    options_type o_;
};

}  // namespace

TEST_CASE("optimizer concept: a complete stand-in satisfies it, each missing requirement breaks it",
          "[optim][concept]") {
    STATIC_REQUIRE(hitch::optimizer<good>);
    STATIC_REQUIRE(hitch::check_optimizer<good>());
    STATIC_REQUIRE(hitch::optimizer<hitch::optim::sgd>);
    STATIC_REQUIRE(hitch::optimizer_on<hitch::optim::sgd, hitch::cpu>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_has_options<missing_options>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_options>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_has_name<missing_name>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_name>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_has_state_on<missing_state_type, hitch::host_device_archetype>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_state_type>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_state<state_without_buffers>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_buffers>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_has_state_on<missing_make_state, hitch::host_device_archetype>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_make_state>);
    STATIC_REQUIRE_FALSE(hitch::optimizer_steps_on<missing_step, hitch::host_device_archetype>);
    STATIC_REQUIRE_FALSE(hitch::optimizer<missing_step>);
}
