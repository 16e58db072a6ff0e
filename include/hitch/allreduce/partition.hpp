#pragma once
// How a buffer of n elements is cut into blocks, one per rank (reduce_scatter, allgather, ring chunks) or per
// server shard: the first n % parts blocks hold one element more than the rest, so block sizes differ by at most 1.

#include <cstddef>

namespace hitch::allreduce {

/// Elements [offset, offset + count) of a buffer.
struct block {
    std::size_t offset = 0;
    std::size_t count = 0;
    friend bool operator==(const block&, const block&) = default;
};

/// Block `index` of `parts` blocks covering n elements (parts >= 1, 0 <= index < parts).
[[nodiscard]] constexpr block partition(std::size_t n, int parts, int index) noexcept {
    const std::size_t p = static_cast<std::size_t>(parts);
    const std::size_t i = static_cast<std::size_t>(index);
    const std::size_t base = n / p;
    const std::size_t extra = n % p;
    return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

/// Blocks [first, last) of `parts` as one contiguous range.
[[nodiscard]] constexpr block partition_range(std::size_t n, int parts, int first, int last) noexcept {
    if (first >= last) return {first >= parts ? n : partition(n, parts, first).offset, 0};
    const block a = partition(n, parts, first);
    const block b = partition(n, parts, last - 1);
    return {a.offset, b.offset + b.count - a.offset};
}

}  // namespace hitch::allreduce
