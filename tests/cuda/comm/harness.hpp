#pragma once
// Thread ranks of cuda::nccl over the fake NCCL (fake_nccl.hpp) with comm::local as the control channel: the
// communicator under test is hitch::cuda::nccl itself, only its backend is the stand-in.

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/cuda/nccl/communicator.hpp"
#include "hitch/cuda/nccl/control.hpp"

namespace hitch_test {

/// The communicator of world rank `c.rank()` over `world`, with `c` itself (moved from: the caller must not use it
/// again) as its control channel. nccl_over() takes a split of its bootstrap instead; here the tests own `c`, and
/// not splitting it keeps creation's only collective step the communicator's own (whose timeouts name ranks).
inline hitch::cuda::nccl make_fake_nccl(hitch::comm::local& c, const std::shared_ptr<fake_nccl_world>& world,
                                        const hitch::cuda::nccl_options& options = {}) {
    const int rank = c.rank();
    auto control = std::make_unique<hitch::cuda::control_over<hitch::comm::local>>(std::move(c));
    return hitch::cuda::nccl(world->connect(rank), std::move(control), options);
}

/// Runs fn(comm, world) on p thread ranks over a fresh fake world; rethrows the first error (run_local's rules).
template <class F>
void run_fake_nccl(int p, F&& fn, fake_nccl_options fake = {}, hitch::cuda::nccl_options options = {}) {
    const auto world = fake_nccl_world::make(p, fake);
    hitch::comm::local_options local;
    local.timeout_s = options.timeout_s;
    hitch::comm::run_local(
        p,
        [&](hitch::comm::local& c) {
            hitch::cuda::nccl comm = make_fake_nccl(c, world, options);
            fn(comm, *world);
        },
        local);
}

/// What one rank saw: the message of what it threw ("" when it returned), and how long it ran.
struct rank_outcome {
    std::string error;
    std::string type;  // "timeout", "comm", "mismatch", "other" or ""
    double seconds = 0;
};

/// Runs fn(c, world) on p threads, each with its own comm::local rank, catching each rank's exception: for the
/// fault tests, where every rank's own error is the point (run_local would report only the first).
template <class F>
std::vector<rank_outcome> run_ranks(int p, const std::shared_ptr<fake_nccl_world>& world, F&& fn,
                                    double local_timeout_s = 60) {
    hitch::comm::local_options local;
    local.timeout_s = local_timeout_s;
    hitch::comm::local_world lw(p, local);
    std::vector<rank_outcome> out(static_cast<std::size_t>(p));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r)
        threads.emplace_back([&, r] {
            const auto start = std::chrono::steady_clock::now();
            rank_outcome& o = out[static_cast<std::size_t>(r)];
            try {
                hitch::comm::local c = lw.communicator(r);
                fn(c, world);
            } catch (const hitch::timeout_error& e) {
                o.error = e.what();
                o.type = "timeout";
            } catch (const hitch::mismatch_error& e) {
                o.error = e.what();
                o.type = "mismatch";
            } catch (const hitch::comm_error& e) {
                o.error = e.what();
                o.type = "comm";
            } catch (const std::exception& e) {
                o.error = e.what();
                o.type = "other";
            }
            o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
    for (auto& t : threads) t.join();
    return out;
}

}  // namespace hitch_test
