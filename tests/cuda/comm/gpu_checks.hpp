#pragma once
// Checks of cuda::nccl over the real NCCL, shared by the thread (nccl.cu) and process (nccl_mpi.cu) tests. Each is
// collective; failures throw (Catch2's assertions are not thread-safe).

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../../allreduce/reference.hpp"
#include "../../comm/suite.hpp"
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/cuda/allreduce/collectives.cuh"
#include "hitch/cuda/nccl.hpp"

namespace hitch_test {

/// Device memory of the calling rank's current GPU.
template <class T>
class device_array {
public:
    explicit device_array(std::size_t n) : n_(n) {
        hitch::cuda::detail::check(cudaMalloc(&p_, (n == 0 ? 1 : n) * sizeof(T)), "cudaMalloc");
    }
    device_array(const device_array&) = delete;
    device_array& operator=(const device_array&) = delete;
    ~device_array() { cudaFree(p_); }
    [[nodiscard]] T* data() const noexcept { return p_; }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] std::span<T> span() const noexcept { return {p_, n_}; }
    void put(const std::vector<T>& v) {
        hitch::cuda::detail::check(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    [[nodiscard]] std::vector<T> get() const {
        std::vector<T> v(n_);
        hitch::cuda::detail::check(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
        return v;
    }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

/// Ring exchange of device buffers of several sizes, and device <-> host in both directions.
inline void device_messages(hitch::cuda::nccl& comm) {
    const int p = comm.size(), me = comm.rank();
    const int next = (me + 1) % p, prev = (me - 1 + p) % p;
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20, (std::size_t{1} << 20) + 3}) {
        std::vector<std::uint32_t> out(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = pattern(me, n, i);
        device_array<std::uint32_t> send(n), recv(n);
        send.put(out);
        auto r = comm.irecv(recv.span(), prev, 5);
        auto s = comm.isend(std::span<const std::uint32_t>(send.span()), next, 5);
        r.wait();
        s.wait();
        const auto got = recv.get();
        for (std::size_t i = 0; i < n; ++i)
            if (got[i] != pattern(prev, n, i)) expect(false, "device message of " + std::to_string(n) + " corrupted");
        // device -> host and host -> device
        std::vector<std::uint32_t> host_in(n, 0);
        auto r2 = comm.irecv(std::span<std::uint32_t>(host_in), prev, 6);
        auto s2 = comm.isend(std::span<const std::uint32_t>(send.span()), next, 6);
        r2.wait();
        s2.wait();
        for (std::size_t i = 0; i < n; ++i)
            if (host_in[i] != pattern(prev, n, i)) expect(false, "device -> host message corrupted");
        device_array<std::uint32_t> dev_in(n);
        auto r3 = comm.irecv(dev_in.span(), prev, 7);
        auto s3 = comm.isend(std::span<const std::uint32_t>(out), next, 7);
        r3.wait();
        s3.wait();
        const auto got3 = dev_in.get();
        for (std::size_t i = 0; i < n; ++i)
            if (got3[i] != pattern(prev, n, i)) expect(false, "host -> device message corrupted");
    }
    comm.barrier();
}

/// A device receive of the wrong size is comm_error; nothing moves and the communicator goes on.
inline void device_mismatch(hitch::cuda::nccl& comm) {
    device_array<float> out(100), in(99);
    out.put(std::vector<float>(100, 1.0f));
    auto s = comm.isend(std::span<const float>(out.span()), comm.rank(), 77);
    bool reported = false;
    try {
        comm.irecv(in.span(), comm.rank(), 77).wait();
    } catch (const hitch::comm_error& e) {
        reported = std::string(e.what()).find("mismatch") != std::string::npos;
    }
    s.wait();
    expect(reported, "a device receive of the wrong size must be reported");
    device_messages(comm);
}

/// A device receive nobody sends to times out within its deadline; then the communicator goes on.
inline void device_timeout(hitch::cuda::nccl& comm) {
    const auto saved = comm.timeout();
    comm.set_timeout(hitch::seconds_f(0.5));
    device_array<float> in(16);
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    try {
        comm.irecv(in.span(), comm.rank(), 88).wait();
    } catch (const hitch::timeout_error& e) {
        timed_out = std::string(e.what()).find("tag 88") != std::string::npos;
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    comm.set_timeout(saved);
    expect(timed_out && took < 3.0, "a device receive nobody sends to times out, naming its tag");
    expect(comm.aborted().empty(), "a receive withdrawn before NCCL had it leaves the communicator usable");
    device_messages(comm);
}

/// ncclAllReduce through cuda::nccl on device buffers, every type and op, against the serial reference (inputs
/// are small integers, so any order of summation gives the reference's bytes); min and max keep NaN.
template <class T>
void native_device(hitch::cuda::nccl& comm, std::size_t n) {
    using hitch::allreduce::reduce_op;
    const auto value = [](int r, std::size_t i) { return exact_value<T>(r, i, 99); };
    for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max}) {
        device_array<T> d(n);
        d.put(make_input<T>(comm.rank(), n, value));
        comm.allreduce_native(d.span(), op, hitch::deadline(comm.timeout()));
        const auto got = d.get();
        const auto want = reference<T>(comm.size(), n, op, value);
        const long bad = first_difference(std::span<const T>(got), std::span<const T>(want));
        expect(bad < 0, "native all-reduce on device memory differs at element " + std::to_string(bad));
    }
    // NaN on one rank at element 3 survives min and max on every rank.
    for (reduce_op op : {reduce_op::min, reduce_op::max}) {
        std::vector<T> in = make_input<T>(comm.rank(), n, value);
        if (n > 3 && comm.rank() == comm.size() - 1) in[3] = T(std::numeric_limits<float>::quiet_NaN());
        device_array<T> d(n);
        d.put(in);
        comm.allreduce_native(d.span(), op, hitch::deadline(comm.timeout()));
        const auto got = d.get();
        if (n > 3) expect(std::isnan(static_cast<float>(got[3])), "min/max must keep a NaN from any rank");
        if (n > 4) expect(!std::isnan(static_cast<float>(got[4])), "and only where there was one");
    }
}

/// hitch's schedules and collectives over cuda::nccl on host buffers (inline or staged over NCCL).
inline void schedules_host(hitch::cuda::nccl& comm) {
    namespace ar = hitch::allreduce;
    ar::group g(comm);
    const auto value = [](int r, std::size_t i) { return exact_value<float>(r, i, 5); };
    const auto check = [&](const auto& schedule, ar::reduce_op op, std::size_t n) {
        std::vector<float> data = make_input<float>(comm.rank(), n, value);
        ar::allreduce(g, hitch::view(data), op, schedule);
        const auto want = reference<float>(comm.size(), n, op, value);
        expect(first_difference(std::span<const float>(data), std::span<const float>(want)) < 0,
               std::string(std::decay_t<decltype(schedule)>::name) + " over cuda::nccl differs from the reference");
    };
    for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{100003}})
        for (ar::reduce_op op : {ar::reduce_op::sum, ar::reduce_op::average, ar::reduce_op::min, ar::reduce_op::max}) {
            check(ar::ring{}, op, n);
            check(ar::recursive_doubling{}, op, n);
            check(ar::rabenseifner{}, op, n);
            check(ar::binary_tree{}, op, n);
            check(ar::double_binary_tree{}, op, n);
            check(ar::native{}, op, n);
            check(ar::automatic{}, op, n);
        }
}

/// hitch's collectives on GPU buffers over cuda::nccl (hitch/cuda/allreduce): the ring goes direct, its segments as
/// NCCL transfers between device buffers (cuda::nccl carries device memory); the others are staged; every result
/// against the serial reference.
inline void schedules_device(hitch::cuda::nccl& comm) {
    namespace ar = hitch::allreduce;
    ar::group g(comm);
    const auto value = [](int r, std::size_t i) { return exact_value<float>(r, i, 11); };
    const auto check = [&](const auto& schedule, ar::reduce_op op, std::size_t n) {
        device_array<float> d(n);
        d.put(make_input<float>(comm.rank(), n, value));
        ar::allreduce(g, hitch::tensor_view<float>(d.data(), n, hitch::memory_space::cuda), op, schedule);
        const auto got = d.get();
        const auto want = reference<float>(comm.size(), n, op, value);
        expect(first_difference(std::span<const float>(got), std::span<const float>(want)) < 0,
               std::string(std::decay_t<decltype(schedule)>::name) + " on GPU buffers over cuda::nccl differs");
    };
    for (std::size_t n : {std::size_t{1}, std::size_t{4099}, (std::size_t{1} << 22) + 5})
        for (ar::reduce_op op : {ar::reduce_op::sum, ar::reduce_op::average, ar::reduce_op::max}) {
            check(ar::ring{}, op, n);
            check(ar::binary_tree{}, op, n);
            check(ar::native{}, op, n);
            check(ar::automatic{}, op, n);
        }
}

}  // namespace hitch_test
