#pragma once
// The tables of the fused multi-tensor step (one launch for many layers, as apex's multi_tensor_apply and torch's
// _foreach kernels do): a row per tensor (its pointers, size, flags, where its chunks start) and a row per chunk
// (which tensor, which chunk of it). Both live in device memory, made once per model_optimizer; a launch's blocks
// take chunks in order (a grid-stride loop over the chunk table). A chunk is one norm block (norm_block elements,
// starting at a multiple of norm_block), so the norm kernels write one partial sum per chunk and a tensor's partial
// sums are consecutive, in block order.
//
// Plain host code apart from the rows (plain data the kernels read): the host tests check the layout.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/cuda/detail/hd.hpp"
#include "hitch/cuda/optim/math.hpp"

namespace hitch::cuda::optim {

/// Elements per chunk of the fused launches: one norm block.
inline constexpr std::size_t chunk_elements = norm_block;

/// tensor_entry::flags.
inline constexpr std::uint32_t flag_exclude_from_adaptation = 1u;
inline constexpr std::uint32_t flag_exclude_from_weight_decay = 2u;
/// Every pointer of the row is 16-byte aligned: the kernels move four floats per load and store.
inline constexpr std::uint32_t flag_aligned16 = 4u;

/// One tensor of a fused launch: parameters, gradient and up to three state buffers (the rule says which it uses).
struct tensor_entry {
    float* w = nullptr;
    const float* g = nullptr;
    float* state[3] = {nullptr, nullptr, nullptr};
    std::uint64_t n = 0;
    std::uint64_t first_chunk = 0;  // its first row in the chunk table (and in the partial sums)
    std::uint32_t flags = 0;
    std::uint32_t reserved = 0;
};

/// One chunk: elements [index * chunk_elements, min(n, (index + 1) * chunk_elements)) of tensor `tensor`.
struct chunk_entry {
    std::uint32_t tensor = 0;
    std::uint32_t index = 0;
};

[[nodiscard]] HITCH_HD_INLINE std::uint64_t chunk_begin(std::uint32_t index) noexcept {
    return static_cast<std::uint64_t>(index) * chunk_elements;
}
[[nodiscard]] HITCH_HD_INLINE std::uint64_t chunk_end(std::uint64_t n, std::uint32_t index) noexcept {
    const std::uint64_t e = chunk_begin(index) + chunk_elements;
    return e < n ? e : n;
}

/// Chunks of a tensor of n elements (0 for an empty one: it has nothing to move).
[[nodiscard]] constexpr std::uint64_t chunk_count(std::uint64_t n) noexcept {
    return (n + chunk_elements - 1) / chunk_elements;
}

/// The chunk table of tensors of these sizes, and where each tensor's chunks start.
struct chunk_layout {
    std::vector<chunk_entry> chunks;
    std::vector<std::uint64_t> first_chunk;
};

[[nodiscard]] inline chunk_layout make_chunk_layout(std::span<const std::size_t> sizes) {
    if (sizes.size() > std::numeric_limits<std::uint32_t>::max())
        throw config_error(hitch::detail::concat("hitch::cuda::optim: ", sizes.size(),
                                                 " tensors in one fused step; at most 2^32 - 1"));
    chunk_layout out;
    out.first_chunk.reserve(sizes.size());
    std::uint64_t total = 0;
    for (const std::size_t n : sizes) total += chunk_count(n);
    out.chunks.reserve(static_cast<std::size_t>(total));
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        const std::uint64_t count = chunk_count(sizes[t]);
        if (count > std::numeric_limits<std::uint32_t>::max())
            throw config_error(hitch::detail::concat("hitch::cuda::optim: tensor ", t, " has ", sizes[t],
                                                     " elements; at most 2^32 - 1 chunks of ", chunk_elements));
        out.first_chunk.push_back(out.chunks.size());
        for (std::uint64_t c = 0; c < count; ++c)
            out.chunks.push_back({static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(c)});
    }
    return out;
}

/// A layer's row (first_chunk is filled from the layout). `state` holds the rule's state buffers, null for unused.
[[nodiscard]] inline tensor_entry make_tensor_entry(const layer& l, std::span<float* const> state) {
    tensor_entry e;
    e.w = l.params.data();
    e.g = l.grads.data();
    const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    bool all_aligned = aligned(e.w) && aligned(e.g);
    for (std::size_t k = 0; k < state.size() && k < 3; ++k) {
        e.state[k] = state[k];
        if (state[k] != nullptr) all_aligned = all_aligned && aligned(state[k]);
    }
    e.n = l.size();
    e.flags = (l.flags.exclude_from_adaptation ? flag_exclude_from_adaptation : 0u) |
              (l.flags.exclude_from_weight_decay ? flag_exclude_from_weight_decay : 0u) |
              (all_aligned ? flag_aligned16 : 0u);
    return e;
}

}  // namespace hitch::cuda::optim
