// Must NOT compile: a rule that names itself the old way (a static id() function) and has no step(), handed to
// optim::model_optimizer. Only the first (the name) may be reported.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/optim/model_optimizer.hpp"

struct rule_state {
    std::uint64_t steps = 0;
    std::array<hitch::tensor_view<float>, 0> buffers() const { return {}; }
};

struct rule_with_id {
    struct options_type {
        void validate() const {}
    };
    template <class D>
    using state_type = rule_state;
    rule_with_id() = default;
    explicit rule_with_id(const options_type&) {}
    const options_type& options() const { return options_; }
    static std::string id() { return "mine"; }  // not `static constexpr std::string_view name`
    template <class D>
    rule_state make_state(D&, std::size_t) const {
        return {};
    }
    // no step()
    options_type options_;
};

int main() {
    hitch::optim::model_optimizer<rule_with_id> opt({}, std::vector<hitch::layer>{});
    opt.step(0.1f);
}
