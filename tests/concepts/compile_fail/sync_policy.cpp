// Must NOT compile: a sync policy without step() and without save_state()/load_state(), handed to
// data_parallel. Only the first (the step) may be reported.
#include <string_view>

#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"

struct policy_without_step {
    struct options_type {
        void validate() const {}
    };
    static constexpr std::string_view name = "mine";
    static constexpr bool exchanges_gradients = true;
    policy_without_step() = default;
    explicit policy_without_step(const options_type&) {}
    const options_type& options() const { return options_; }
    // no step() / staleness(), no save_state() / load_state()
    options_type options_;
};

int main() {
    using trainer = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, policy_without_step>;
    return static_cast<int>(sizeof(trainer));
}
