// shm_death ROLE WAY (3 MPI ranks, one node, the staged path): rank 1 dies WAY (exit: std::_Exit(1), without
// MPI_Finalize; kill: SIGKILL) inside a call, ROLE: holder (it has received a message lent in place from rank 0's
// pipe and holds that slot; rank 0 goes on sending until its pipe to rank 1 is full) or sender (it dies part-way
// through sending a 4 MiB message of many pieces, which rank 0 then takes from its pipe). Rank 2 waits in the same call
// for a message from rank 1. Each survivor prints "rank R: <what it caught>" on standard error and returns 1 (the
// watchdog then ends its MPI_Finalize, which cannot complete without rank 1). Rank 0 prints "pid P" first, so
// tests/allreduce/run_shm_death.cmake can check that nothing named after it is left in /dev/shm.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/mpi.hpp"

using namespace hitch::allreduce;

namespace {

[[noreturn]] void die(const std::string& way) {
    if (way == "kill") ::kill(::getpid(), SIGKILL);
    std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s holder|sender exit|kill\n", argv[0]);
        return 2;
    }
    const std::string role = argv[1], way = argv[2];
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    const int me = comm.rank();
    if (me == 0) {
        std::printf("pid %ld\n", static_cast<long>(::getpid()));
        std::fflush(stdout);
    }
    group g(comm);
    call_options o;
    o.check = false;
    const auto describe = [] {
        call_descriptor d;
        d.operation = static_cast<std::uint8_t>(operation::allreduce);
        d.set_schedule("shm-death");
        return d;
    };
    try {
        bool staged = false;
        g.run(o, describe, [&](transport<hitch::comm::mpi>& t, const call_descriptor&) { staged = t.staged(); });
        if (!staged) throw std::runtime_error("the staged path was not taken");
        comm.barrier();
        g.run(o, describe, [&](transport<hitch::comm::mpi>& t, const call_descriptor&) {
            if (role == "holder") {
                if (me == 0) {
                    std::vector<std::vector<float>> out(40, std::vector<float>(1000, 1.0f));
                    std::vector<transport<hitch::comm::mpi>::outgoing> sends;
                    for (auto& m : out) sends.push_back(t.send<float>(1, 0, std::span<const float>(m)));
                    for (auto& s : sends) s.wait(t.limit());
                } else if (me == 1) {
                    std::vector<float> slot(1000);
                    auto r = t.receive<float>(0, 0, slot.size(), std::span<float>(slot));
                    r.wait(t.limit());  // lent in place: rank 0's slot is held from here on
                    die(way);
                }
            } else {
                if (me == 1) {
                    std::vector<float> big(std::size_t{1} << 20, 2.0f);
                    auto s = t.send<float>(0, 0, std::span<const float>(big));
                    for (int i = 0; i < 200; ++i) (void)s.test();  // some pieces leave
                    die(way);
                } else if (me == 0) {
                    // Only once rank 1 is gone: its sends can fill the pipe (16 slots of 64 KiB) and no more, so
                    // the 4 MiB message is cut off part-way however fast the two ranks run.
                    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
                    std::vector<float> in(std::size_t{1} << 20);
                    auto r = t.receive_into<float>(1, 0, std::span<float>(in));
                    r.wait(t.limit());
                }
            }
            if (me == 2) {
                std::vector<float> in(10);
                auto r = t.receive_into<float>(1, 1, std::span<float>(in));
                r.wait(t.limit());
            }
        });
        std::fprintf(stderr, "rank %d: no error\n", me);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", me, e.what());
        std::fflush(stderr);
        return 1;
    }
}
