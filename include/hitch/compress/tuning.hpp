#pragma once
// The codecs' constants that were chosen for speed, apart from the kernels that use them, each with the figure
// that chose it. Figures come from docs/benchmarks.md ("Compression"): dev-2c, an AMD EPYC virtual machine with
// 2 vCPUs and AVX-512, g++ 12.2 -O3, hitch-bench-compress on ResNet-50's 25,557,032 gradient floats in 25 MiB
// buckets. Where no figure was recorded when the constant was set, the entry says so.
//
// Two kinds of constant live here. Most change only speed: any value gives the same messages. Those marked
// "fixes the bits" also set a summation order or a random-number segment, so a new value changes the messages
// (still valid, but no longer equal to what earlier builds wrote): retune them only with a test update.

#include <cstddef>

namespace hitch::compress::tuning {

// ---- spreading one bucket over the pool (detail/parallel.hpp) ---------------------------------------------------

/// Buckets with fewer elements stay on the calling thread: waking a pool thread costs more than it saves. Lowered
/// from 2^18 to 2^16 (commit f40eb4d) once the pool spun briefly before sleeping; with one bucket per tensor
/// (`--bucket-mib 0`, most of ResNet-50's 161 tensors below the line) every codec runs at 0.6-0.8 of its fused-
/// bucket speed (fp16 0.45 of the read bound against 0.58, onebit 0.59 against 0.83). Speed only.
inline constexpr std::size_t parallel_min_elements = std::size_t{1} << 16;

// ---- element-wise codecs: fp16, bf16, none (detail/codec.hpp) ----------------------------------------------------

/// Elements converted between two checksum updates, so each block of output is checksummed while it is still in
/// L1 (8192 elements: 16 KiB of halves, 32 KiB of floats). Set with the thread-pool split (commit f3f7058), no
/// figure recorded; fp16 then encodes at 0.58 of the read bound, 22.4 GB/s. Speed only.
inline constexpr std::size_t checksum_block = 8192;

// ---- quantisers: qsgd, terngrad (detail/moments.hpp, terngrad.hpp) ----------------------------------------------

/// Elements per block of the group reductions: 32 float lanes are folded into double every block. Set with the
/// 32-wide AVX2 quantiser (commit 8811d2f), no figure recorded; terngrad's one-pass encode also takes it as its
/// running-maximum step (in L1 between its maximum and its quantisation). Fixes the bits (the summation order of
/// every norm and sum, and terngrad's thinning steps).
inline constexpr std::size_t moment_block = 4096;

/// terngrad: elements quantised per block, so the byte codes are still in cache when they are packed to 2 bits
/// (16384 codes: 16 KiB). Set with the codec (commit 8cceb46), no figure recorded; terngrad encodes at 0.51 of
/// the read bound, 20.1 GB/s. Speed only.
inline constexpr std::size_t terngrad_pack_block = 16384;

// ---- sampled top-k: topk, dgc (detail/sparse.hpp) ---------------------------------------------------------------

/// Fraction of the bucket sampled to estimate the top-k threshold (DGC, Lin et al. 2018, samples 0.1% to 1%) ...
inline constexpr double topk_sample_fraction = 0.01;
/// ... and never fewer samples than this. With both, sampled top-k at density 0.001 encodes at 9.1 GB/s, 9.2x
/// exact top-k (1.0 GB/s), and selects exactly k (25,557 of 25,557). The selection is exact top-k whatever the
/// sample: speed only.
inline constexpr std::size_t topk_min_sample = 4096;
/// Collecting passes with a corrected threshold before exact selection takes over. Set with the codec (commit
/// 8cceb46); on ResNet-50's buckets the first pass suffices. Speed only.
inline constexpr int topk_sample_attempts = 4;
/// Sampling pays only when the sample is a small part of the bucket (sample * this <= n) ...
inline constexpr std::size_t topk_sample_share = 4;
/// ... and k a small part of it (k * this <= n); otherwise exact selection runs at once. No figure recorded.
inline constexpr std::size_t topk_selected_share = 16;

// ---- dgc (dgc.hpp) ------------------------------------------------------------------------------------------------

/// DGC's squared gradient norm is summed in blocks of this many elements (eight lanes per block) ...
inline constexpr std::size_t dgc_norm_block = 2048;
/// ... whose sums are added in groups of this many blocks, the groups then in order: a fixed order that the GPU's
/// reduction (cuda/compress/dgc.cuh) reproduces, one thread per lane and one thread block per group. Set with the
/// GPU codec, no figure recorded. Fixes the bits (of the clipping scale).
inline constexpr std::size_t dgc_norm_group = 128;

}  // namespace hitch::compress::tuning
