#pragma once
// What the all-reduce tests compare against: a serial reference computed from every rank's input, input data whose
// sums are exact in every element type (so any reduction order must give the reference's bytes), and helpers to
// compare bytes across ranks.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "../comm/suite.hpp"  // hitch_test::expect
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch_test {

inline std::uint32_t mix(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/// Small integers in [-8, 8]: sums over up to 8 ranks are exact in half, bfloat16, float and double, so every
/// schedule, whatever its order of combination, must reproduce the reference exactly.
template <class T>
T exact_value(int rank, std::size_t i, std::uint32_t salt = 0) {
    const auto v =
        static_cast<int>(mix(static_cast<std::uint32_t>(rank) * 0x9e3779b9U ^ static_cast<std::uint32_t>(i) ^ salt) %
                         17U) -
        8;
    return T(static_cast<float>(v));
}

/// Values in [-1, 1) with full mantissas: the order of combination shows in the low bits.
template <class T>
T rough_value(int rank, std::size_t i, std::uint32_t salt = 0) {
    const std::uint32_t h =
        mix(static_cast<std::uint32_t>(rank + 1) * 0x85ebca6bU ^ static_cast<std::uint32_t>(i) * 0xc2b2ae35U ^ salt);
    return T(static_cast<float>(static_cast<double>(h) / 2147483648.0 - 1.0));
}

template <class T, class F>
std::vector<T> make_input(int rank, std::size_t n, F&& value) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = value(rank, i);
    return v;
}

/// The serial reference: contributions combined in rank order in the accumulation type, an average divided once,
/// rounded once to T.
template <class T, class F>
std::vector<T> reference(int p, std::size_t n, hitch::allreduce::reduce_op op, F&& value) {
    using A = hitch::allreduce::accumulate_t<T>;
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        A acc = static_cast<A>(value(0, i));
        for (int r = 1; r < p; ++r) acc = hitch::allreduce::detail::apply<A>(op, acc, static_cast<A>(value(r, i)));
        if (op == hitch::allreduce::reduce_op::average) acc = acc / static_cast<A>(p);
        if constexpr (std::is_same_v<T, A>)
            out[i] = acc;
        else
            out[i] = T(acc);
    }
    return out;
}

template <class T>
bool same_bytes(std::span<const T> a, std::span<const T> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// Index of the first element whose bytes differ, or -1.
template <class T>
long first_difference(std::span<const T> a, std::span<const T> b) {
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
    return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

template <class T>
std::string show(T v) {
    return std::to_string(static_cast<double>(static_cast<float>(v)));
}

}  // namespace hitch_test
