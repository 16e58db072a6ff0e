#pragma once
// What the MPI library says of its CUDA support, for the collectives on GPU buffers over comm::mpi
// (cuda_aware.hpp decides). Including this header installs the query; without it, comm::mpi is never handed device
// pointers unless an option or HITCH_CUDA_AWARE_MPI says so.
//
// Which libraries declare a query, checked in their headers:
//   MPICH >= 4.0: int MPIX_Query_cuda_support(void) in mpi_proto.h (with MPIX_GPU_SUPPORT_CUDA defined in mpi.h);
//   Open MPI: MPIX_Query_cuda_support() in <mpi-ext.h>, which defines MPIX_CUDA_AWARE_SUPPORT.
// Others (and MPICH 3) declare none, and are taken as not CUDA-aware.

#include "hitch/comm/mpi.hpp"

#if defined(OPEN_MPI) && OPEN_MPI && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <atomic>

#include "hitch/cuda/allreduce/cuda_aware.hpp"

#if defined(MPIX_CUDA_AWARE_SUPPORT) || defined(MPIX_GPU_SUPPORT_CUDA) || \
    (defined(MPICH_NUMVERSION) && MPICH_NUMVERSION >= 40000000)
#define HITCH_MPI_DECLARES_CUDA_QUERY 1
#else
#define HITCH_MPI_DECLARES_CUDA_QUERY 0
#endif

namespace hitch::cuda::allreduce {

namespace detail {
#if HITCH_MPI_DECLARES_CUDA_QUERY
/// The library's answer, asked once (MPI is initialised by then: a comm::mpi exists).
inline int ask_mpi_cuda_support() {
    static const int answer = MPIX_Query_cuda_support();
    return answer;
}
#endif
}  // namespace detail

/// What this MPI library's header declares, and its query.
[[nodiscard]] inline mpi_cuda_query mpi_library_cuda_query() noexcept {
#if HITCH_MPI_DECLARES_CUDA_QUERY
    return {true, true, &detail::ask_mpi_cuda_support};
#else
    return {true, false, nullptr};
#endif
}

static_assert(hitch::comm::mpi::name == mpi_communicator_name,
              "cuda_aware.hpp asks the MPI library for the communicator of this name");

namespace detail {
inline const bool mpi_cuda_query_installed = (install_mpi_cuda_query(mpi_library_cuda_query()), true);
}  // namespace detail

}  // namespace hitch::cuda::allreduce
