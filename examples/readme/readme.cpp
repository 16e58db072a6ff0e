#include <cstdio>
#include <hitch/hitch.hpp>

int main() {
    hitch::comm::run_local(4, [](hitch::comm::local& comm) {  // 4 ranks as threads; or comm::mpi under mpiexec
        std::vector<float> w(3, 0.0f), g(3);                  // a model: 3 weights and their gradients
        hitch::cpu device;
        hitch::data_parallel<hitch::optim::momentum> dp(comm, device, {{"w", hitch::view(w), hitch::view(g)}});
        for (int step = 0; step < 200; ++step) {
            for (int i = 0; i < 3; ++i)  // this rank's gradient of (w - target)^2 / 2,
                g[i] = w[i] - float(i + 1) + 0.1f * (float(comm.rank()) - 1.5f);  // noisy, unbiased over the ranks
            dp.step();                                                            // all-reduce, average, momentum step
        }
        if (comm.rank() == 0) std::printf("w = %.3f %.3f %.3f\n", w[0], w[1], w[2]);
    });
}
