#pragma once
// The choices automatic made on a group, remembered so a call of a size seen before costs a lookup. A choice
// depends on nothing but the inputs kept with it, and those are agreed by every rank (the constants and profile
// are agreed when measured or loaded), so every rank remembers the same choices. Each keeps its size's online
// ranking (rerank.hpp), which changes only with agreed summaries, so it too is the same on every rank.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/automatic/rerank.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/transport/scratch.hpp"
#include "hitch/allreduce/tuning.hpp"

namespace hitch::allreduce::detail {

/// One remembered choice. The profile is compared by address: a profile never changes once agreed; a new one is
/// a new object.
template <class Options>
struct decision {
    Options settings;
    int p = 0;
    std::size_t n = 0;
    cost_constants k;
    const automatic_profile* profile = nullptr;
    int pick = 0;
    /// The online ranking of this size when automatic re-ranks (rerank.hpp): it holds for the inputs above, and
    /// goes with them.
    std::unique_ptr<online_ranking> online;
};

/// What a group's slot of remembered choices holds: group::set_constants() drops it without naming automatic's
/// options, and automatic reads it as its decision_memo<automatic::options_type>, the only kind ever put there.
struct decision_memo_slot {};

/// The last tuning::decision_memo_capacity choices (the oldest replaced first). Guarded by the group state's mutex;
/// `generation` changes with every remembered choice, so a pointer to a choice read under the mutex stays valid
/// while it has not changed (only the group's calls, one at a time, remember choices).
template <class Options>
struct decision_memo : decision_memo_slot {
    std::vector<decision<Options>> entries;
    std::size_t next = 0;  // the entry replaced next once full
    std::atomic<std::uint64_t> generation{0};

    /// The remembered choice for these inputs, or null.
    [[nodiscard]] decision<Options>* find(const Options& o, int p, std::size_t n, const cost_constants& k,
                                          const automatic_profile* profile) {
        for (auto& d : entries)
            if (d.n == n && d.p == p && d.profile == profile && d.k == k && d.settings == o) return &d;
        return nullptr;
    }
    /// Remembers `d` and returns where it is kept.
    decision<Options>& remember(decision<Options> d) {
        generation.fetch_add(1, std::memory_order_release);
        if (entries.size() < tuning::decision_memo_capacity) return entries.emplace_back(std::move(d));
        decision<Options>& slot = entries[next];
        next = (next + 1) % tuning::decision_memo_capacity;
        slot = std::move(d);
        return slot;
    }
};

/// Where a group's state (shared_state::slots) keeps automatic's measured profile and its remembered choices (with
/// their online rankings); group::set_constants() drops both. Read and written under the state's mutex, so
/// constants, profile and choices change together.
inline constexpr slot_key<automatic_profile> automatic_profile_slot{"automatic/profile"};
inline constexpr slot_key<decision_memo_slot> automatic_decisions_slot{"automatic/decisions"};

/// A choice a thread found for one automatic (its record and that record's generation) and call size, kept while
/// the memo holding it has not changed (its generation), so the next call of that size reaches it without the
/// group state's mutex and the memo's scan.
struct recent_choice {
    const void* record = nullptr;
    std::uint64_t record_generation = 0;
    int p = 0;
    std::size_t n = 0;
    std::uint64_t memo_generation = 0;
    void* choice = nullptr;  // a decision<automatic::options_type> in the memo
};

/// One thread's view of a group's two automatic slots, refreshed only when the group's slot store changed (its
/// version), so a call of a remembered size finds them without the store's lock and map; and the choices that
/// thread found in the memo last (dropped with the view: a new version may mean new constants).
struct hot_slots {
    static constexpr std::size_t recent_ways = 4;
    const slot_store* store = nullptr;
    std::uint64_t version = 0;
    std::shared_ptr<automatic_profile> measured;
    std::shared_ptr<decision_memo_slot> memo;
    std::array<recent_choice, recent_ways> recent{};
    std::size_t next_recent = 0;

    /// The choice kept for these keys while the memo's generation is still `memo_generation`, or null.
    [[nodiscard]] void* find_recent(const void* record, std::uint64_t record_generation, int p, std::size_t n,
                                    std::uint64_t memo_generation) const noexcept {
        for (const recent_choice& r : recent)
            if (r.choice != nullptr && r.n == n && r.p == p && r.record == record &&
                r.record_generation == record_generation && r.memo_generation == memo_generation)
                return r.choice;
        return nullptr;
    }
    void keep_recent(const recent_choice& r) noexcept {
        recent[next_recent] = r;
        next_recent = (next_recent + 1) % recent_ways;
    }
};

/// This thread's view of `slots` (a few groups are kept, the oldest replaced). The version is read before the
/// slots, so a view never outlives a change unnoticed either way (a change in between leaves a view that the next
/// call refreshes); it needs no lock but the store's own.
inline hot_slots& hot_view(const slot_store& slots) {
    constexpr std::size_t ways = 4;
    thread_local std::array<hot_slots, ways> views;
    thread_local std::size_t next = 0;
    const std::uint64_t version = slots.version();
    for (auto& v : views)
        if (v.store == &slots) {
            if (v.version != version) {
                v.measured = slots.find(automatic_profile_slot);
                v.memo = slots.find(automatic_decisions_slot);
                v.version = version;
                v.recent = {};
            }
            return v;
        }
    hot_slots& v = views[next];
    next = (next + 1) % ways;
    v = {&slots, version, slots.find(automatic_profile_slot), slots.find(automatic_decisions_slot), {}, 0};
    return v;
}

}  // namespace hitch::allreduce::detail
