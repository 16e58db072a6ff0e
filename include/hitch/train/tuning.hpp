#pragma once
// Tuning of data_parallel: defaults chosen by measurement or by the practice they follow, each with its reason,
// apart from the code that uses them (train/options.hpp).

#include <cstddef>

namespace hitch::train::tuning {

/// Bytes of gradients per fusion bucket. PyTorch DDP's bucket_cap_mb default (25 MiB), which hitch keeps so a
/// model fuses the same way as under DDP; hitch-bench-compress fuses ResNet-50's 161 tensors into 5 such buckets,
/// and one bucket per tensor (`--bucket-mib 0`) made every codec slower there (docs/benchmarks.md, Compression).
inline constexpr std::size_t default_bucket_bytes = std::size_t{25} << 20;

}  // namespace hitch::train::tuning
