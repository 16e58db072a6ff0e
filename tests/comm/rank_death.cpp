// rank_death WAY MOMENT (3 MPI ranks): the ranks train one 4 Mi-element layer with data_parallel over comm::mpi, and
// rank 2 dies WAY at MOMENT. WAY: exit0 (std::_Exit(0), no MPI_Finalize), exit1 (std::exit(1)), abort, kill
// (SIGKILL), term (SIGTERM). MOMENT: idle (between steps: the others go on to the next step), allreduce (inside a
// step's gradient all-reduce), save (inside a checkpoint save, with a large section of its own; the others go on
// to a barrier). Each survivor prints "rank R: <what it caught>" on standard error and returns 1; its MPI_Finalize
// then never completes without rank 2, and the watchdog ends it. tests/comm/run_rank_death.cmake runs every case
// and checks the messages, the exit status and the time.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"

namespace {

[[noreturn]] void die(const std::string& way) {
    if (way == "exit0") std::_Exit(0);
    if (way == "exit1") std::exit(1);
    if (way == "abort") std::abort();
    if (way == "kill") ::kill(::getpid(), SIGKILL);
    if (way == "term") ::kill(::getpid(), SIGTERM);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the signal ends it
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s exit0|exit1|abort|kill|term idle|allreduce|save DIR\n", argv[0]);
        return 2;
    }
    const std::string way = argv[1], moment = argv[2];
    const std::filesystem::path dir = argv[3];
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    std::vector<float> w(std::size_t{1} << 22, 0.5f), g(w.size(), 0.25f);
    hitch::cpu dev;
    using dp_t =
        hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hard, hitch::allreduce::ring>;
    dp_t::options o;
    o.bucket_bytes = std::size_t{16} << 20;
    dp_t dp(comm, dev, {{"w", hitch::view(w), hitch::view(g)}}, o);
    dp.step();  // every rank is up and has exchanged once
    const bool dies = comm.rank() == 2;
    try {
        if (moment == "idle") {
            if (dies) die(way);
            dp.step();
        } else if (moment == "allreduce") {
            // The exchange of 16 MiB between 3 processes takes tens of milliseconds: die a few into it.
            if (dies)
                std::thread([&] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    die(way);
                }).detach();
            dp.step();
            dp.step();
        } else {
            // A long write (64 MiB), built before the save starts so that the save itself is what takes time.
            std::vector<std::pair<std::string, std::vector<std::byte>>> extra;
            extra.emplace_back("big", std::vector<std::byte>(std::size_t{64} << 20, std::byte{7}));
            comm.barrier();  // all ranks start the save together: rank 2 dies while serialising or writing
            if (dies)
                std::thread([&] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(30));
                    die(way);
                }).detach();
            dp.save(dir / "ckpt", extra);
            comm.barrier();
        }
        std::fprintf(stderr, "rank %d: no error\n", comm.rank());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
        std::fflush(stderr);
        return 1;
    }
}
