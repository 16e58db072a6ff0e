#pragma once
// What an automatic and its copies decided (the constants and profile their calls used, or a loaded state waiting
// to be installed), and the handle through which they share it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/cost.hpp"

namespace hitch::allreduce::detail {

/// What an automatic and its copies (collectives copy the schedule they are given) decided: the constants and
/// profile their calls used, for save_state(); or what load_state() read, installed into the group by the next
/// call instead of measuring.
struct automatic_record {
    std::mutex m;
    std::optional<cost_constants> constants;
    std::shared_ptr<const automatic_profile> profile;
    std::atomic<bool> known{false};    // constants (and profile) recorded from a group
    std::atomic<bool> pending{false};  // loaded and not yet installed
    std::atomic<int> holders{1};       // record_handle's count
    /// Differs between every two hand-outs of a record (a process-wide counter), so what a thread cached for one
    /// automatic is never taken for another that was given the same record, recycled, or its address.
    std::uint64_t generation = 0;

    /// Notes what a group holds now, unless a loaded state waits to be installed.
    void note(const cost_constants& k, std::shared_ptr<const automatic_profile> p) {
        std::lock_guard lock(m);
        if (pending.load(std::memory_order_relaxed)) return;
        constants = k;
        profile = std::move(p);
        known.store(true, std::memory_order_release);
    }
};

/// Shares one automatic_record between an automatic and its copies. A call's default `automatic{}` is made and
/// dropped per call, and a fresh allocation each time cost ~30 ns (a 4 KiB all-reduce over comm::local takes
/// ~0.9 us), so the last holder keeps the record as its thread's spare for the next one.
class record_handle {
public:
    record_handle() : r_(take()) {}
    record_handle(const record_handle& o) noexcept : r_(o.r_) { r_->holders.fetch_add(1, std::memory_order_relaxed); }
    record_handle& operator=(const record_handle& o) noexcept {
        if (r_ != o.r_) {
            o.r_->holders.fetch_add(1, std::memory_order_relaxed);
            give(r_);
            r_ = o.r_;
        }
        return *this;
    }
    ~record_handle() { give(r_); }

    [[nodiscard]] automatic_record* operator->() const noexcept { return r_; }
    [[nodiscard]] automatic_record* get() const noexcept { return r_; }

private:
    /// Set once the thread's spare slot is destroyed (a static automatic may outlive it at exit); trivially
    /// destructible, so it can still be read then.
    static bool& slot_gone() noexcept {
        thread_local bool gone = false;
        return gone;
    }
    struct spare_slot {
        automatic_record* r = nullptr;
        ~spare_slot() {
            delete r;
            r = nullptr;
            slot_gone() = true;
        }
    };
    static spare_slot& spare() noexcept {
        thread_local spare_slot s;
        return s;
    }
    static automatic_record* take() {
        static std::atomic<std::uint64_t> hand_outs{0};
        automatic_record* r = nullptr;
        if (!slot_gone()) {
            spare_slot& s = spare();
            r = s.r;
            s.r = nullptr;
        }
        if (r == nullptr) r = new automatic_record();
        r->generation = hand_outs.fetch_add(1, std::memory_order_relaxed) + 1;
        return r;
    }
    static void give(automatic_record* r) noexcept {
        if (r->holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        // The last holder: nobody else can see it, so it is reset without its lock.
        r->constants.reset();
        r->profile.reset();
        r->known.store(false, std::memory_order_relaxed);
        r->pending.store(false, std::memory_order_relaxed);
        r->holders.store(1, std::memory_order_relaxed);
        if (slot_gone()) {
            delete r;
            return;
        }
        spare_slot& s = spare();
        if (s.r == nullptr)
            s.r = r;
        else
            delete r;
    }

    automatic_record* r_;
};

}  // namespace hitch::allreduce::detail
