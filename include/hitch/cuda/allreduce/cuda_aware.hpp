#pragma once
// Whether a communicator may be handed device pointers: detected, never assumed. Plain host code: the MPI query is
// passed in (hitch/cuda/allreduce/mpi.hpp passes MPIX_Query_cuda_support), so the host tests check the logic with a
// fake one.
//
// In order, the first that speaks decides:
//   1. device_options::path: `staged` says no, `direct` says yes (the group's option, for one program);
//   2. the environment variable HITCH_CUDA_AWARE_MPI: 0/no/false/off says no, 1/yes/true/on says yes, auto (or
//      unset, or empty) goes on; anything else is a config_error naming the variable and the values it takes;
//   3. the communicator's own declaration (carries_device_memory<C>: c.carries(memory_space::cuda));
//   4. the MPI library, for comm::mpi only: where its header declares the query (MPICH >= 4.0, which also defines
//      MPIX_GPU_SUPPORT_CUDA; Open MPI's mpi-ext.h with MPIX_CUDA_AWARE_SUPPORT), MPIX_Query_cuda_support() == 1
//      at run time (MPICH answers 1 only when built with GPU support and MPIR_CVAR_ENABLE_GPU is on); where it does
//      not, no.
// Ranks must decide alike: the direct path moves other messages than the staged one, so the decision joins the
// call's agreement check (a rank that decides otherwise gets mismatch_error, not a hang).

#include <atomic>
#include <optional>
#include <string>
#include <string_view>

#include "hitch/core/error.hpp"
#include "hitch/cuda/allreduce/options.hpp"

namespace hitch::cuda::allreduce {

/// comm::mpi's name (C::name), the communicator whose library is asked.
inline constexpr std::string_view mpi_communicator_name = "comm::mpi";

/// The environment variable that overrides the detection.
inline constexpr std::string_view cuda_aware_variable = "HITCH_CUDA_AWARE_MPI";

/// What the MPI library says of itself: whether its header declares a query, and the query's answer.
struct mpi_cuda_query {
    bool installed = false;  ///< hitch/cuda/allreduce/mpi.hpp asked the library's header (else nothing is known)
    bool declared = false;
    int (*query)() = nullptr;  ///< MPIX_Query_cuda_support where declared: 1 when CUDA-aware
};

namespace detail {
struct installed_mpi_query {
    std::atomic<bool> installed{false};
    std::atomic<bool> declared{false};
    std::atomic<int (*)()> query{nullptr};
};
inline installed_mpi_query mpi_query;
}  // namespace detail

/// Installs what the MPI library says (hitch/cuda/allreduce/mpi.hpp does, when included).
inline void install_mpi_cuda_query(const mpi_cuda_query& q) noexcept {
    detail::mpi_query.query.store(q.query, std::memory_order_relaxed);
    detail::mpi_query.declared.store(q.declared, std::memory_order_relaxed);
    detail::mpi_query.installed.store(q.installed, std::memory_order_release);
}

/// What was installed (installed = false when nothing was).
[[nodiscard]] inline mpi_cuda_query installed_mpi_cuda_query() noexcept {
    mpi_cuda_query q;
    q.installed = detail::mpi_query.installed.load(std::memory_order_acquire);
    q.declared = detail::mpi_query.declared.load(std::memory_order_relaxed);
    q.query = detail::mpi_query.query.load(std::memory_order_relaxed);
    return q;
}

/// The decision and why, for diagnostics (benchmarks print it).
struct cuda_awareness {
    bool aware = false;
    std::string reason;
};

/// The override of HITCH_CUDA_AWARE_MPI (`value` is the variable's value, absent when unset): yes, no, or nothing
/// (auto). Throws config_error for a value it does not know.
[[nodiscard]] inline std::optional<bool> parse_cuda_aware_override(std::optional<std::string_view> value) {
    if (!value || value->empty() || *value == "auto") return std::nullopt;
    const std::string_view v = *value;
    if (v == "1" || v == "yes" || v == "true" || v == "on") return true;
    if (v == "0" || v == "no" || v == "false" || v == "off") return false;
    throw config_error(hitch::detail::concat("hitch::cuda::allreduce: ", cuda_aware_variable, " = \"", v,
                                             "\" is not one of 0, 1, yes, no, true, false, on, off, auto"));
}

/// Decides whether device pointers go to the communicator (see the file comment). `communicator` is its name
/// (C::name), `carries` its own declaration, `mpi` what the MPI library says (asked for comm::mpi only), `environment`
/// the value of HITCH_CUDA_AWARE_MPI.
[[nodiscard]] inline cuda_awareness decide_cuda_aware(device_path path, std::optional<std::string_view> environment,
                                                      std::string_view communicator, bool carries,
                                                      const mpi_cuda_query& mpi) {
    using hitch::detail::concat;
    if (path == device_path::staged) return {false, "device_options::path = staged"};
    if (path == device_path::direct) return {true, "device_options::path = direct"};
    if (const std::optional<bool> forced = parse_cuda_aware_override(environment))
        return {*forced, concat(cuda_aware_variable, " = ", *environment)};
    if (carries) return {true, concat(communicator, " carries device memory")};
    if (communicator != mpi_communicator_name) return {false, concat(communicator, " does not carry device memory")};
    if (!mpi.installed)
        return {false, "hitch/cuda/allreduce/mpi.hpp is not included, so the MPI library was not asked"};
    if (!mpi.declared || mpi.query == nullptr)
        return {false, "the MPI library's header declares no MPIX_Query_cuda_support"};
    const int answer = mpi.query();
    if (answer == 1) return {true, "MPIX_Query_cuda_support() = 1"};
    return {false, concat("MPIX_Query_cuda_support() = ", answer)};
}

}  // namespace hitch::cuda::allreduce
