#pragma once
// allreduce::native, the communicator's own all-reduce, and whether automatic weighs it. Both are capability traits
// specialised by the header that implements a communicator's all-reduce (hitch/allreduce/native.hpp for comm::mpi,
// hitch/cuda/nccl/native.hpp for cuda::nccl), so this floor needs neither <mpi.h> nor NCCL.

#include <span>
#include <string_view>
#include <type_traits>

#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"

namespace hitch::allreduce {

/// Capability trait: C has an all-reduce of its own that allreduce::native can call. Specialised by the header
/// that implements it, together with native_allreduce<C>.
template <class C>
struct has_native_allreduce : std::false_type {};

/// How native runs on C: `template <floating_element T> static void run(transport<C>&, std::span<T>, reduce_op)`.
/// Specialised with has_native_allreduce<C>.
template <class C>
struct native_allreduce;

/// A communicator that exposes a native handle is expected to have a native all-reduce; automatic then insists on
/// seeing it (so every translation unit makes the same choice).
template <class C>
concept exposes_native_handle = requires(const C& c) { c.native_handle(); };

/// The communicator's own all-reduce (MPI_Allreduce on comm::mpi, ncclAllReduce on cuda::nccl). It runs only on
/// communicators that have one (has_native_allreduce<C>): elsewhere it does not compile, rather than failing at
/// run time.
///
/// Cost: native_alpha + n native_beta as measured by automatic's calibration; without measurements, Rabenseifner's
/// (the long-message algorithm of MPICH and of NCCL's trees and rings alike, to within constants).
class native {
public:
    struct options_type {
        void validate() const {}
    };

    static constexpr std::string_view name = "native";

    native() = default;
    explicit native(const options_type& o) : options_(o) {}
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k) const {
        if (k.has_native()) return native_cost(p, n_bytes, k);
        return rabenseifner{}.cost(p, n_bytes, k);
    }

    template <communicator C, floating_element T>
        requires has_native_allreduce<C>::value
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        native_allreduce<C>::run(t, data, op);
    }

private:
    options_type options_{};
};

namespace detail {

/// `native`, made dependent on C (kept for the code that names it so).
template <class C>
struct native_for {
    using type = native;
};

}  // namespace detail
}  // namespace hitch::allreduce
