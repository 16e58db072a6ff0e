// Must NOT compile: a type without barrier() and split() passed to a hitch algorithm. The build's output must name
// the missing requirement (checked by the ctest that builds this file).
#include <span>
#include <string>
#include <string_view>

#include "hitch/comm/agree.hpp"

struct almost_a_communicator {
    struct request {
        bool test() { return true; }
        void wait() {}
        void wait(const hitch::deadline&) {}
        hitch::message_info status() const { return {}; }
        std::string describe() const { return {}; }
    };
    int rank() const { return 0; }
    int size() const { return 1; }
    template <class T>
    request isend(std::span<const T>, int, int) { return {}; }
    template <class T>
    request irecv(std::span<T>, int, int) { return {}; }
    hitch::message_info probe(int, int) { return {}; }
    int max_tag() const { return 100; }
    hitch::seconds_f timeout() const { return hitch::seconds_f(1); }
    void set_timeout(hitch::seconds_f) {}
    std::string_view name() const { return "almost"; }
    // no barrier(), no split()
};

int main() {
    almost_a_communicator comm;
    hitch::comm::agree(comm, 42, "value");
}
