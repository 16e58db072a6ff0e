#pragma once
// Tuning of the collectives on GPU buffers (hitch/cuda/allreduce/): the constants apart from the code that uses them,
// each with what chose it. None has been measured on a GPU yet: bench/cuda_allreduce.cu measures the staged path
// against the same schedule on host buffers for every chunk size it is given, and its figures belong here.

#include <cstddef>

namespace hitch::cuda::allreduce::tuning {

/// Bytes per piece of a pipelined staged call. Not yet measured. Chosen so that a piece's copy (PCIe 4 x16 at
/// ~25 GB/s: ~170 us; PCIe 5 or NVLink-C2C: 30-90 us) outlasts the latency a host schedule pays per piece (2(p-1)
/// messages: ~1 us each over comm::local's direct path and hitch's staged MPI path, docs/benchmarks.md), so
/// pipelining hides the copies rather than adding latency, and so that three pieces of pinned memory (12 MiB) stay a
/// small fraction of a group's footprint.
inline constexpr std::size_t staging_chunk_bytes = std::size_t{4} << 20;

/// Pieces of pinned memory a pipelined call cycles through: one being copied in, one the host schedule works on, one
/// being copied back (the copy engines of current GPUs run one transfer each way at once).
inline constexpr int staging_slots = 3;

/// Bytes per message of the direct path (device memory handed to a CUDA-aware communicator). The ring's host
/// default (allreduce::ring::options_type::segment_bytes, 1 MiB); not yet measured on a GPU.
inline constexpr std::size_t direct_segment_bytes = std::size_t{1} << 20;

}  // namespace hitch::cuda::allreduce::tuning
