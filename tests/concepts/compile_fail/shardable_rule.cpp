// Must NOT compile: a complete optimizer that declares neither kind (elementwise, or the two phases of a
// layer-wise rule), handed to optim::sharded_optimizer. Only that may be reported, not an optimizer requirement.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/optim/sharded.hpp"

struct rule_state {
    std::uint64_t steps = 0;
    std::array<hitch::tensor_view<float>, 0> buffers() const { return {}; }
};

struct unmarked_rule {
    struct options_type {
        void validate() const {}
    };
    template <class D>
    using state_type = rule_state;
    unmarked_rule() = default;
    explicit unmarked_rule(const options_type&) {}
    const options_type& options() const { return options_; }
    static constexpr std::string_view name = "mine";
    template <class D>
    rule_state make_state(D&, std::size_t) const {
        return {};
    }
    void step(const hitch::layer&, rule_state&, float, const hitch::parallel_options&) const {}
    options_type options_;
};

int main() {
    hitch::optim::sharded_optimizer<unmarked_rule> opt({}, std::vector<hitch::layer>{}, {});
    opt.step(0.1f, [](std::span<double>) {});
}
