// The reduce kernels (hitch/cuda/allreduce/reduce.cuh) against the host's combine, combine_many and divide, bit for
// bit: every op and element type, edge values paired with each other and random values at sizes 0, 1, 31, 32, 33
// and 1<<20 + 3, the destination apart from, or the same as, either operand. A sum of two NaNs is compared by
// NaN-ness only (the host's payload depends on how its compiler ordered the addition). Skips (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "combine_cases.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/cuda/allreduce/reduce.cuh"

namespace {

namespace ca = hitch::cuda::allreduce;
using hitch::reduce_op;

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max};

void cuda_ok(cudaError_t e, const char* what) {
    INFO(what << ": " << cudaGetErrorString(e));
    REQUIRE(e == cudaSuccess);
}

/// Device memory for the test's buffers.
template <class T>
class device_array {
public:
    explicit device_array(std::size_t n) : n_(n) {
        cuda_ok(cudaMalloc(&p_, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    }
    explicit device_array(const std::vector<T>& v) : device_array(v.size()) { upload(v); }
    device_array(const device_array&) = delete;
    device_array& operator=(const device_array&) = delete;
    ~device_array() { cudaFree(p_); }
    void upload(const std::vector<T>& v) {
        cuda_ok(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    }
    [[nodiscard]] std::vector<T> download() const {
        std::vector<T> v(n_);
        cuda_ok(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return v;
    }
    [[nodiscard]] T* get() const noexcept { return p_; }

private:
    T* p_ = nullptr;
    std::size_t n_;
};

template <class T>
void expect_same(const std::vector<T>& gpu, const std::vector<T>& host, const std::vector<T>& left,
                 const std::vector<T>& right, reduce_op op, const std::string& what) {
    REQUIRE(gpu.size() == host.size());
    std::size_t mismatches = 0;
    std::string first;
    for (std::size_t i = 0; i < host.size(); ++i) {
        const bool open = hitch_test::payload_open(op, left[i], right[i]);
        const bool same = open ? hitch_test::nan(host[i]) && hitch_test::nan(gpu[i])
                               : hitch_test::bits_of(host[i]) == hitch_test::bits_of(gpu[i]);
        if (!same && mismatches++ == 0)
            first = what + ": element " + std::to_string(i) + ": host bits " +
                    std::to_string(hitch_test::bits_of(host[i])) + ", GPU bits " +
                    std::to_string(hitch_test::bits_of(gpu[i])) + " (left " +
                    std::to_string(hitch_test::bits_of(left[i])) + ", right " +
                    std::to_string(hitch_test::bits_of(right[i])) + ")";
    }
    INFO(first);
    CHECK(mismatches == 0);
}

template <class T>
void check_combine(const std::vector<T>& left, const std::vector<T>& right, const std::string& label) {
    const std::size_t n = left.size();
    const device_array<T> l(left), r(right);
    device_array<T> out(n);
    for (reduce_op op : all_ops)
        for (int divisor : {1, 3, 8}) {
            const std::string what = label + " " + std::string(hitch::name(op)) + " / " + std::to_string(divisor);
            std::vector<T> host(n);
            hitch::allreduce::combine(host.data(), left.data(), right.data(), n, op, divisor);
            ca::combine(out.get(), l.get(), r.get(), n, op, divisor, nullptr);
            cuda_ok(cudaDeviceSynchronize(), "combine apart");
            expect_same(out.download(), host, left, right, op, what + " (apart)");
            // In place, either side: the host's in-place kernels are separate loops, so compare with each.
            std::vector<T> host_left = left, host_right = right;
            hitch::allreduce::combine(host_left.data(), host_left.data(), right.data(), n, op, divisor);
            hitch::allreduce::combine(host_right.data(), left.data(), host_right.data(), n, op, divisor);
            device_array<T> in_left(left), in_right(right);
            ca::combine(in_left.get(), in_left.get(), r.get(), n, op, divisor, nullptr);
            ca::combine(in_right.get(), l.get(), in_right.get(), n, op, divisor, nullptr);
            cuda_ok(cudaDeviceSynchronize(), "combine in place");
            expect_same(in_left.download(), host_left, left, right, op, what + " (dst = left)");
            expect_same(in_right.download(), host_right, left, right, op, what + " (dst = right)");
        }
}

template <class T>
void check_type(const char* type) {
    const std::vector<T> e = hitch_test::edges<T>();
    std::vector<T> left, right;
    for (T a : e)
        for (T b : e) {
            left.push_back(a);
            right.push_back(b);
        }
    check_combine(left, right, std::string(type) + " edges");
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                          (std::size_t{1} << 20) + 3})
        check_combine(hitch_test::random_values<T>(n, 3 + n), hitch_test::random_values<T>(n, 101 + n),
                      std::string(type) + " random n=" + std::to_string(n));
}

template <class T>
void check_many_and_divide(const char* type) {
    const std::size_t n = (std::size_t{1} << 16) + 33;
    for (std::size_t k : {1u, 2u, 3u, 5u, 9u}) {
        std::vector<std::vector<T>> sources;
        std::vector<const T*> host_pointers;
        std::vector<std::unique_ptr<device_array<T>>> device;
        std::vector<const T*> device_pointers;
        const std::vector<T> e = hitch_test::edges<T>();
        for (std::size_t s = 0; s < k; ++s) {
            auto v = hitch_test::random_values<T>(n, 500 + s);
            for (std::size_t i = 0; i < 256; ++i) v[i] = e[(i / (s + 1)) % e.size()];  // edges meet edges
            sources.push_back(v);
            device.push_back(std::make_unique<device_array<T>>(v));
        }
        for (std::size_t s = 0; s < k; ++s) {
            host_pointers.push_back(sources[s].data());
            device_pointers.push_back(device[s]->get());
        }
        device_array<const T*> table(device_pointers);
        for (reduce_op op : all_ops)
            for (int divisor : {1, static_cast<int>(k) + 2}) {
                std::vector<T> host(n);
                hitch::allreduce::combine_many(host.data(), host_pointers.data(), k, n, op, divisor);
                device_array<T> out(n);
                ca::combine_many(out.get(), table.get(), k, n, op, divisor, nullptr);
                cuda_ok(cudaDeviceSynchronize(), "combine_many");
                // Where two NaNs (or inf and -inf, then a NaN) meet in a sum, the payload is open.
                std::vector<T> l(n, T(1.0f)), r(n, T(1.0f));
                for (std::size_t i = 0; i < n; ++i) {
                    int nans = 0;
                    bool plus = false, minus = false;
                    for (std::size_t s = 0; s < k; ++s) {
                        const T x = sources[s][i];
                        nans += hitch_test::nan(x) ? 1 : 0;
                        plus = plus || (!hitch_test::nan(x) && static_cast<double>(x) == HUGE_VAL);
                        minus = minus || (!hitch_test::nan(x) && static_cast<double>(x) == -HUGE_VAL);
                    }
                    if (nans + (plus && minus ? 1 : 0) >= 2) l[i] = r[i] = std::numeric_limits<T>::quiet_NaN();
                }
                expect_same(out.download(), host, l, r, op,
                            std::string(type) + " combine_many k=" + std::to_string(k) + " " +
                                std::string(hitch::name(op)) + " / " + std::to_string(divisor));
                // dst may be one of the sources
                std::vector<T> host_alias = sources[0];
                std::vector<const T*> alias_pointers = host_pointers;
                alias_pointers[0] = host_alias.data();
                hitch::allreduce::combine_many(host_alias.data(), alias_pointers.data(), k, n, op, divisor);
                device_array<T> first(sources[0]);
                std::vector<const T*> alias_device = device_pointers;
                alias_device[0] = first.get();
                device_array<const T*> alias_table(alias_device);
                ca::combine_many(first.get(), alias_table.get(), k, n, op, divisor, nullptr);
                cuda_ok(cudaDeviceSynchronize(), "combine_many in place");
                expect_same(first.download(), host_alias, l, r, op, std::string(type) + " combine_many in place");
            }
    }
    for (int divisor : {1, 2, 3, 7}) {
        std::vector<T> values = hitch_test::random_values<T>(n, 77);
        const std::vector<T> e = hitch_test::edges<T>();
        std::copy(e.begin(), e.end(), values.begin());
        std::vector<T> host = values;
        hitch::allreduce::divide(host.data(), n, divisor);
        device_array<T> d(values);
        ca::divide(d.get(), n, divisor, nullptr);
        cuda_ok(cudaDeviceSynchronize(), "divide");
        expect_same(d.download(), host, values, values, reduce_op::min,
                    std::string(type) + " divide / " + std::to_string(divisor));
    }
}

}  // namespace

TEST_CASE("combine on the GPU is allreduce::combine, float", "[cuda][allreduce]") { check_type<float>("float"); }
TEST_CASE("combine on the GPU is allreduce::combine, double", "[cuda][allreduce]") { check_type<double>("double"); }
TEST_CASE("combine on the GPU is allreduce::combine, half", "[cuda][allreduce]") { check_type<hitch::half>("half"); }
TEST_CASE("combine on the GPU is allreduce::combine, bfloat16", "[cuda][allreduce]") {
    check_type<hitch::bfloat16>("bfloat16");
}

TEST_CASE("combine_many and divide on the GPU are the host's", "[cuda][allreduce]") {
    check_many_and_divide<float>("float");
    check_many_and_divide<double>("double");
    check_many_and_divide<hitch::half>("half");
    check_many_and_divide<hitch::bfloat16>("bfloat16");
}

TEST_CASE("combine by run-time element type, on a stream", "[cuda][allreduce]") {
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const auto left = hitch_test::random_values<hitch::half>(1000, 1);
    const auto right = hitch_test::random_values<hitch::half>(1000, 2);
    std::vector<hitch::half> host(1000);
    hitch::allreduce::combine(host.data(), left.data(), right.data(), 1000, reduce_op::average, 4);
    const device_array<hitch::half> l(left), r(right);
    device_array<hitch::half> out(1000);
    ca::combine(hitch::dtype::f16, out.get(), l.get(), r.get(), 1000, reduce_op::average, 4, stream);
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    expect_same(out.download(), host, left, right, reduce_op::average, "dtype f16");
    CHECK_THROWS_AS(ca::combine(hitch::dtype::i32, out.get(), l.get(), r.get(), 10, reduce_op::sum, 1, stream),
                    hitch::config_error);
    cudaStreamDestroy(stream);
}
