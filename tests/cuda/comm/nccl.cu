// cuda::nccl over the real NCCL, one rank per GPU on threads of this process (bootstrapped over comm::local).
// [one-gpu]: as many ranks as there are GPUs (one on a one-GPU machine): the communicator suite, device messages,
// mismatches, deadlines, ncclAllReduce through allreduce_native, hitch's schedules, splits; and what NCCL says to two
// ranks on one GPU. [multi-gpu]: checks that need two ranks or more (hitch_test_cuda_nccl_multi skips them, with
// 77, on a machine with fewer GPUs: NCCL refuses two ranks of one communicator on one GPU).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gpu_checks.hpp"

using hitch::cuda::nccl;
using hitch_test::expect;

namespace {

void everything(nccl& comm) {
    hitch::cuda::detail::check(cudaSetDevice(comm.rank() % hitch::cuda::device_count()), "cudaSetDevice");
    hitch_test::ordered_delivery(comm, 8);
    hitch_test::message_sizes(comm, {0, 1, 7, 4096, 1 << 20});
    hitch_test::many_outstanding(comm, 60);
    hitch_test::any_source_with_probe(comm);
    hitch_test::bad_arguments(comm);
    hitch_test::size_mismatch_reported(comm);
    hitch_test::device_messages(comm);
    hitch_test::device_mismatch(comm);
    hitch_test::device_timeout(comm);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, (std::size_t{1} << 20) + 3}) {
        hitch_test::native_device<float>(comm, n);
        hitch_test::native_device<double>(comm, n);
        hitch_test::native_device<hitch::half>(comm, n);
        hitch_test::native_device<hitch::bfloat16>(comm, n);
    }
    hitch_test::schedules_host(comm);
    hitch_test::schedules_device(comm);
    nccl sub = comm.split(comm.rank() % 2, comm.size() - comm.rank());
    hitch_test::device_messages(sub);
    hitch_test::native_device<float>(sub, 1000);
    hitch_test::split_groups(comm);
    comm.barrier();
}

}  // namespace

TEST_CASE("cuda::nccl on every GPU: suite, device messages, deadlines, native all-reduce, schedules, splits",
          "[cuda][nccl][one-gpu]") {
    const int p = hitch::cuda::device_count();
    INFO(p << " GPUs");
    REQUIRE_NOTHROW(hitch::cuda::run_nccl_local(p, [](nccl& comm) { everything(comm); }));
    hitch::cuda::nccl_options staged;
    staged.stage_host_bytes = 0;  // host messages over NCCL too, staged through device memory
    REQUIRE_NOTHROW(hitch::cuda::run_nccl_local(
        p,
        [](nccl& comm) {
            hitch::cuda::detail::check(cudaSetDevice(comm.rank() % hitch::cuda::device_count()), "cudaSetDevice");
            hitch_test::ordered_delivery(comm, 8);
            hitch_test::message_sizes(comm, {0, 1, 7, 4096, 1 << 20});
            hitch_test::size_mismatch_reported(comm);
            hitch_test::schedules_host(comm);
        },
        staged));
}

TEST_CASE("cuda::nccl: two ranks on one GPU meet NCCL's duplicate-GPU rule", "[cuda][nccl][one-gpu]") {
    // NCCL 2.28's init compares every pair of ranks on one host by PCI bus id and fails with ncclInvalidUsage
    // ("Duplicate GPU detected"). cuda::nccl must report that on both ranks, within its deadline, as comm_error.
    hitch::cuda::nccl_options same;
    same.device = 0;
    same.timeout_s = 30;
    std::vector<std::string> errors(2);
    std::vector<int> created(2, 0);
    hitch::comm::local_world world(2);
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            try {
                hitch::comm::local c = world.communicator(r);
                nccl comm = hitch::cuda::nccl_over(c, same);
                created[static_cast<std::size_t>(r)] = 1;
                hitch_test::device_messages(comm);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
    CHECK(took < 45.0);
    if (created[0] != 0 && created[1] != 0) {
        WARN("NCCL accepted two ranks of one communicator on GPU 0; they exchanged device messages: "
             << (errors[0].empty() && errors[1].empty() ? "correctly" : "with errors"));
        CHECK(errors[0].empty());
        CHECK(errors[1].empty());
    } else {
        for (const std::string& e : errors) {
            CHECK_FALSE(e.empty());
            CHECK((e.find("Duplicate GPU") != std::string::npos || e.find("invalid usage") != std::string::npos ||
                   e.find("aborted") != std::string::npos));
        }
    }
}

TEST_CASE("cuda::nccl on 2+ GPUs: a rank that never comes to the native all-reduce is named",
          "[cuda][nccl][multi-gpu]") {
    const int p = hitch::cuda::device_count();
    hitch::cuda::nccl_options quick;
    quick.timeout_s = 3;
    std::vector<std::string> errors(static_cast<std::size_t>(p));
    hitch::comm::local_options lo;
    lo.timeout_s = 30;
    hitch::comm::local_world world(p, lo);
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r)
        threads.emplace_back([&, r] {
            try {
                hitch::comm::local c = world.communicator(r);
                nccl comm = hitch::cuda::nccl_over(c, quick);
                hitch::cuda::detail::check(cudaSetDevice(comm.rank()), "cudaSetDevice");
                hitch_test::device_messages(comm);
                if (comm.rank() == p - 1) return;  // never comes
                hitch_test::device_array<float> d(1000);
                comm.allreduce_native(d.span(), hitch::reduce_op::sum, hitch::deadline(comm.timeout()));
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r + 1 < p; ++r) {
        INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
        CHECK(errors[static_cast<std::size_t>(r)].find("rank " + std::to_string(p - 1) + " did not arrive") !=
              std::string::npos);
    }
}

TEST_CASE("cuda::nccl on 2+ GPUs: every schedule against the reference, sub-communicators by parity",
          "[cuda][nccl][multi-gpu]") {
    const int p = hitch::cuda::device_count();
    REQUIRE_NOTHROW(hitch::cuda::run_nccl_local(p, [](nccl& comm) {
        hitch::cuda::detail::check(cudaSetDevice(comm.rank()), "cudaSetDevice");
        hitch_test::schedules_host(comm);
        hitch_test::schedules_device(comm);
        nccl pairs = comm.split(comm.rank() / 2, comm.rank());
        hitch_test::device_messages(pairs);
        hitch_test::native_device<hitch::bfloat16>(pairs, 4099);
    }));
}
