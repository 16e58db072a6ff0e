// Must NOT compile: a schedule that spells its options the old way (a nested `options`, no options()) and has
// no cost(), handed to allreduce::allreduce. Only the first (the options) may be reported.
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/comm/local.hpp"

struct schedule_with_old_options {
    struct options {
        void validate() const {}
    };
    static constexpr std::string_view name = "mine";
    schedule_with_old_options() = default;
    explicit schedule_with_old_options(const options&) {}
    // no cost()
    template <class Transport, class T>
    void run(Transport&, std::span<T>, hitch::reduce_op) const {}
};

int main() {
    hitch::comm::run_local(1, [](hitch::comm::local& comm) {
        hitch::allreduce::group g(comm);
        std::vector<float> v(4);
        hitch::allreduce::allreduce<schedule_with_old_options>(g, hitch::view(v));
    });
}
