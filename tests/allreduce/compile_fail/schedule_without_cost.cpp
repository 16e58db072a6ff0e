// Must NOT compile: a schedule type without cost() passed to hitch::allreduce::allreduce. The build's output must
// carry the static_assert that names the missing member (checked by the ctest that builds this file).
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/comm/local.hpp"

struct schedule_without_cost {
    struct options {
        void validate() const {}
    };
    static constexpr std::string_view name = "incomplete";
    schedule_without_cost() = default;
    explicit schedule_without_cost(const options&) {}
    template <class C, class T>
    void run(hitch::allreduce::transport<C>&, std::span<T>, hitch::allreduce::reduce_op) const {}
};

int main() {
    hitch::comm::run_local(1, [](hitch::comm::local& comm) {
        hitch::allreduce::group g(comm);
        std::vector<float> v(4);
        hitch::allreduce::allreduce<schedule_without_cost>(g, hitch::view(v));
    });
}
