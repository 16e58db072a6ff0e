#pragma once
// hitch::allreduce::native on comm::mpi: MPI_Allreduce on comm::mpi's MPI communicator. The class native lives
// in hitch/allreduce/automatic/native_candidate.hpp and runs on every communicator that specialises
// native_allreduce<C> (this header for comm::mpi, hitch/cuda/nccl/native.hpp for cuda::nccl); MPI's part lives
// apart so that hitch.hpp and the other schedules never include <mpi.h>. On a communicator without a native
// collective (comm::local) it does not compile, rather than failing at run time.
//
// float and double sums use MPI_SUM; min and max use user-defined ops (so NaN propagates as in the other
// schedules); half and bfloat16 travel as 16-bit words combined by user-defined ops in float. An average is an
// MPI sum divided by p on every rank. When the call's agreement check passed, every rank is known to have entered
// this call and the blocking MPI_Allreduce is used, under the watchdog of comm/detail/mpi_watchdog.hpp (a rank that
// dies inside it ends the job after the call's deadline, with a message); otherwise MPI_Iallreduce is polled against
// the deadline (a timed-out MPI collective cannot be cancelled: the communicator is then unusable, as in MPI itself).
//
// Cost: native_alpha + n native_beta as measured by automatic's calibration; without measurements, MPICH's
// long-message algorithm (Rabenseifner's).

#include <mpi.h>

#include <array>
#include <climits>
#include <cstddef>
#include <mutex>
#include <span>
#include <string_view>
#include <type_traits>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

template <>
struct has_native_allreduce<comm::mpi> : std::true_type {};

namespace detail {

/// MPI user function: inout = op(in, inout), in the accumulation type.
template <floating_element T, reduce_op Op>
void mpi_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const auto* a = static_cast<const T*>(in);
    auto* b = static_cast<T*>(inout);
    combine(b, a, b, static_cast<std::size_t>(*len), Op);
}

template <floating_element T>
[[nodiscard]] MPI_Datatype mpi_type() noexcept {
    if constexpr (std::is_same_v<T, float>)
        return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>)
        return MPI_DOUBLE;
    else
        return MPI_UINT16_T;  // half and bfloat16 travel as 16-bit words
}

/// The MPI op for T and op (created once, on first use).
template <floating_element T>
[[nodiscard]] MPI_Op mpi_op(reduce_op op) {
    constexpr bool builtin_sum = std::is_same_v<T, float> || std::is_same_v<T, double>;
    if (builtin_sum && (op == reduce_op::sum || op == reduce_op::average)) return MPI_SUM;
    static std::once_flag once;
    static std::array<MPI_Op, 3> ops{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
    std::call_once(once, [] {
        comm::detail::mpi_check(MPI_Op_create(&mpi_user_op<T, reduce_op::sum>, 1, &ops[0]), "MPI_Op_create");
        comm::detail::mpi_check(MPI_Op_create(&mpi_user_op<T, reduce_op::min>, 1, &ops[1]), "MPI_Op_create");
        comm::detail::mpi_check(MPI_Op_create(&mpi_user_op<T, reduce_op::max>, 1, &ops[2]), "MPI_Op_create");
    });
    switch (op) {
        case reduce_op::min:
            return ops[1];
        case reduce_op::max:
            return ops[2];
        default:
            return ops[0];
    }
}

}  // namespace detail

/// allreduce::native on comm::mpi (the class itself is in hitch/allreduce/automatic/native_candidate.hpp).
template <>
struct native_allreduce<comm::mpi> {
    template <floating_element T>
    static void run(transport<comm::mpi>& t, std::span<T> data, reduce_op op) {
        const int p = t.size();
        if (p <= 1 || data.empty()) return;
        const MPI_Comm c = t.comm().native_handle();
        const MPI_Datatype type = detail::mpi_type<T>();
        const MPI_Op mop = detail::mpi_op<T>(op);
        constexpr std::size_t piece = std::size_t{1} << 30;  // MPI counts are int
        for (std::size_t off = 0; off < data.size(); off += piece) {
            const int count = static_cast<int>(std::min(piece, data.size() - off));
            void* buffer = data.data() + off;
            if (t.agreed()) {
                // Every rank is in this call; one that dies now would leave the rest in MPI_Allreduce for ever.
                const comm::detail::mpi_watchdog::watch watch("hitch::allreduce::native MPI_Allreduce",
                                                              t.limit().length());
                comm::detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, buffer, count, type, mop, c), "MPI_Allreduce");
                continue;
            }
            MPI_Request request = MPI_REQUEST_NULL;
            comm::detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buffer, count, type, mop, c, &request),
                                    "MPI_Iallreduce");
            int code = MPI_SUCCESS;
            const bool done = poll_until(t.limit(), [&] {
                int flag = 0;
                code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
                return code != MPI_SUCCESS || flag != 0;
            });
            comm::detail::mpi_check(code, "MPI_Iallreduce");
            if (!done)
                throw timeout_error(
                    "hitch::allreduce::native MPI_Iallreduce",
                    hitch::detail::concat(count, " x ", hitch::name(dtype_of<T>()), " on rank ", t.rank(),
                                          " (an MPI collective cannot be cancelled; the communicator "
                                          "is unusable now)"),
                    t.limit().waited());
        }
        if (op == reduce_op::average) divide(data.data(), data.size(), p);
    }
};

static_assert(schedule_for<native, comm::mpi>,
              "hitch::allreduce::native must model hitch::allreduce_schedule on comm::mpi");
static_assert(!schedule_for<native, comm::local>,
              "hitch::allreduce::native must be unavailable on comm::local, which has no all-reduce of its own");

}  // namespace hitch::allreduce
