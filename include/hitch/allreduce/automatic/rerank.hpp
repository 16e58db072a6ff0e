#pragma once
// automatic's online re-ranking: per call size, an estimate of each candidate's time from the measured times of
// automatic's own calls, so a profile taken at a quiet moment or a busy one does not decide forever. Most calls run
// the current pick; runners-up run on a budget of time (a credit of explore_fraction of the pick's estimate per
// call pays for how much slower a runner-up is estimated to be), as an autotuner explores. Two events of the host
// run a candidate out of turn: a pick left because it slowed is probed at growing intervals (the slow spell may end),
// and a runner-up measured while the pick ran far slower than now runs once (its estimate is of a slower host).
//
// Every rank runs the same candidate in every call: a call's candidate is a function of agreed data only (the
// estimates, the window's length, the credit) and of the call's index among the calls of its size, which is the
// same on every rank because every rank issues the same calls in the same order (the group's contract, checked by
// call_options::check). Each rank times its own runs; at the end of a window (review_every calls of the size) all
// ranks fold their windows' medians with one small all-reduce (the maximum over ranks, agree_review_on_call), and
// every rank updates the estimates and the pick from that same agreed summary with the same arithmetic.

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hitch/allreduce/automatic/agreement.hpp"
#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/tuning.hpp"

namespace hitch::allreduce::detail {

/// automatic's options that steer the re-ranking.
struct rerank_settings {
    double explore_fraction = tuning::rerank_explore_fraction;
    double switch_margin = tuning::rerank_switch_margin;
    int max_review_calls = tuning::rerank_max_review_calls;
};

/// The online ranking of one call size (see the file comment), kept with the size's remembered choice. Only the
/// group's calls, one at a time, call plan(), note(), summary() and review(); review() and view() (reports, from
/// any thread) are called under the group state's mutex, so a report sees the estimates whole; plan() writes
/// nothing view() reads but `last_`, which is atomic, and so runs without the mutex.
class online_ranking {
public:
    static constexpr int candidates = automatic_profile::candidates;
    using times = std::array<double, candidates>;

    /// What one call runs, whether this rank times it, and whether it ends its window with a review.
    struct step {
        int pick = 0;
        bool timed = false;
        bool review = false;
    };
    /// The ranking as it stands, for reports and tests.
    struct standing {
        times estimates{};  // agreed; the scaled prediction until a candidate has run; < 0: no candidate
        int current = 0;    // the candidate most calls run now
        int last = 0;       // the candidate the last call ran
        int review_every = 1;
    };

    /// `predicted`: the model's time of each candidate (profile-corrected; < 0 where it is not a candidate here);
    /// `pick`: the model's choice, the first current pick.
    online_ranking(const times& predicted, int pick) : predicted_(predicted), estimate_(predicted), current_(pick) {
        last_.store(pick, std::memory_order_relaxed);
        for (int c = 0; c < candidates; ++c)
            if (c != pick && available(c) && predicted_[at(c)] <= tuning::rerank_first_try_ratio * predicted_[at(pick)])
                first_tries_.push_back(c);
        std::stable_sort(first_tries_.begin(), first_tries_.end(),
                         [&](int a, int b) { return predicted_[at(a)] < predicted_[at(b)]; });
    }

    /// The candidate this call runs: the model's pick first, then the first tries (each runner-up in turn,
    /// rerank_first_try_rounds times) while any is left, then the current pick once more, timed, ending the window (so
    /// the tries are weighed at once, not after a window as long as an unlucky first review makes it); once more a
    /// round of tries and the pick, rerank_look_again_calls later; else a probe of a pick left when it slowed, or a
    /// runner-up measured when the host was far slower (each weighed at once); else a runner-up when the credit pays
    /// for it, else the current pick.
    [[nodiscard]] step plan(const rerank_settings& s) {
        int pick = current_;
        bool weigh_tries = false;
        const std::size_t rounds = static_cast<std::size_t>(tuning::rerank_first_try_rounds) + (looked_again_ ? 1 : 0);
        if (!started_) {
            started_ = true;
        } else if (next_try_ < rounds * first_tries_.size()) {
            pick = first_tries_[next_try_++ % first_tries_.size()];
        } else if (!first_tries_.empty() && !tries_weighed_) {
            tries_weighed_ = true;
            weigh_tries = true;
        } else if (!first_tries_.empty() && !looked_again_ && ++calls_since_tries_ >= tuning::rerank_look_again_calls) {
            // The first tries of a size may all have met its first calls' fresh memory: at 64 MiB the runners-up
            // stood at 3-4x their times where a few explorations per hundred calls did not correct them.
            looked_again_ = true;
            tries_weighed_ = false;
            pick = first_tries_[next_try_++ % first_tries_.size()];
        } else if (left_ >= 0 && --probe_in_ <= 0) {
            // The ranking left its pick because the pick slowed down (a load's burst, a phase of the host): the
            // estimates it compared were the pick's fresh, slow one against the runners-up's, taken at a faster
            // moment. The pick it left runs again at growing intervals, a few times, so the end of the slow spell is
            // found within a few calls of it rather than at the next exploration.
            probe_every_ = std::min(2 * probe_every_, tuning::rerank_probe_max_interval);
            probe_in_ = probe_every_;
            pick = left_;
            if (--probes_left_ <= 0) left_ = -1;
            weigh_tries = true;
        } else if (stale_next_ >= 0) {
            // The pick runs far faster than when this runner-up was last measured (a slow phase of the host has
            // ended, or a burst that met its run): its estimate says little of it now, so it runs once, weighed at
            // once, and each such runner-up in turn.
            pick = stale_next_;
            stale_next_ = -1;
            weigh_tries = true;
        } else if (s.explore_fraction > 0) {
            credit_ += s.explore_fraction * estimate_[at(current_)];
            // No exploration is charged less than its minimum share: most calls stop here, without the scan.
            const bool could_pay = credit_ >= tuning::rerank_min_explore_share * estimate_[at(current_)];
            if (const int c = could_pay ? next_runner_up() : -1; c >= 0) {
                const double cost = std::clamp(explore_estimate(c) - estimate_[at(current_)],
                                               tuning::rerank_min_explore_share * estimate_[at(current_)],
                                               tuning::rerank_max_explore_charge * estimate_[at(current_)]);
                if (credit_ >= cost) {
                    pick = c;
                    credit_ -= cost;
                    if (!promising_turn_) cursor_ = c + 1;
                    promising_turn_ = !promising_turn_;
                }
            }
        }
        // Long windows (small calls) time a sample of the current pick's calls, every stride_-th from the window's
        // first: reading the clock twice costs ~40 ns, 4% of a 4 KiB all-reduce over comm::mpi.
        const bool sampled = --until_sample_ == 0;
        if (sampled) until_sample_ = stride_;
        const bool timed = weigh_tries || pick != current_ || sampled;
        last_.store(pick, std::memory_order_relaxed);
        ++calls_in_window_;
        return {pick, timed, weigh_tries || calls_in_window_ >= review_every_};
    }

    /// This rank's time of a run of candidate c in this window.
    void note(int c, double seconds) { window_[at(c)].push_back(seconds); }

    /// What this rank brings to the review that ends the window.
    [[nodiscard]] review_summary summary() {
        review_summary s;
        for (std::size_t c = 0; c < window_.size(); ++c) {
            auto& w = window_[c];
            if (w.empty()) continue;
            // The lower middle of an even count: preemption only ever adds time.
            const auto mid = w.begin() + static_cast<std::ptrdiff_t>((w.size() - 1) / 2);
            std::nth_element(w.begin(), mid, w.end());
            s.median[c] = std::max(*mid, 1e-12);  // 0 means "not run"
        }
        s.agreement_s = fastest_agreement_s_;
        return s;
    }

    /// Folds the agreed summary into the estimates and picks the best; `my_agreement_s` is how long this rank's
    /// all-gather of it took. The fastest of those so far is what a review costs: a slower one waited for a rank
    /// still in its all-reduce, or was preempted, and that time is not the review's (the next call would wait it).
    void review(const review_summary& agreed, const rerank_settings& s, double my_agreement_s) {
        const double pick_was = estimate_[at(current_)];
        for (int c = 0; c < candidates; ++c) {
            double m = agreed.median[at(c)];
            if (m <= 0 || !available(c)) continue;
            double& e = estimate_[at(c)];
            // A runner-up runs in one call now and then, which a slow moment of the host may have met: after a
            // window with one run of it slower than its estimate, it is explored as if it had not risen until its
            // next window says which it was. One try at a bad moment then does not leave it looking too slow to
            // try again, which at large sizes (a few explorations in a hundred calls) may be for the rest of a run;
            // and its raised estimate keeps the ranking from switching to it on its old time.
            const bool slower = e > 0 && m > e;
            if (c != current_ && slower && window_[at(c)].size() < 2 && held_[at(c)] == 0)
                held_[at(c)] = e;
            else
                held_[at(c)] = 0;
            // The pick's window of one or two calls (long calls) is one draw of a noisy host: beside a load busy
            // 5 ms in every 20, a 16 MiB all-reduce took 2.5 or 6-9 ms by where it met the bursts, whatever the
            // schedule, and every slow call raised the pick's estimate past a runner-up's fast one: the ranking
            // switched back and forth between two schedules on every slow call. A slower such window waits for
            // the next; while they stay slower, each counts as the lesser of it and the one before (every such
            // window on every rank: the counts and medians are agreed).
            if (c == current_ && measured_[at(c)]) {
                const bool short_and_slower = slower && window_[at(c)].size() < tuning::rerank_confirm_rise_samples;
                const double previous = pick_rise_;
                pick_rise_ = short_and_slower ? m : 0;
                if (short_and_slower && previous <= 0) continue;
                if (short_and_slower) m = std::min(m, previous);
            }
            // Preemption only ever adds time: a window far slower than the estimate counts as at most
            // rerank_max_rise times it, so one preempted sample cannot bury a candidate; a lasting slowdown still
            // shows within a few windows, and a faster window counts in full.
            if (e > 0) m = std::min(m, tuning::rerank_max_rise * e);
            // A faster window is taken in full: only a candidate's own speed makes it fast, while a slow window may
            // be a preempted rank or the first calls of a size (fresh buffers); one try at a quiet moment then
            // corrects an estimate that such a window raised.
            e = measured_[at(c)] && m > e ? e + tuning::rerank_estimate_weight * (m - e) : m;
            measured_[at(c)] = true;
        }
        if (agreed.median[at(current_)] > 0)
            pick_recent_[pick_windows_++ % pick_recent_.size()] = agreed.median[at(current_)];
        // The host's speed beside each candidate's measurement: the median of the pick's last three windows (its
        // estimate until it has three), which one lucky or preempted call of a large size does not move.
        const double host = host_speed();
        for (int c = 0; c < candidates; ++c)
            if (agreed.median[at(c)] > 0 && available(c)) taken_at_[at(c)] = host;
        // Not yet run: assume the model is as far off for them as it is for the current pick.
        if (measured_[at(current_)] && predicted_[at(current_)] > 0) {
            const double scale = estimate_[at(current_)] / predicted_[at(current_)];
            for (int c = 0; c < candidates; ++c)
                if (available(c) && !measured_[at(c)]) estimate_[at(c)] = predicted_[at(c)] * scale;
        }
        int best = current_;
        for (int c = 0; c < candidates; ++c)
            if (available(c) && estimate_[at(c)] < estimate_[at(best)]) best = c;
        if (best != current_ && estimate_[at(best)] < (1 - s.switch_margin) * estimate_[at(current_)]) {
            if (measured_[at(current_)] && estimate_[at(current_)] > pick_was &&
                estimate_[at(current_)] >= tuning::rerank_probe_rise * pick_low_) {
                // Left because the pick slowed: on dev-2c at 16-64 MiB hitch's transport ran 3-4x slower for a
                // while, MPI_Allreduce not; beside a load busy 5 ms in every 20 the ring rose 3.5x at 4 MiB and
                // the binary tree, 1.4x its time, stayed the pick. A pick left in a chain of such switches (one
                // slow spell) keeps the probes for the one whose time before it was lowest.
                if (left_ < 0 || pick_low_ < left_low_) {
                    left_ = current_;
                    left_low_ = pick_low_;
                }
                probe_every_ = tuning::rerank_probe_first_interval;
                probe_in_ = probe_every_;
                probes_left_ = tuning::rerank_probes;
            }
            if (best == left_) left_ = -1;  // back to it: nothing left to probe
            // The host's speed in the new pick's time: what each candidate was measured beside, scaled by the new
            // pick's estimate over the host's speed in the old pick's time (its recent windows, not its estimate,
            // which a slow spell raises only half way a window).
            const double to_new = estimate_[at(best)] / std::max(host_speed(), 1e-12);
            for (double& t : taken_at_) t *= to_new;
            pick_windows_ = 0;
            pick_rise_ = 0;
            current_ = best;
            pick_low_ = estimate_[at(current_)];
        }
        if (measured_[at(current_)])
            pick_low_ = pick_low_ > 0 ? std::min(pick_low_, estimate_[at(current_)]) : estimate_[at(current_)];
        // A runner-up measured while the pick ran rerank_probe_rise times slower than it runs now is stale: the
        // most promising of those runs in the next call. At 4 MiB on dev-2c a slow phase of the host (every
        // all-reduce 3-10x) made native the pick with hitch's schedules measured at 2.4 ms; when it ended native ran
        // at 0.9 ms, the ring at 0.36 ms, and the ranking, measuring only native, kept it.
        const double now = host_speed();
        stale_next_ = measured_[at(current_)] ? most_promising([&](int c) {
            return measured_[at(c)] && taken_at_[at(c)] >= tuning::rerank_probe_rise * now;
        })
                                              : -1;
        const double allowed = tuning::rerank_review_overhead * std::max(estimate_[at(current_)], 1e-12);
        // Short calls may take windows longer than their review's cost asks, up to rerank_window_span_s of calls:
        // a 4 KiB all-reduce's review every ~60 calls still cost ~2% of their time.
        const double calls = std::max(std::ceil(agreed.agreement_s / allowed),
                                      std::floor(tuning::rerank_window_span_s / estimate_[at(current_)]));
        review_every_ = static_cast<int>(std::clamp(calls, 1.0, static_cast<double>(s.max_review_calls)));
        stride_ = std::max(1, review_every_ / tuning::rerank_window_samples);
        until_sample_ = 1;
        calls_in_window_ = 0;
        for (auto& w : window_) w.clear();
        fastest_agreement_s_ =
            fastest_agreement_s_ > 0 ? std::min(fastest_agreement_s_, my_agreement_s) : my_agreement_s;
    }

    /// The candidate the last call ran.
    [[nodiscard]] int last() const noexcept { return last_.load(std::memory_order_relaxed); }
    [[nodiscard]] standing view() const { return {estimate_, current_, last(), review_every_}; }

private:
    [[nodiscard]] static std::size_t at(int c) noexcept { return static_cast<std::size_t>(c); }
    [[nodiscard]] bool available(int c) const noexcept { return predicted_[at(c)] >= 0; }
    /// The host's speed in the current pick's time: the median of its last three windows, or its estimate until it
    /// has three.
    [[nodiscard]] double host_speed() const {
        if (pick_windows_ < pick_recent_.size()) return estimate_[at(current_)];
        std::array<double, 3> r = pick_recent_;
        std::sort(r.begin(), r.end());
        return r[1];
    }
    /// The estimate exploration weighs: the one before an unconfirmed rise (held_), else the estimate.
    [[nodiscard]] double explore_estimate(int c) const noexcept {
        return held_[at(c)] > 0 ? held_[at(c)] : estimate_[at(c)];
    }
    /// The runner-up (available, not the current pick) that `admit` accepts with the lowest estimate exploration
    /// weighs; -1 when there is none.
    template <class Admit>
    [[nodiscard]] int most_promising(Admit admit) const {
        int best = -1;
        for (int c = 0; c < candidates; ++c)
            if (c != current_ && available(c) && admit(c) && (best < 0 || explore_estimate(c) < explore_estimate(best)))
                best = c;
        return best;
    }
    /// The runner-up the next exploration tries: on a promising turn the one with the lowest estimate, else the next
    /// after the cursor, in turn, that is not the current pick; -1 when there is none.
    [[nodiscard]] int next_runner_up() noexcept {
        // Every other exploration goes to the most promising runner-up (the lowest estimate), the others to each
        // in turn: a runner-up that may well be faster is checked often, and none is left untried for long.
        if (promising_turn_)
            if (const int best = most_promising([](int) { return true; }); best >= 0) return best;
        for (int i = 0; i < candidates; ++i) {
            const int c = (cursor_ + i) % candidates;
            if (c != current_ && available(c)) {
                cursor_ = c;
                return c;
            }
        }
        return -1;
    }

    times predicted_;
    times estimate_;
    std::array<bool, candidates> measured_{};
    times held_{};  // a runner-up's estimate before an unconfirmed rise (its one slower run), 0: none
    std::array<std::vector<double>, candidates> window_;
    std::vector<int> first_tries_;
    std::size_t next_try_ = 0;
    bool tries_weighed_ = false;  // the review after the last round of tries has been planned
    bool looked_again_ = false;   // the round of tries rerank_look_again_calls after the first has begun
    int calls_since_tries_ = 0;
    bool started_ = false;
    int current_ = 0;
    std::atomic<int> last_{0};
    int cursor_ = 0;
    bool promising_turn_ = true;
    double credit_ = 0;
    int calls_in_window_ = 0;
    int review_every_ = 1;
    int stride_ = 1;                       // every stride_-th call of the current pick in a window is timed
    int until_sample_ = 1;                 // calls until the next timed one (1: this one)
    double fastest_agreement_s_ = 0;       // this rank's fastest review so far (0: none yet)
    int left_ = -1;                        // the pick left when it slowed, probed (-1: none to probe)
    double left_low_ = 0;                  // its lowest estimate as the pick
    int probe_every_ = 1;                  // calls between two probes of it, growing
    int probe_in_ = 0;                     // calls until the next probe
    int probes_left_ = 0;                  // probes before it is left to the explorations
    times taken_at_{};                     // the host's speed (host_speed()) when each candidate was last measured
    std::array<double, 3> pick_recent_{};  // the pick's last window medians, in turn
    std::size_t pick_windows_ = 0;         // windows of the pick since it became the pick
    double pick_rise_ = 0;                 // the pick's last short window, when slower than its estimate (0: none)
    int stale_next_ = -1;                  // a runner-up measured when the host was far slower, run next (-1: none)
    double pick_low_ = 0;                  // the current pick's lowest estimate since it became the pick (0: none yet)
};

}  // namespace hitch::allreduce::detail
