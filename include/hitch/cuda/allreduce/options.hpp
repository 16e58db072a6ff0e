#pragma once
// Options of the collectives on GPU buffers, per group (hitch::cuda::allreduce::set_options). Plain host code.

#include <cstddef>
#include <string_view>

#include "hitch/core/options.hpp"
#include "hitch/cuda/allreduce/tuning.hpp"

namespace hitch::cuda::allreduce {

/// How a call on GPU buffers moves them.
enum class device_path {
    /// Direct where the communicator carries device memory (a CUDA-aware MPI, detected: cuda_aware.hpp) and the
    /// algorithm has a direct form (ring all-reduce, reduce-scatter, all-gather, ring broadcast); staged otherwise.
    automatic,
    /// Always through pinned host memory, with the host schedule.
    staged,
    /// Device pointers to the communicator wherever the algorithm has a direct form, whatever the detection says
    /// (for an MPI library that is CUDA-aware but does not say so); staged for the other algorithms.
    direct,
};

[[nodiscard]] constexpr std::string_view name(device_path p) noexcept {
    switch (p) {
        case device_path::automatic:
            return "automatic";
        case device_path::staged:
            return "staged";
        case device_path::direct:
            return "direct";
    }
    return "invalid-path";
}

struct device_options {
    device_path path = device_path::automatic;
    /// Bytes per piece of a pipelined staged call (all-reduce, broadcast): a buffer larger than this is copied and
    /// reduced piece by piece, the copies of one piece overlapping the host schedule's work on another. 0 never cuts.
    std::size_t chunk_bytes = tuning::staging_chunk_bytes;
    /// Pieces of pinned memory a pipelined call cycles through.
    int slots = tuning::staging_slots;
    /// Bytes per message of the direct path.
    std::size_t segment_bytes = tuning::direct_segment_bytes;

    void validate() const {
        option_validator v("hitch::cuda::allreduce::device_options");
        v.closed("path", static_cast<int>(path), 0, 2);
        if (chunk_bytes != 0) v.closed("chunk_bytes", chunk_bytes, std::size_t{4} << 10, std::size_t{1} << 34);
        v.closed("slots", slots, 2, 64).closed("segment_bytes", segment_bytes, std::size_t{64}, std::size_t{1} << 30);
    }
    friend bool operator==(const device_options&, const device_options&) = default;
};

}  // namespace hitch::cuda::allreduce
