// Must NOT compile: a rule without step() handed to optim::model_optimizer. The build's output must name the
// missing requirement, optimizer_has_step (checked by the ctest that builds this file).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hitch/optim/model_optimizer.hpp"

struct no_step_state {
    std::uint64_t steps = 0;
    std::array<hitch::tensor_view<float>, 0> buffers() const { return {}; }
};

struct rule_without_step {
    struct options_type {};
    template <class D>
    using state_type = no_step_state;
    rule_without_step() = default;
    explicit rule_without_step(options_type) {}
    const options_type& options() const { return o_; }
    static std::string id() { return "no-step"; }
    template <class D>
    no_step_state make_state(D&, std::size_t) const { return {}; }
    options_type o_;
};

int main() {
    hitch::optim::model_optimizer<rule_without_step> opt({}, std::vector<hitch::optim::layer>{});
    opt.step(0.1f);
}
