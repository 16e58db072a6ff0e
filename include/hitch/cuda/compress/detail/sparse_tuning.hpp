#pragma once
// The GPU sparse codecs' constants chosen for speed, apart from the kernels that use them. None changes a message
// (every one of them is "speed only"): the selections and the draws give the host codecs' elements whatever the
// values. No figure has been recorded for any of them yet: they were set when the kernels were written, on a machine
// without a GPU; bench/cuda_topk.cu measures the choices they govern.

#include <cstddef>
#include <cstdint>

namespace hitch::cuda::compress::tuning {

/// random-k: a draw of at most this many distinct values runs on one GPU thread (xoshiro256** step by step, as the
/// host's); above it the batched draw (jumped generators, a sort and a scan per batch) takes over, whose fixed cost
/// is about ten launches and one read back per batch. No figure recorded.
inline constexpr std::uint64_t randomk_sequential_draw = 128;

/// random-k's batched draw: stream outputs each thread generates from its jumped state. No figure recorded.
inline constexpr std::uint64_t randomk_outputs_per_thread = 256;

/// Jump tables (A^(2^i), i below this) kept per GPU: enough for batches of 2^44 stream outputs. 8 KiB each.
inline constexpr unsigned randomk_jump_tables = 44;

}  // namespace hitch::cuda::compress::tuning
