// Resume of a parameter-server policy in a new process, in deterministic order:
//   HITCH_TEST_POLICY=soft|ssp mpiexec -n 2 hitch_test_sync_resume <full|first|second> <n> <checkpoint prefix>
// full: 2n steps; first: n steps, save; second: load, n more. Prints "hash <rank> <parameter hash>" per rank;
// tests/train/run_resume.cmake checks that full and first + second agree bitwise. Momentum, staleness scaling
// (soft) and the clocks (ssp) put state in every part of the checkpoint: the workers' files and the shards'.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/data_parallel.hpp"
#include "model.hpp"

template <class P>
int run(hitch::comm::mpi& comm, const std::string& mode, int n, const std::string& prefix,
        const typename P::options_type& sync) {
    using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::none, P>;
    hitch_test::quad_model m({4000, 33, 1}, comm.rank());
    hitch::cpu dev;
    typename dp_t::options o;
    o.optimizer.momentum = 0.9f;
    o.learning_rate = hitch::lr::constant({0.05});
    o.sync = sync;
    dp_t dp(comm, dev, m.layers(), o);
    int begin = 0, end = 2 * n;
    if (mode == "first") end = n;
    if (mode == "second") {
        dp.load(prefix);
        begin = n;
    }
    for (int t = begin; t < end; ++t) {
        m.gradients(t);
        dp.step();
    }
    if (mode == "first") dp.save(prefix);
    dp.finish();
    std::printf("hash %d %016llx\n", comm.rank(), static_cast<unsigned long long>(dp.parameter_hash()));
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s full|first|second n prefix\n", argv[0]);
        return 2;
    }
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    const char* policy = std::getenv("HITCH_TEST_POLICY");
    const std::string which = policy != nullptr ? policy : "soft";
    if (which == "ssp") {
        hitch::sync::ssp::options_type o;
        o.staleness_bound = 1;
        o.server.deterministic = true;
        o.server.sharding = hitch::sync::shard_by::range;
        return run<hitch::sync::ssp>(comm, argv[1], std::atoi(argv[2]), argv[3], o);
    }
    hitch::sync::soft::options_type o;
    o.gradients_per_update = 1;
    o.server.deterministic = true;
    return run<hitch::sync::soft>(comm, argv[1], std::atoi(argv[2]), argv[3], o);
}
