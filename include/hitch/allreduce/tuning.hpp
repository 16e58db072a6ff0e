#pragma once
// Tuning of hitch's all-reduce family: the constants that were chosen by measurement, each beside the figure that
// chose it, apart from the code that uses them (allreduce/automatic/, allreduce/cost.hpp, allreduce/transport.hpp).
// Figures come from the 2-core development host (dev-2c, docs/benchmarks.md) unless stated otherwise.

#include <chrono>
#include <cstddef>

namespace hitch::allreduce::tuning {

// ---- automatic: the probe profile -------------------------------------------------------------------------

/// The smallest probe; each next probe is four times larger. 4 KiB is where recursive doubling's latency still
/// wins over every bandwidth-optimal schedule on comm::local and comm::mpi (docs/allreduce.md, the picks table).
inline constexpr std::size_t probe_first_bytes = std::size_t{4} << 10;
/// log2 of the factor between probes: 4x keeps seven probes within 4 KiB-16 MiB and the log-linear interpolation
/// between two probes within the 10% automatic is held to (b32601a: automatic 0.90-1.00 of the fastest schedule
/// at every size over comm::local).
inline constexpr int probe_growth_log2 = 2;
/// Probes in all: 4 KiB ... 64 MiB.
inline constexpr int probes = 8;
/// Probes timed by the first call: up to 16 MiB. The 64 MiB probe waits for the first call above 16 MiB: at 16 MiB
/// both ranks' buffers fit the 32 MiB L3 of dev-2c and rabenseifner is fastest, at 64 MiB they do not and the
/// ring's wavefront is (7046e87: ring 10.2-10.4 GB/s at 64 MiB, automatic within 10% at every size).
inline constexpr int first_probes = 7;

/// Best-of-N per probe size (after one uncounted run of each candidate). Small probes are the noisiest and the
/// cheapest: 9/5/3 runs (d0475eb) left automatic at 0.80 of the fastest at 4-64 KiB on a loaded host; 31/9/5
/// (16545b3, b32601a) brought it to 0.90-1.00 at every size over comm::local and from 64 KiB up over comm::mpi.
inline constexpr std::size_t probe_small_bytes = std::size_t{64} << 10;
inline constexpr int probe_small_repeats = 31;
inline constexpr std::size_t probe_medium_bytes = std::size_t{1} << 20;
inline constexpr int probe_medium_repeats = 9;
inline constexpr int probe_large_repeats = 5;

[[nodiscard]] constexpr int probe_repeats(std::size_t bytes) noexcept {
    return bytes <= probe_small_bytes    ? probe_small_repeats
           : bytes <= probe_medium_bytes ? probe_medium_repeats
                                         : probe_large_repeats;
}

// ---- automatic: calibration's time -------------------------------------------------------------------------

/// Default time budget of one calibration (the constants and the probes). The whole profile took 0.25 s at 2
/// ranks, 2.8 s at 4 and 6.1 s at 5 on dev-2c (issue 18); probes past the budget are left out and the model
/// is held beyond the last measured one, so calibration stays near 1 s at up to 8 ranks on 2 cores.
inline constexpr double calibration_budget_s = 1.0;
/// Default deadline of one calibration, apart from the caller's: the budget bounds the planned work, this only
/// catches a rank that never arrives, so it is generous (60x the budget) for heavily oversubscribed hosts.
inline constexpr double calibration_timeout_s = 60.0;

// ---- automatic: the alpha-beta-gamma constants -------------------------------------------------------------

/// Round trips per alpha measurement, and attempts (best of) for alpha, beta, gamma and the native all-reduce.
/// Set with the first calibration (692c30f) and not tuned since: best of three, as the probes take best-of-N,
/// because preemption only ever adds time.
inline constexpr int alpha_round_trips = 8;
inline constexpr int constant_attempts = 3;
/// Message and combine size for beta and gamma (692c30f): at the staged path's ~10 GB/s (docs/benchmarks.md)
/// 1 MiB takes ~100 us, so alpha is a few percent of it, and it stays in the cache like the probes below 16 MiB.
inline constexpr std::size_t constant_probe_bytes = std::size_t{1} << 20;
/// Floors of the measured constants (a timer's resolution): a zero would make every model tie.
inline constexpr double min_alpha_s = 1e-9;
inline constexpr double min_beta_s_per_byte = 1e-13;
inline constexpr double min_gamma_s_per_byte = 1e-13;

// ---- automatic: decisions -----------------------------------------------------------------------------------

/// Choices a group remembers. Weighing the candidates costs about 0.7 us (16545b3), as long as a small all-reduce;
/// 64 distinct sizes cover a trainer's buckets and tail with room to spare.
inline constexpr std::size_t decision_memo_capacity = 64;

// ---- automatic: online re-ranking (allreduce/automatic/rerank.hpp) -----------------------------------------

/// Default share of the calls' time spent running runners-up. On a busy 2-core host the profile's pick ran
/// at 0.74-0.77 of the fastest schedule at 16 and 64 MiB, so a runner-up can be a third faster than the pick. At
/// 2-3% automatic ran 5-10% slower than without exploring at 4 KiB over comm::mpi under a light load (a switch of
/// schedule also costs the next calls their warm pipes and scratch); 1% still tries a runner-up 30% slower every
/// ~50 calls (an exploration is charged at least half a call: rerank_min_explore_share).
inline constexpr double rerank_explore_fraction = 0.01;
/// A runner-up replaces the current pick when its estimate is below (1 - margin) x the current's: closer than 5%,
/// two schedules are within the noise of a window's median on dev-2c, and switching would only flap.
inline constexpr double rerank_switch_margin = 0.05;
/// The most calls of a size between two reviews. A review is an all-gather of 64 bytes (2-5 us over comm::mpi on
/// dev-2c), as long as a 4 KiB all-reduce, so small calls are reviewed in windows of up to 256 (under 2% of their
/// time); calls of 1 MiB and more are long enough to be reviewed after every one or few.
inline constexpr int rerank_max_review_calls = 256;
/// A review may cost at most this share of the time of the calls it reviews (it sets the window's length), counted
/// with the fastest review so far: a typical one takes 3-4x as long on a quiet host (2-3 us against 0.7 us for 2
/// ranks over comm::mpi on dev-2c), and under load 100x. At 1% automatic ran at 0.84 of recursive doubling at 4 KiB
/// (windows of 74 calls); at 0.2% windows of 1 MiB calls grew to 256 calls under load.
inline constexpr double rerank_review_overhead = 0.005;
/// Windows of short calls may hold this many seconds of calls (up to rerank_max_review_calls) though a review would
/// fit in fewer: the review's cost counted with the fastest one so far is 3-4x below a typical one, and at 4 KiB
/// windows of ~60 calls spent ~2% of the time reviewing (automatic at 0.89 of recursive doubling). Longer spans
/// follow a load that comes and goes more slowly: in a simulation of calls of 3 us beside a load busy 5 ms in 20,
/// 1 ms windows reached 0.95 of the fastest on average against 0.99 for 0.5 ms (bench/rerank_sim.cpp).
inline constexpr double rerank_window_span_s = 5e-4;
/// Calls of the current pick timed per window: every one in windows this short, a sample of this many in longer
/// ones (a 4 KiB all-reduce over comm::mpi takes ~0.95 us on dev-2c, and reading the clock twice ~40 ns).
inline constexpr int rerank_window_samples = 32;
/// Weight of a window's agreed median in a candidate's estimate (an exponential moving average): a lasting change
/// of speed shows within two or three windows, one slow window moves the estimate half way.
inline constexpr double rerank_estimate_weight = 0.5;
/// A window's median counts as at most this many times a candidate's estimate (before the average): with the
/// weight above an estimate rises at most 1.5x per window. On dev-2c under other builds' load, single calls of
/// 16 KiB-1 MiB took 50-200x their usual time (a rank preempted for a time slice), and one such sample had made a
/// candidate look too slow to try again for thousands of calls.
inline constexpr double rerank_max_rise = 2.0;
/// A window holding fewer than this many timed calls of the current pick raises its estimate only when the next
/// window is slower too, and then by the lesser of the two. In hitch-bench-rerank-sim (200 seeds below 0.9 of the
/// fastest), a periodic load at 13 ms calls 17 -> 6, per-call noise at 15 ms calls 16 -> 14 and 65 -> 49, phases
/// of ~30 and ~100 calls 42 -> 37 and 17 -> 15, 500 us calls 2 -> 0; no row worse.
inline constexpr std::size_t rerank_confirm_rise_samples = 3;
/// The first calls of a size try the runners-up this many times each, in turn, and weigh the faster half of each
/// one's times: one try at a slow moment had left the fastest schedule at 64 MiB estimated at 3-4x its time (a run
/// where automatic reached 0.85 of it), where at a few explorations per hundred calls it was not tried again.
inline constexpr int rerank_first_try_rounds = 2;
/// The first tries are repeated once (a round, then the pick timed and a review) this many calls after them: a
/// size's first calls meet fresh memory, and in a simulation where each candidate's first two runs take 3x
/// (hitch-bench-rerank-sim --call-us 13000 --calls 150 --busy 0 --cold-runs 2 --cold-factor 3) 66 of 200 seeds
/// ended below 0.9 of the fastest without this round.
inline constexpr int rerank_look_again_calls = 16;
/// The first calls of a size try the runners-up predicted within this factor of the pick. A busy
/// host made the profile's pick 1.3-1.35x slower than the fastest, and on dev-2c under a load average of 3.5 (other
/// builds) MPI_Allreduce, predicted 2-4x slower than hitch's schedules at 4-64 MiB from a quiet profile, ran 1.1-2x
/// faster than them: 4x covers every candidate but the slowest at a size, once per size.
inline constexpr double rerank_first_try_ratio = 4.0;
/// An exploration is charged at least this share of the current pick's estimate, so runners-up estimated as fast as
/// the pick (within the switch margin) are not run in turn every call.
inline constexpr double rerank_min_explore_share = 0.5;
/// ... and at most this many times it. An estimate taken while a rank was preempted can be 20x the candidate's
/// time (dev-2c beside a process busy 5 ms in every 20: recursive doubling estimated at 149 us, running at 6 us
/// at 64 KiB); charged in full, it paid for its next try only after ~1,400 calls, so it stayed wrong. A runner-up
/// that really is much slower costs more than it is charged, but its tries are bounded by the credit.
inline constexpr double rerank_max_explore_charge = 2.0;
/// When the ranking leaves its pick because the pick slowed down, the pick it left runs again this many calls later,
/// then at twice the interval each time up to rerank_probe_max_interval, rerank_probes times in all. Probing only
/// when the switch crossed paths (hitch's schedules to native or back), 93 and 44 seeds of 200 fell below 0.9 of the
/// fastest in simulations of a periodic load (hitch-bench-rerank-sim --call-us 13000 --calls 150 --busy 0.25
/// --slowdown 5 --model-error 1.5; --call-us 300 --calls 140 --busy 0.25 --slowdown 3 --model-error 1.5), 18 and 0
/// probing after every such switch; in host phases that slow hitch's schedules 3.5x but not native (--call-us 3000
/// --calls 150 --busy 0 --phase-calls 30 --phase-factor 3.5 --native-ratio 2 --model-error 1.5), 57 and 42.
inline constexpr int rerank_probe_first_interval = 2;
/// ... when the pick it leaves had slowed to at least this many times its lowest estimate as the pick: a phase of
/// the host or a load's burst, not the noise between two schedules of close times. At 1 MiB on dev-2c, where native
/// and Rabenseifner are within 15%, probes after every switch found the runner-up at a lucky moment and took it
/// back, and automatic fell to 0.87-0.89 of native in two runs of five (1.00 without the probes). In the phases'
/// simulation (phases of ~30 and ~100 calls) 1.5 kept the probes' gain (57 and 18 seeds below 0.9), 2.0 lost it (76
/// and 26): a pick 1.3x the fastest reaches native's 2x after a rise of 1.6x. The same ratio marks a runner-up as
/// measured when the host was far slower: the pick then ran this many times its time now (the median of its last
/// three windows, each time).
inline constexpr double rerank_probe_rise = 1.5;
inline constexpr int rerank_probe_max_interval = 16;
inline constexpr int rerank_probes = 8;

// ---- the transport -----------------------------------------------------------------------------------------

/// How long a wait polls its peer before it falls back to the communicator's yielding wait, when every rank has a
/// core of its own (threads of one process, or processes of one node on the staged path): a running peer answers
/// within microseconds, and a yield hands the core away for a whole time slice. No figure recorded: set with the
/// first polling wait (a806c64) and not tuned since.
inline constexpr std::chrono::microseconds transport_spin_wait{50};
/// The staged path's sender copies pieces of at least this many bytes into a pipe's slots either through the cache
/// or streamed (non-temporal stores), whichever its timed copies of full slots find faster (allreduce/detail/
/// slot_copier.hpp); smaller pieces always go through the cache, where a message's latency is lowest.
inline constexpr std::size_t transport_stream_min_bytes = std::size_t{16} << 10;
/// A pipe streams while its copies of a full slot through the cache take more than this many times its streamed
/// ones (compared in pairs of adjacent copies). On dev-2c, per 64 KiB slot: through the cache 1.8-5.4 us when the
/// two cores share a cache, 14.5-29.7 us when the host placed them on different dies (5.4-13x the streamed copy of
/// the same message); streamed 2.0-5.2 us either way. The sender's streamed copy is the cheaper half of its cost (the
/// receiver then reads the piece from memory): from a source in the sender's cache a copy through a shared cache took
/// ~2.5x a streamed one, and at 2.0 (with pairs brought forward when copies slowed) recursive doubling streamed at
/// 64 KiB and ran 35% slower.
inline constexpr double transport_stream_ratio = 4.0;
/// While streaming, every this-many-th full piece goes through the cache, to see whether the cores share a cache
/// again (one such copy costs ~20 us on dev-2c across dies: ~5% of 128 streamed pieces' time) ...
inline constexpr unsigned transport_cached_probe_every = 128;
/// ... and while copying through the cache, every this-many-th is streamed (a streamed piece costs the receiver a
/// read from memory instead of the shared cache).
inline constexpr unsigned transport_streamed_probe_every = 256;

// The cost model's defaults (before anything is measured) are in core/tuning.hpp, beside cost_constants.

}  // namespace hitch::allreduce::tuning
