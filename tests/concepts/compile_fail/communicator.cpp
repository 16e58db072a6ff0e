// Must NOT compile: a communicator without barrier() and split(), handed to comm::agree. Only the first (the
// barrier) may be reported.
#include <span>
#include <string>
#include <string_view>

#include "hitch/comm/agree.hpp"

struct communicator_without_barrier {
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
    request isend(std::span<const T>, int, int) {
        return {};
    }
    template <class T>
    request irecv(std::span<T>, int, int) {
        return {};
    }
    hitch::message_info probe(int, int) { return {}; }
    int max_tag() const { return 100; }
    hitch::seconds_f timeout() const { return hitch::seconds_f(1); }
    void set_timeout(hitch::seconds_f) {}
    static constexpr std::string_view name = "mine";
    // no barrier(), no split()
};

int main() {
    communicator_without_barrier comm;
    hitch::comm::agree(comm, 42, "value");
}
