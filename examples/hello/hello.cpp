// The smallest end-to-end hitch program: every MPI rank holds a vector, the ranks agree on its size, exchange
// halves around a ring and sum them (a reduce-scatter followed by an all-gather), and every rank checks the
// result against the closed form. Run: mpiexec -n 2 build/examples/hello/hitch-hello
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/comm/mpi.hpp"

int main(int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    const int p = comm.size(), me = comm.rank();
    const std::size_t n = std::size_t{1} << 20;
    hitch::comm::agree(comm, n, "hello: vector length");

    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(me + 1) * static_cast<float>(i % 1000);

    // Ring reduce-scatter: after p-1 steps rank r owns the full sum of block (r + 1) % p.
    const auto block = [&](int b) {
        const std::size_t begin = n * static_cast<std::size_t>(b) / static_cast<std::size_t>(p);
        const std::size_t end = n * static_cast<std::size_t>(b + 1) / static_cast<std::size_t>(p);
        return std::span<float>(x.data() + begin, end - begin);
    };
    const int next = (me + 1) % p, prev = (me - 1 + p) % p;
    std::vector<float> incoming(n / static_cast<std::size_t>(p) + 1);
    for (int step = 0; step < p - 1; ++step) {
        const auto out = block((me - step + p) % p);
        const auto in = block((me - step - 1 + p) % p);
        auto r = comm.irecv(std::span<float>(incoming.data(), in.size()), prev, 0);
        auto s = comm.isend(std::span<const float>(out), next, 0);
        r.wait();
        s.wait();
        for (std::size_t i = 0; i < in.size(); ++i) in[i] += incoming[i];
    }
    // Ring all-gather of the owned sums.
    for (int step = 0; step < p - 1; ++step) {
        const auto out = block((me + 1 - step + p) % p);
        const auto in = block((me - step + p) % p);
        auto r = comm.irecv(in, prev, 1);
        auto s = comm.isend(std::span<const float>(out), next, 1);
        r.wait();
        s.wait();
    }

    const float ranks_sum = static_cast<float>(p * (p + 1) / 2);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i)
        if (x[i] != ranks_sum * static_cast<float>(i % 1000)) ++wrong;
    const bool all_right = !hitch::comm::any_of(comm, wrong != 0);
    if (me == 0)
        std::printf("hitch hello: %d ranks summed %zu floats: %s\n", p, n,
                    all_right ? "every element on every rank matches the closed form" : "MISMATCH");
    return all_right ? 0 : 1;
}
