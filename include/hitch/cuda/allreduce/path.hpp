#pragma once
// Which path a call on GPU buffers takes, staged or direct, and why. Plain host code (no CUDA header): the host tests
// check the rules with a fake MPI query.
//
// A call goes direct when (1) its algorithm has a direct form: the ring all-reduce, reduce-scatter and all-gather
// (both forms; they are the ring's), and the ring's chain broadcast, on a buffer in GPU memory with at least two
// ranks; (2) the communicator may be handed device pointers (cuda_aware.hpp: option, environment, the
// communicator's declaration, the MPI library); and (3) the direct engine is compiled in (a translation unit built
// by nvcc included hitch/cuda/allreduce/collectives.cuh). Every other call is staged. The direct form of the ring
// combines each element in the same order as the host ring, so both paths give the same bits.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hitch/allreduce/space.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/hash.hpp"
#include "hitch/cuda/allreduce/cuda_aware.hpp"
#include "hitch/cuda/allreduce/options.hpp"

namespace hitch::cuda::allreduce {

/// True when the direct engine has a form of this call (see the file comment).
[[nodiscard]] inline bool has_direct_form(const hitch::allreduce::space_call& call) noexcept {
    using hitch::allreduce::operation;
    if (call.buffer.space != memory_space::cuda || call.size < 2) return false;
    switch (call.what) {
        case operation::allreduce:
        case operation::broadcast:
            return call.schedule == "ring";
        case operation::reduce_scatter:
        case operation::allgather:
            return true;
        default:
            return false;
    }
}

/// What the ranks of a direct call agree on (its messages are not the staged call's).
[[nodiscard]] inline std::uint64_t direct_fingerprint() noexcept {
    return fnv1a(std::string_view("hitch.cuda.direct"));
}

struct path_choice {
    bool direct = false;
    std::string reason;
};

/// Chooses the path of `call` (see the file comment). `environment` is the value of HITCH_CUDA_AWARE_MPI,
/// `engine_installed` whether the direct engine is compiled in. Throws config_error when the options ask for the
/// direct path of a call that has a direct form and the engine is missing.
[[nodiscard]] inline path_choice choose_path(const hitch::allreduce::space_call& call, const device_options& o,
                                             std::optional<std::string_view> environment, const mpi_cuda_query& mpi,
                                             bool engine_installed) {
    if (!has_direct_form(call)) return {false, "the algorithm has no direct form"};
    cuda_awareness a = decide_cuda_aware(o.path, environment, call.communicator, call.carries, mpi);
    if (!a.aware) return {false, std::move(a.reason)};
    if (!engine_installed) {
        if (o.path == device_path::direct)
            throw config_error(
                "hitch::cuda::allreduce: device_options::path = direct needs the direct engine: include "
                "hitch/cuda/allreduce/collectives.cuh in a translation unit compiled by nvcc");
        return {false, a.reason + ", but the direct engine is not compiled in (collectives.cuh)"};
    }
    return {true, std::move(a.reason)};
}

}  // namespace hitch::cuda::allreduce
