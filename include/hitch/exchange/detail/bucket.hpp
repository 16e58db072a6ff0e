#pragma once
// The bucket as every path of the compressed exchange sees it: checked against the state, read as floats, the
// result written back in the bucket's type; and the stochastic codecs' stream set to the rank.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {

namespace detail {

/// Streams the stochastic codecs' state ("stream") is set to the rank, so the ranks' rounding is independent.
template <class State>
void set_stream(State& s, int rank) {
    if constexpr (requires { s.stream; }) s.stream = static_cast<std::uint64_t>(rank);
    if constexpr (requires { s.inner; }) set_stream(s.inner, rank);
}

template <class T>
void require_bucket(const tensor_view<T>& bucket, std::size_t count) {
    if (!bucket.on_host())
        throw config_error(hitch::detail::concat(aggregate_who, ": the bucket is in ", name(bucket.space()),
                                                 " memory; host buckets only"));
    if (bucket.size() != count)
        throw config_error(hitch::detail::concat(aggregate_who, ": the state was made for a bucket of ", count,
                                                 " elements, the bucket has ", bucket.size()));
}

/// `bucket` as floats in `scratch` (or itself for float buckets).
template <class T>
std::span<float> float_view(tensor_view<T> bucket, std::vector<float>& scratch) {
    if constexpr (std::is_same_v<T, float>) {
        return {bucket.data(), bucket.size()};
    } else {
        scratch.resize(bucket.size());
        for (std::size_t i = 0; i < bucket.size(); ++i) scratch[i] = static_cast<float>(bucket[i]);
        return scratch;
    }
}

/// out = values (scaled by 1/p for the mean), converting to the bucket's type.
template <class T>
void write_result(std::span<const float> values, tensor_view<T> out, bool average, int p) {
    const float f = average ? 1.0f / static_cast<float>(p) : 1.0f;
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = T(average ? values[i] * f : values[i]);
}

/// The descriptor every compressed exchange checks across ranks: an all-reduce of n elements of T, the codec and
/// the bucket in the fingerprint, and the exchange's name as the schedule.
template <class T>
[[nodiscard]] auto exchange_descriptor(std::size_t n, std::uint64_t fingerprint, std::string_view schedule) {
    return [n, fingerprint, schedule] {
        allreduce::call_descriptor d;
        d.operation = static_cast<std::uint8_t>(allreduce::operation::allreduce);
        d.count = n;
        d.type = static_cast<std::uint8_t>(dtype_of<T>());
        d.op = static_cast<std::uint8_t>(allreduce::reduce_op::sum);
        d.root = -1;
        d.fingerprint = fingerprint;
        d.set_schedule(schedule);
        return d;
    };
}

}  // namespace detail

}  // namespace hitch::compress
