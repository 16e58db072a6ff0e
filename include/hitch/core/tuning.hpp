#pragma once
// Tuning of hitch's core: the constants that were chosen by measurement, each beside the figure that chose it,
// apart from the code that uses them (core/parallel.hpp, core/cost.hpp).

#include <chrono>

namespace hitch::tuning {

/// How long an idle pool worker, or a caller waiting for its chunks, watches before it sleeps. Waking a sleeping
/// thread costs ~50 us on the development VM, as much as a chunk of a 1 MiB loop; an optimizer step runs 161
/// loops (one per layer), and with workers sleeping between them two threads were slower than one (adam 19.1
/// against 16.1 ms). Watching for twice the wake-up cost made two threads faster for every optimizer (lars 9.7
/// against 16.8 ms; docs/benchmarks.md, Optimizers).
inline constexpr std::chrono::microseconds pool_spin_wait{100};

/// Constants the model uses before anything is measured (cost_constants{}): orders of magnitude of a
/// shared-memory message (5 us) and of copying and combining at 10 GB/s, not a measurement; automatic replaces
/// them with measured ones on its first call.
inline constexpr double default_alpha_s = 5e-6;
inline constexpr double default_beta_s_per_byte = 1e-10;
inline constexpr double default_gamma_s_per_byte = 1e-10;

}  // namespace hitch::tuning
