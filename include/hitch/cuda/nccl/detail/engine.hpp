#pragma once
// The engine under cuda::nccl: tag matching, the ordering of NCCL transfers, deadlines and aborts, written against
// the backend and control-channel interfaces (cuda/nccl/backend.hpp, control.hpp) and nothing of CUDA, so it is
// compiled and tested on a host without a GPU.
//
// A family is what one rank built from one bootstrap: the control channel and every context made from it (the root
// communicator and its splits). A context is one communicator: its backend (an NCCL communicator and its stream),
// its members (context rank -> control-channel rank), and its matching state. One mutex per family guards it all;
// progress (polling the control channel, dispatching what arrived, issuing ready work, retiring finished work) runs
// inside every call on any context of the family, as MPI's progress runs inside MPI calls.
//
// Matching. isend announces a message on the control channel: its tag, element type, size and number among the
// messages this sender sent to that receiver; host payloads travel inline (or, at stage_host_bytes and above, over
// NCCL through staging), device payloads over NCCL. The receiver matches announcements against posted receives as MPI
// does (by source or any_source and tag, each receive the earliest matching message, in order per pair), checks the
// size and type (a mismatch fails the receive with comm_error and tells the sender, whose send completes), and only
// then moves bytes. probe and any_source read the announcements.
//
// Ordering. NCCL runs each rank's work on one stream in issue order, and a transfer completes only when both sides'
// operations run, so two ranks that issue their halves of two transfers in different orders can deadlock (a 3-cycle
// of ranks each receiving from the previous and sending to the next is enough). Every NCCL operation therefore gets
// a slot number, the same on every rank it involves, and each rank issues its slots in increasing order (the
// transfers of one slot in one ncclGroupStart/End, then that slot's collectives): by induction on the slot number,
// every issued operation's partners are issued too, so nothing waits for ever. Slots are agreed Lamport-style:
//   - the receiver, once it matched a message that travels over NCCL, proposes its next unissued slot (`ready`) and
//     issues nothing at or beyond its proposals until answered;
//   - the sender answers at once with max(proposal, its own next unissued slot) (`go`); both put the transfer there;
//   - a collective (allreduce::native) is placed, after that slot's transfers, at the maximum of every rank's
//     proposal, exchanged on the control channel once every rank has entered it (see collective()).
// Between one pair, transfers of one slot are issued in the sender's message order on both sides, as NCCL matches
// them. The cost is the handshake: one control round trip per NCCL transfer, before NCCL moves a byte.
//
// Deadlines. Every wait polls, against its deadline, the control channel, the backend's state
// (ncclCommGetAsyncError) and its tickets (CUDA events). A receive or send that has not reached NCCL when its
// deadline passes is withdrawn (the other side is told) and the context stays usable; once an NCCL operation is
// issued it cannot be withdrawn, so the deadline aborts the context (ncclCommAbort), fails what is pending with
// comm_error, and tells the other members, which abort theirs. An NCCL error (the backend's state fails) aborts the
// same way, with NCCL's message.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "hitch/comm/detail/roll_call.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/cuda/nccl/backend.hpp"
#include "hitch/cuda/nccl/control.hpp"
#include "hitch/cuda/nccl/detail/wire.hpp"

namespace hitch::cuda::detail {

using hitch::detail::concat;

/// One send, receive or collective of a context, shared by the request that waits for it and the engine.
struct nccl_op {
    enum class kind : std::uint8_t { send, recv, collective };
    /// unmatched: a receive waiting for its message; handshake: matched (receive) or announced (send), slot not yet
    /// agreed; sending: an inline send still in the control channel; assigned: in a slot not yet issued; posted:
    /// issued to the backend.
    enum class phase : std::uint8_t { unmatched, handshake, sending, assigned, posted, done, failed, cancelled };

    kind what = kind::send;
    phase at = phase::unmatched;
    bool internal = false;  // hitch's own traffic (barriers, agreements): matched apart from the user's
    bool device = false;    // the caller's buffer is memory the backend carries
    bool via_nccl = false;  // the bytes move over NCCL (else inline on the control channel)
    bool orphaned = false;  // a receive given up after it matched: its transfer lands in staging and is dropped
    int peer = 0;           // as the caller named it (a receive may name any_source)
    int tag = 0;
    int rank = 0;  // the rank that posted it
    dtype type = dtype::u8;
    std::size_t bytes = 0;
    const std::byte* send_data = nullptr;
    std::byte* recv_data = nullptr;
    std::uint64_t seq = 0;       // send: its number to `peer`; receive: the matched message's number
    std::uint64_t proposal = 0;  // receive: the slot it proposed, outstanding until `go`
    std::uint64_t control_id = 0;
    message_info info;
    std::string error;
    std::string label;                           // collective: what it is, for messages
    std::function<void(nccl_backend&)> enqueue;  // collective: queues its work

    [[nodiscard]] bool finished() const noexcept {
        return at == phase::done || at == phase::failed || at == phase::cancelled;
    }
};

[[nodiscard]] inline std::string operation_of(const nccl_op& op) {
    switch (op.what) {
        case nccl_op::kind::send:
            return "cuda::nccl send";
        case nccl_op::kind::recv:
            return "cuda::nccl recv";
        case nccl_op::kind::collective:
            break;
    }
    return "cuda::nccl " + op.label;
}

/// "to rank 1, tag 5, 400 bytes, message #3, on rank 0".
[[nodiscard]] inline std::string where_of(const nccl_op& op) {
    if (op.what == nccl_op::kind::collective) return concat("on rank ", op.rank);
    const bool send = op.what == nccl_op::kind::send;
    const int peer = send || op.peer != any_source ? op.peer : op.info.source;
    const std::string who = peer == any_source ? std::string("any rank") : concat("rank ", peer);
    const bool numbered = send || op.at != nccl_op::phase::unmatched;
    return concat(send ? "to " : "from ", who, ", tag ", op.tag, op.internal ? " (hitch's own)" : "", ", ", op.bytes,
                  " bytes", numbered ? concat(", message #", op.seq) : std::string(), ", on rank ", op.rank);
}

[[nodiscard]] inline std::string describe(const nccl_op& op) { return operation_of(op) + " (" + where_of(op) + ")"; }

/// Waits between polls: a few yields, then short sleeps, so a waiting rank does not starve the one it waits for.
class poll_backoff {
public:
    void pause() {
        if (++rounds_ < 64)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(rounds_ < 2048 ? 20 : 100));
    }

private:
    int rounds_ = 0;
};

class nccl_context;

/// The control channel and the contexts one rank made from it; see the file comment.
class nccl_family {
public:
    explicit nccl_family(std::unique_ptr<nccl_control> control) : control_(std::move(control)) {}
    nccl_family(const nccl_family&) = delete;
    nccl_family& operator=(const nccl_family&) = delete;
    /// Lets the last messages leave (a short grace) before the channel goes.
    ~nccl_family() {
        try {
            const deadline grace(seconds_f(1.0));
            poll_backoff backoff;
            while (!control_->idle() && !grace.expired()) backoff.pause();
        } catch (...) {}
    }

    [[nodiscard]] std::mutex& mutex() noexcept { return m_; }
    [[nodiscard]] nccl_control& control() noexcept { return *control_; }

    void attach_locked(nccl_context* context);
    void detach_locked(nccl_context* context);
    [[nodiscard]] bool has_locked(std::uint64_t id) const { return contexts_.count(id) != 0 || closed_.count(id); }
    /// Polls the control channel, dispatches what arrived, and advances every context. Throws comm_error when the
    /// bootstrap communicator failed.
    void progress_locked();

private:
    void dispatch_locked(int source, std::vector<std::byte> bytes);

    std::mutex m_;
    std::unique_ptr<nccl_control> control_;
    std::map<std::uint64_t, nccl_context*> contexts_;
    std::map<std::uint64_t, std::deque<std::pair<int, std::vector<std::byte>>>> early_;  // for contexts not made yet
    std::set<std::uint64_t> closed_;
};

/// One communicator's engine; see the file comment. Public calls take the family's lock.
class nccl_context {
public:
    /// Internal tags: the barrier's rounds and roll calls below barrier_tags, then splits and collectives.
    static constexpr int split_tag = 1 << 16;
    static constexpr int collective_tag = 1 << 17;
    static constexpr std::uint64_t root_id = 1;

    /// A context over `backend` whose ranks are the control channel's `members` (this one is `rank`). The caller
    /// holds the family's lock.
    nccl_context(std::shared_ptr<nccl_family> family, std::uint64_t id, std::vector<int> members, int rank,
                 std::unique_ptr<nccl_backend> backend, std::size_t stage_host_bytes)
        : family_(std::move(family)),
          backend_(std::move(backend)),
          members_(std::move(members)),
          id_(id),
          rank_(rank),
          stage_host_bytes_(stage_host_bytes),
          next_seq_(members_.size(), 0),
          next_internal_seq_(members_.size(), 0) {
        context_rank_.assign(static_cast<std::size_t>(family_->control().size()), -1);
        for (std::size_t r = 0; r < members_.size(); ++r)
            context_rank_[static_cast<std::size_t>(members_[r])] = static_cast<int>(r);
        family_->attach_locked(this);
    }
    nccl_context(const nccl_context&) = delete;
    nccl_context& operator=(const nccl_context&) = delete;
    ~nccl_context() { shutdown(); }

    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return static_cast<int>(members_.size()); }
    [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
    [[nodiscard]] nccl_family& family() noexcept { return *family_; }
    [[nodiscard]] const std::shared_ptr<nccl_family>& family_ptr() const noexcept { return family_; }

    // ---- point to point ----

    std::shared_ptr<nccl_op> post_send(std::span<const std::byte> data, dtype type, int peer, int tag, bool internal) {
        std::lock_guard lock(family_->mutex());
        throw_if_aborted_locked("send");
        auto op = std::make_shared<nccl_op>();
        op->what = nccl_op::kind::send;
        op->internal = internal;
        op->peer = peer;
        op->tag = tag;
        op->rank = rank_;
        op->type = type;
        op->bytes = data.size();
        op->send_data = data.data();
        op->seq = (internal ? next_internal_seq_ : next_seq_)[static_cast<std::size_t>(peer)]++;
        op->device = !data.empty() && backend_->carries(data.data());
        op->via_nccl = !data.empty() && !internal && (op->device || data.size() >= stage_host_bytes_);
        wire_header h;
        h.kind = wire_kind::message;
        h.internal = internal ? 1 : 0;
        h.type = static_cast<std::uint8_t>(type);
        h.via_nccl = op->via_nccl ? 1 : 0;
        h.tag = tag;
        h.context = id_;
        h.seq = op->seq;
        h.bytes = data.size();
        if (op->via_nccl) {
            send_control_locked(peer, encode(h));
            op->at = nccl_op::phase::handshake;
            announced_[{peer, op->seq}] = op;
        } else {
            op->control_id = send_control_locked(peer, encode(h, data));
            op->at = nccl_op::phase::sending;
            sending_.push_back(op);
        }
        family_->progress_locked();
        return op;
    }

    std::shared_ptr<nccl_op> post_recv(std::span<std::byte> data, dtype type, int peer, int tag, bool internal) {
        std::lock_guard lock(family_->mutex());
        throw_if_aborted_locked("recv");
        auto op = std::make_shared<nccl_op>();
        op->what = nccl_op::kind::recv;
        op->internal = internal;
        op->peer = peer;
        op->tag = tag;
        op->rank = rank_;
        op->type = type;
        op->bytes = data.size();
        op->recv_data = data.data();
        op->device = !data.empty() && backend_->carries(data.data());
        family_->progress_locked();
        if (!aborted_.empty()) throw_if_aborted_locked("recv");
        for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it)
            if (matches(*op, *it)) {
                arrival message = std::move(*it);
                unexpected_.erase(it);
                match_locked(op, message);
                return op;
            }
        posted_.push_back(op);
        return op;
    }

    /// True once `op` finished; throws comm_error when it failed.
    bool test(const std::shared_ptr<nccl_op>& op) {
        std::lock_guard lock(family_->mutex());
        if (!op->finished()) family_->progress_locked();
        return finish(*op);
    }

    /// Waits for `op` until `limit`; throws timeout_error past it (see the file comment for what is withdrawn).
    void wait(const std::shared_ptr<nccl_op>& op, const deadline& limit) {
        std::unique_lock lock(family_->mutex());
        if (wait_until(lock, limit, [&] { return op->finished(); })) {
            finish(*op);
            return;
        }
        give_up_locked(op, limit);
    }

    /// A request dropped while pending: withdraws what can be withdrawn; an issued transfer gets a short grace to
    /// finish (it may still touch the caller's buffer), then the context is aborted.
    void cancel(const std::shared_ptr<nccl_op>& op) noexcept {
        try {
            std::unique_lock lock(family_->mutex());
            if (op->finished()) return;
            if (withdraw_locked(op)) return;
            if (!wait_until(lock, deadline(seconds_f(1.0)), [&] { return op->finished(); }))
                abort_locked(concat(describe(*op), " was dropped while its NCCL transfer was in flight"), true);
        } catch (...) {}
    }

    /// The first pending user message from `peer` (or any_source) with `tag`, without receiving it.
    [[nodiscard]] std::optional<message_info> iprobe(int peer, int tag) {
        std::lock_guard lock(family_->mutex());
        family_->progress_locked();
        return find_unexpected_locked(peer, tag);
    }
    [[nodiscard]] message_info probe(int peer, int tag, const deadline& limit) {
        std::unique_lock lock(family_->mutex());
        std::optional<message_info> found;
        if (wait_until(lock, limit, [&] { return (found = find_unexpected_locked(peer, tag)).has_value(); }))
            return *found;
        throw timeout_error("cuda::nccl probe",
                            concat("from ", peer == any_source ? std::string("any rank") : concat("rank ", peer),
                                   ", tag ", tag, ", on rank ", rank_),
                            limit.waited());
    }

    // ---- collectives on the control channel and on NCCL ----

    /// Sends `mine` to every other member on internal `tag` and returns every member's bytes (each of mine.size()),
    /// by rank. Past `limit`, timeout_error naming the members whose bytes did not come.
    std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine, int tag, const deadline& limit,
                                                 std::string_view what) {
        const int p = size();
        std::vector<std::vector<std::byte>> all(static_cast<std::size_t>(p), std::vector<std::byte>(mine.size()));
        std::copy(mine.begin(), mine.end(), all[static_cast<std::size_t>(rank_)].begin());
        std::vector<std::shared_ptr<nccl_op>> recvs(static_cast<std::size_t>(p));
        std::vector<std::shared_ptr<nccl_op>> sends;
        for (int r = 0; r < p; ++r) {
            if (r == rank_) continue;
            recvs[static_cast<std::size_t>(r)] =
                post_recv(std::span<std::byte>(all[static_cast<std::size_t>(r)]), dtype::u8, r, tag, true);
            sends.push_back(post_send(mine, dtype::u8, r, tag, true));
        }
        std::vector<int> missing;
        for (int r = 0; r < p; ++r) {
            if (r == rank_) continue;
            try {
                wait(recvs[static_cast<std::size_t>(r)], limit);
            } catch (const timeout_error&) {
                missing.push_back(r);
            }
        }
        if (!missing.empty())
            throw timeout_error(std::string(what), concat("on rank ", rank_, " of ", p), limit.waited(),
                                comm::detail::describe_absent(missing, missing.front()));
        for (auto& s : sends) wait(s, limit);
        return all;
    }

    /// Runs a collective on NCCL: agrees its slot with every member, queues `enqueue`'s work there, and waits for it
    /// until `limit`. Two rounds on internal tags collective_tag + 2 (number % 1024) + round: first every member
    /// says it has entered; only then does each stop issuing slots at or beyond its next one and send that as its
    /// proposal, and the collective takes the largest. (Proposing on entry would hold back this rank's transfers
    /// while a peer still waits for one of them before it comes to the collective.) A collective that times out
    /// aborts the context: some members may have issued it already.
    void collective(std::string label, const deadline& limit, std::function<void(nccl_backend&)> enqueue) {
        std::uint64_t number = 0;
        {
            std::lock_guard lock(family_->mutex());
            throw_if_aborted_locked(label);
            number = collectives_++;
        }
        const int tag = collective_tag + 2 * static_cast<int>(number % 1024);
        const std::string what = concat("cuda::nccl ", label, " #", number);
        try {
            const std::array<std::byte, 1> here{};
            (void)exchange(here, tag, limit, what + " (waiting for every rank)");
        } catch (const timeout_error& e) {
            abort(concat("on rank ", rank_, ": ", e.what()));
            throw;
        }
        std::uint64_t proposal = 0;
        {
            std::lock_guard lock(family_->mutex());
            throw_if_aborted_locked(label);
            proposal = next_open_;
            proposals_.insert(proposal);
        }
        std::uint64_t place = proposal;
        try {
            std::array<std::byte, sizeof(std::uint64_t)> mine{};
            std::memcpy(mine.data(), &proposal, sizeof(proposal));
            const auto all = exchange(mine, tag + 1, limit, what + " (agreeing its place)");
            for (const auto& bytes : all) {
                std::uint64_t theirs = 0;
                std::memcpy(&theirs, bytes.data(), sizeof(theirs));
                place = std::max(place, theirs);
            }
        } catch (const std::exception& e) {
            {
                std::lock_guard lock(family_->mutex());
                if (auto it = proposals_.find(proposal); it != proposals_.end()) proposals_.erase(it);
            }
            abort(concat("on rank ", rank_, ": ", e.what()));
            throw;
        }
        auto op = std::make_shared<nccl_op>();
        op->what = nccl_op::kind::collective;
        op->rank = rank_;
        op->label = concat(label, " #", number);
        op->enqueue = std::move(enqueue);
        {
            std::lock_guard lock(family_->mutex());
            if (auto it = proposals_.find(proposal); it != proposals_.end()) proposals_.erase(it);
            throw_if_aborted_locked(op->label);
            op->at = nccl_op::phase::assigned;
            slots_[place].collectives.push_back(op);
            post_ready_locked();
        }
        wait(op, limit);
    }

    /// Queues `enqueue`'s work on this rank's stream alone (copies) and waits for it until `limit` (then aborts).
    void local_work(const deadline& limit, std::string label, const std::function<void(nccl_backend&)>& enqueue) {
        auto op = std::make_shared<nccl_op>();
        op->what = nccl_op::kind::collective;
        op->rank = rank_;
        op->label = std::move(label);
        {
            std::lock_guard lock(family_->mutex());
            throw_if_aborted_locked(op->label);
            try {
                enqueue(*backend_);
                op->at = nccl_op::phase::posted;
                flights_.push_back({backend_->record(), {op}});
            } catch (const std::exception& e) {
                abort_locked(concat(op->label, " on rank ", rank_, ": ", e.what()), true);
                throw comm_error(concat("hitch::cuda::nccl: ", op->label, " on rank ", rank_, " failed: ", e.what()));
            }
        }
        wait(op, limit);
    }

    /// A new context from ncclCommSplit: the members with this color, ordered by (key, rank). Collective: every
    /// member calls it; (color, key) pairs are exchanged first (on internal tag split_tag + number % 1024), so a
    /// member that does not come is named. A failed or timed-out split aborts this context too (NCCL's split may
    /// have started on the members that came).
    std::shared_ptr<nccl_context> split(int color, int key, const deadline& limit) {
        std::uint64_t number = 0;
        {
            std::lock_guard lock(family_->mutex());
            throw_if_aborted_locked("split");
            number = splits_++;
        }
        const std::array<int, 2> mine{color, key};
        std::vector<std::array<int, 2>> all(static_cast<std::size_t>(size()));
        try {
            const auto bytes =
                exchange(std::as_bytes(std::span<const int>(mine)), split_tag + static_cast<int>(number % 1024), limit,
                         concat("cuda::nccl split #", number));
            for (std::size_t r = 0; r < all.size(); ++r) std::memcpy(all[r].data(), bytes[r].data(), sizeof(mine));
        } catch (const timeout_error& e) {
            abort(concat("on rank ", rank_, ": ", e.what()));
            throw;
        }
        std::vector<int> group;
        for (int r = 0; r < size(); ++r)
            if (all[static_cast<std::size_t>(r)][0] == color) group.push_back(r);
        std::stable_sort(group.begin(), group.end(), [&](int a, int b) {
            return all[static_cast<std::size_t>(a)][1] < all[static_cast<std::size_t>(b)][1];
        });
        std::vector<int> members;
        int new_rank = -1;
        for (std::size_t i = 0; i < group.size(); ++i) {
            members.push_back(members_[static_cast<std::size_t>(group[i])]);
            if (group[i] == rank_) new_rank = static_cast<int>(i);
        }
        const std::uint64_t id = child_id(id_, number, color);
        std::unique_lock lock(family_->mutex());
        throw_if_aborted_locked("split");
        const auto fail = [&](std::string why) -> std::shared_ptr<nccl_context> {
            abort_locked(concat("split #", number, " failed on rank ", rank_, ": ", why), true);
            throw comm_error(concat("hitch::cuda::nccl: split #", number, " on rank ", rank_, ": ", why));
        };
        if (family_->has_locked(id)) return fail("it derived a context number already in use");
        std::unique_ptr<nccl_backend> made;
        try {
            made = backend_->split(color, key);
        } catch (const std::exception& e) {
            return fail(concat("ncclCommSplit failed: ", e.what()));
        }
        nccl_backend& b = *made;
        std::string failure;
        const bool ready = wait_until(lock, limit, [&] {
            const nccl_state s = b.state();
            if (s.kind == nccl_state::failed) failure = s.message;
            return s.kind != nccl_state::in_progress;
        });
        if (!failure.empty() || !ready || b.rank() != new_rank || b.size() != static_cast<int>(members.size())) {
            b.abort();
            if (!failure.empty()) return fail(concat("ncclCommSplit failed: ", failure));
            if (ready)
                return fail(concat("NCCL placed this rank at ", b.rank(), " of ", b.size(), ", the control channel at ",
                                   new_rank, " of ", members.size()));
            abort_locked(concat("split #", number, " timed out on rank ", rank_, " in ncclCommSplit"), true);
            throw timeout_error("cuda::nccl split",
                                concat("split #", number, " on rank ", rank_,
                                       ": ncclCommSplit did not complete after every member exchanged its color"),
                                limit.waited());
        }
        return std::make_shared<nccl_context>(family_, id, std::move(members), new_rank, std::move(made),
                                              stage_host_bytes_);
    }

    /// The number of this context's next barrier (the same on every member).
    [[nodiscard]] std::uint64_t next_barrier() {
        std::lock_guard lock(family_->mutex());
        return barriers_++;
    }

    /// Waits until the backend's communicator exists on every member (init, or a split's), until `limit`.
    void wait_ready(const deadline& limit, std::string_view what) {
        std::unique_lock lock(family_->mutex());
        std::string failure;
        const bool ready = wait_until(lock, limit, [&] {
            const nccl_state s = backend_->state();
            if (s.kind == nccl_state::failed) failure = s.message;
            return s.kind != nccl_state::in_progress;
        });
        if (!failure.empty()) {
            abort_locked(concat(what, " failed: ", failure), false);
            throw comm_error(concat("hitch::cuda::nccl: ", what, " failed on rank ", rank_, ": ", failure));
        }
        if (!ready) {
            abort_locked(concat(what, " timed out"), false);
            throw timeout_error(
                std::string("cuda::nccl ") + std::string(what),
                concat("rank ", rank_, " of ", size(), ": NCCL did not finish creating the communicator"),
                limit.waited());
        }
        if (backend_->rank() != rank_ || backend_->size() != size()) {
            abort_locked("mismatched ranks", false);
            throw comm_error(concat("hitch::cuda::nccl: ", what, ": NCCL placed rank ", rank_, " at ", backend_->rank(),
                                    " of ", backend_->size()));
        }
    }

    /// The backend, for work queued inside a collective's enqueue (called with the lock held) and for carries().
    [[nodiscard]] bool carries(const void* p) {
        std::lock_guard lock(family_->mutex());
        return backend_->carries(p);
    }
    [[nodiscard]] std::string backend_description() {
        std::lock_guard lock(family_->mutex());
        return backend_->describe();
    }

    /// Why the context was aborted ("" while it works); makes progress first, so a notice from a peer is seen.
    [[nodiscard]] std::string aborted() {
        std::lock_guard lock(family_->mutex());
        family_->progress_locked();
        return aborted_;
    }
    /// Aborts the context (ncclCommAbort) and tells the other members.
    void abort(const std::string& reason) {
        std::lock_guard lock(family_->mutex());
        abort_locked(reason, true);
    }

    /// Which node each member runs on (nodes renumbered in the order of their lowest member).
    [[nodiscard]] node_layout layout() {
        std::lock_guard lock(family_->mutex());
        const node_layout all = family_->control().layout();
        node_layout out;
        std::map<int, int> renumber;
        for (int member : members_) {
            const int node = all.node_of(member);
            auto [it, inserted] = renumber.try_emplace(node, static_cast<int>(renumber.size()));
            out.node_of_rank.push_back(it->second);
        }
        out.nodes = static_cast<int>(renumber.size());
        return out;
    }

    // ---- called by the family, with its lock held ----

    void on_message_locked(int source, const wire_header& h, std::span<const std::byte> payload);
    void advance_locked();

private:
    struct arrival {
        int source = 0;
        int tag = 0;
        bool internal = false;
        bool via_nccl = false;
        dtype type = dtype::u8;
        std::uint64_t seq = 0;
        std::size_t bytes = 0;
        std::vector<std::byte> payload;
    };
    struct slot {
        std::vector<std::shared_ptr<nccl_op>> transfers;
        std::vector<std::shared_ptr<nccl_op>> collectives;
    };
    struct flight {
        nccl_ticket ticket = 0;
        std::vector<std::shared_ptr<nccl_op>> ops;
    };
    using pair_key = std::pair<int, std::uint64_t>;  // (peer, message number)

    [[nodiscard]] static std::uint64_t child_id(std::uint64_t parent, std::uint64_t number, int color) noexcept {
        std::uint64_t x = parent * 0x9e3779b97f4a7c15ULL ^ (number + 1) * 0xbf58476d1ce4e5b9ULL ^
                          (static_cast<std::uint64_t>(color) + 1) * 0x94d049bb133111ebULL;
        x ^= x >> 31;
        x *= 0xd6e8feb86659fd93ULL;
        x ^= x >> 32;
        return x < 16 ? x + 16 : x;  // small numbers stay free for roots
    }

    [[nodiscard]] static bool matches(const nccl_op& recv, const arrival& a) noexcept {
        return recv.internal == a.internal && recv.tag == a.tag && (recv.peer == any_source || recv.peer == a.source);
    }

    /// Polls (progress) until `done()` or `limit`, releasing the lock between polls. Returns done().
    template <class Done>
    bool wait_until(std::unique_lock<std::mutex>& lock, const deadline& limit, Done&& done) {
        poll_backoff backoff;
        for (;;) {
            family_->progress_locked();
            if (done()) return true;
            if (limit.expired()) return done();
            lock.unlock();
            backoff.pause();
            lock.lock();
        }
    }

    /// Throws comm_error if `op` failed; returns whether it finished.
    static bool finish(const nccl_op& op) {
        if (op.at == nccl_op::phase::failed) throw comm_error(op.error);
        return op.finished();
    }

    void throw_if_aborted_locked(std::string_view what) const {
        if (!aborted_.empty())
            throw comm_error(concat("hitch::cuda::nccl: ", what, " on rank ", rank_,
                                    " refused: the communicator was aborted: ", aborted_));
    }

    std::uint64_t send_control_locked(int peer, std::vector<std::byte> bytes) {
        return family_->control().send(members_[static_cast<std::size_t>(peer)], std::move(bytes));
    }
    void send_header_locked(int peer, wire_kind kind, std::uint64_t seq, std::uint64_t index = 0) {
        wire_header h;
        h.kind = kind;
        h.context = id_;
        h.seq = seq;
        h.index = index;
        send_control_locked(peer, encode(h));
    }

    [[nodiscard]] std::optional<message_info> find_unexpected_locked(int peer, int tag) const {
        for (const arrival& a : unexpected_)
            if (!a.internal && a.tag == tag && (peer == any_source || a.source == peer))
                return message_info{a.source, a.tag, a.bytes};
        return std::nullopt;
    }

    /// Pairs receive `op` with message `a`.
    void match_locked(const std::shared_ptr<nccl_op>& op, arrival& a) {
        op->seq = a.seq;
        op->info = {a.source, a.tag, a.bytes};
        const bool raw = a.type == dtype::u8 || op->type == dtype::u8;
        if (a.bytes != op->bytes || (!raw && a.type != op->type)) {
            const auto show = [](std::size_t bytes, dtype t) {
                const std::size_t es = size_of(t);
                return concat(bytes, " bytes (", es != 0 ? bytes / es : bytes, " x ", name(t), ")");
            };
            op->error = concat("hitch::cuda::nccl: message mismatch on rank ", rank_, ": recv from rank ", a.source,
                               " with tag ", a.tag, " expected ", show(op->bytes, op->type), " but the message has ",
                               show(a.bytes, a.type), " (message #", a.seq, ")");
            op->at = nccl_op::phase::failed;
            if (a.via_nccl) send_header_locked(a.source, wire_kind::reject, a.seq);
            return;
        }
        if (!a.via_nccl) {
            if (a.bytes == 0) {
                op->at = nccl_op::phase::done;
            } else if (op->device) {
                op->at = nccl_op::phase::posted;
                try {
                    backend_->copy_from_host(op->recv_data, a.payload.data(), a.bytes);
                    flights_.push_back({backend_->record(), {op}});
                } catch (const std::exception& e) {
                    flights_.push_back({0, {op}});  // failed by the abort
                    abort_locked(concat("copying a message to the GPU on rank ", rank_, " failed: ", e.what()), true);
                }
            } else {
                std::memcpy(op->recv_data, a.payload.data(), a.bytes);
                op->at = nccl_op::phase::done;
            }
            return;
        }
        op->via_nccl = true;
        op->proposal = next_open_;
        proposals_.insert(op->proposal);
        op->at = nccl_op::phase::handshake;
        handshakes_[{a.source, a.seq}] = op;
        send_header_locked(a.source, wire_kind::ready, a.seq, op->proposal);
    }

    void assign_locked(const std::shared_ptr<nccl_op>& op, std::uint64_t index) {
        op->at = nccl_op::phase::assigned;
        slots_[index].transfers.push_back(op);
    }

    /// Issues the slots below every outstanding proposal, in order (see the file comment).
    void post_ready_locked() {
        while (!slots_.empty() && aborted_.empty()) {
            auto it = slots_.begin();
            if (!proposals_.empty() && *proposals_.begin() <= it->first) return;
            const std::uint64_t index = it->first;
            slot s = std::move(it->second);
            slots_.erase(it);
            next_open_ = std::max(next_open_, index + 1);
            try {
                issue_locked(s);
            } catch (const std::exception& e) {
                for (auto& op : s.transfers) slots_[index].transfers.push_back(op);  // failed by the abort below
                for (auto& op : s.collectives) slots_[index].collectives.push_back(op);
                abort_locked(concat("issuing slot ", index, " on rank ", rank_, " failed: ", e.what()), true);
            }
        }
    }

    void issue_locked(slot& s) {
        // Between one pair the transfers of a slot go in the sender's message order, on both sides.
        std::stable_sort(s.transfers.begin(), s.transfers.end(), [](const auto& a, const auto& b) {
            const auto key = [](const nccl_op& o) {
                return std::tuple(o.what == nccl_op::kind::send ? 0 : 1,
                                  o.what == nccl_op::kind::send ? o.peer : o.info.source, o.seq);
            };
            return key(*a) < key(*b);
        });
        std::vector<nccl_p2p> ops;
        std::vector<std::tuple<std::byte*, void*, std::size_t>> unstage;  // received bytes: host <- staging
        std::vector<void*> staging;
        for (const auto& op : s.transfers) {
            nccl_p2p p;
            p.bytes = op->bytes;
            if (op->what == nccl_op::kind::send) {
                p.kind = nccl_p2p::send;
                p.peer = op->peer;
                if (op->device) {
                    p.send_data = op->send_data;
                } else {
                    void* stage = backend_->allocate(op->bytes);
                    backend_->copy_from_host(stage, op->send_data, op->bytes);
                    staging.push_back(stage);
                    p.send_data = stage;
                }
            } else {
                p.kind = nccl_p2p::recv;
                p.peer = op->info.source;
                if (op->device && !op->orphaned) {
                    p.recv_data = op->recv_data;
                } else {
                    void* stage = backend_->allocate(op->bytes);
                    staging.push_back(stage);
                    p.recv_data = stage;
                    if (!op->orphaned) unstage.emplace_back(op->recv_data, stage, op->bytes);
                }
            }
            ops.push_back(p);
        }
        if (!ops.empty()) backend_->group(ops);
        for (auto [host, stage, bytes] : unstage) backend_->copy_to_host(host, stage, bytes);
        for (const auto& op : s.collectives) op->enqueue(*backend_);
        for (void* stage : staging) backend_->release(stage);
        flight f;
        f.ticket = backend_->record();
        for (auto& op : s.transfers) {
            if (!op->orphaned) op->at = nccl_op::phase::posted;
            f.ops.push_back(std::move(op));
        }
        for (auto& op : s.collectives) {
            op->at = nccl_op::phase::posted;
            f.ops.push_back(std::move(op));
        }
        flights_.push_back(std::move(f));
    }

    /// Withdraws `op` if it has not reached NCCL; true when it is finished now (withdrawn, or done meanwhile).
    bool withdraw_locked(const std::shared_ptr<nccl_op>& op) {
        if (op->finished()) return true;
        if (op->what == nccl_op::kind::recv) {
            if (op->at == nccl_op::phase::unmatched) {
                posted_.erase(std::remove(posted_.begin(), posted_.end(), op), posted_.end());
                op->at = nccl_op::phase::cancelled;
                return true;
            }
            if (op->at == nccl_op::phase::handshake || op->at == nccl_op::phase::assigned) {
                op->orphaned = true;  // its transfer still runs (the sender's half is or will be issued), into staging
                op->at = nccl_op::phase::cancelled;
                return true;
            }
            return false;
        }
        if (op->what == nccl_op::kind::send) {
            if (op->at == nccl_op::phase::handshake) {
                announced_.erase({op->peer, op->seq});
                send_header_locked(op->peer, wire_kind::withdraw, op->seq);
                op->at = nccl_op::phase::cancelled;
                return true;
            }
            if (op->at == nccl_op::phase::sending) {
                // Its bytes are in the control channel: the message may still be delivered.
                sending_.erase(std::remove(sending_.begin(), sending_.end(), op), sending_.end());
                op->at = nccl_op::phase::cancelled;
                return true;
            }
        }
        return false;
    }

    /// `op`'s deadline passed: withdraws it, or aborts the context when NCCL already has it. Always throws.
    [[noreturn]] void give_up_locked(const std::shared_ptr<nccl_op>& op, const deadline& limit) {
        const std::string what = where_of(*op);
        const bool was_sending = op->at == nccl_op::phase::sending;
        if (withdraw_locked(op))
            throw timeout_error(operation_of(*op),
                                was_sending ? what + " (its bytes stay queued on the control channel)" : what,
                                limit.waited());
        abort_locked(
            concat(describe(*op), " timed out after ", limit.waited().count(), " s with its NCCL operation issued"),
            true);
        throw timeout_error(operation_of(*op),
                            what +
                                "; the NCCL communicator was aborted (ncclCommAbort): an issued NCCL operation "
                                "cannot be withdrawn",
                            limit.waited());
    }

    void abort_locked(const std::string& reason, bool tell_others) noexcept {
        if (!aborted_.empty()) return;
        aborted_ = reason.empty() ? std::string("aborted") : reason;
        backend_->abort();
        if (tell_others) {
            wire_header h;
            h.kind = wire_kind::abort;
            h.context = id_;
            const std::span<const std::byte> text(reinterpret_cast<const std::byte*>(aborted_.data()), aborted_.size());
            for (int r = 0; r < size(); ++r) {
                if (r == rank_) continue;
                try {
                    send_control_locked(r, encode(h, text));
                } catch (...) {}
            }
        }
        const auto fail = [&](const std::shared_ptr<nccl_op>& op) {
            if (op->finished()) return;
            op->error =
                concat("hitch::cuda::nccl: ", describe(*op), " failed: the communicator was aborted: ", aborted_);
            op->at = nccl_op::phase::failed;
        };
        for (auto& op : posted_) fail(op);
        for (auto& [key, op] : announced_) fail(op);
        for (auto& [key, op] : handshakes_) fail(op);
        for (auto& op : sending_) fail(op);
        for (auto& [index, s] : slots_) {
            for (auto& op : s.transfers) fail(op);
            for (auto& op : s.collectives) fail(op);
        }
        for (auto& f : flights_)
            for (auto& op : f.ops) fail(op);
        posted_.clear();
        unexpected_.clear();
        announced_.clear();
        handshakes_.clear();
        sending_.clear();
        slots_.clear();
        flights_.clear();
        proposals_.clear();
    }

    /// Destruction: withdraws what is pending, lets issued work finish (a bounded grace), then gives the NCCL
    /// communicator back, or aborts it.
    void shutdown() noexcept {
        try {
            std::unique_lock lock(family_->mutex());
            if (aborted_.empty()) {
                for (auto op : std::vector<std::shared_ptr<nccl_op>>(posted_.begin(), posted_.end()))
                    withdraw_locked(op);
                for (auto& [key, op] : std::map<pair_key, std::shared_ptr<nccl_op>>(announced_)) withdraw_locked(op);
                const bool closed = wait_until(lock, deadline(seconds_f(10.0)), [&] {
                    return !aborted_.empty() || (flights_.empty() && slots_.empty() && backend_->close());
                });
                if (aborted_.empty() && !closed)
                    abort_locked("the communicator was destroyed with work in flight", true);
            }
            family_->detach_locked(this);
        } catch (...) {
            try {
                backend_->abort();
            } catch (...) {}
        }
    }

    std::shared_ptr<nccl_family> family_;
    std::unique_ptr<nccl_backend> backend_;
    std::vector<int> members_;       // context rank -> control rank
    std::vector<int> context_rank_;  // control rank -> context rank, -1 for non-members
    std::uint64_t id_;
    int rank_;
    std::size_t stage_host_bytes_;
    std::string aborted_;

    std::vector<std::uint64_t> next_seq_;           // per destination: user messages, numbered from 0
    std::vector<std::uint64_t> next_internal_seq_;  // and hitch's own
    std::deque<std::shared_ptr<nccl_op>> posted_;
    std::deque<arrival> unexpected_;
    std::map<pair_key, std::shared_ptr<nccl_op>> announced_;   // sends over NCCL awaiting `ready`, by (to, seq)
    std::map<pair_key, std::shared_ptr<nccl_op>> handshakes_;  // receives awaiting `go`, by (from, seq)
    std::vector<std::shared_ptr<nccl_op>> sending_;            // inline sends still in the control channel

    std::uint64_t next_open_ = 1;  // the lowest slot not issued yet
    std::multiset<std::uint64_t> proposals_;
    std::map<std::uint64_t, slot> slots_;
    std::deque<flight> flights_;
    std::uint64_t collectives_ = 0;
    std::uint64_t splits_ = 0;
    std::uint64_t barriers_ = 0;
};

// ---------------------------------------------------------------------------------------------------------------

inline void nccl_family::attach_locked(nccl_context* context) {
    contexts_[context->id()] = context;
    if (auto it = early_.find(context->id()); it != early_.end()) {
        auto waiting = std::move(it->second);
        early_.erase(it);
        for (auto& [source, bytes] : waiting) dispatch_locked(source, std::move(bytes));
    }
}

inline void nccl_family::detach_locked(nccl_context* context) {
    contexts_.erase(context->id());
    closed_.insert(context->id());
    early_.erase(context->id());
}

inline void nccl_family::progress_locked() {
    for (int i = 0; i < 256; ++i) {
        auto message = control_->poll();
        if (!message) break;
        dispatch_locked(message->first, std::move(message->second));
    }
    for (auto& [id, context] : contexts_) context->advance_locked();
}

inline void nccl_family::dispatch_locked(int source, std::vector<std::byte> bytes) {
    const wire_header h = decode(bytes);
    if (auto it = contexts_.find(h.context); it != contexts_.end()) {
        it->second->on_message_locked(source, h, payload_of(bytes));
        return;
    }
    if (closed_.count(h.context) != 0) return;  // for a communicator this rank destroyed
    early_[h.context].emplace_back(source, std::move(bytes));
}

inline void nccl_context::on_message_locked(int control_source, const wire_header& h,
                                            std::span<const std::byte> payload) {
    if (!aborted_.empty()) return;
    const int source = context_rank_.at(static_cast<std::size_t>(control_source));
    if (source < 0) return;  // not a member: cannot happen with matching context numbers
    switch (h.kind) {
        case wire_kind::message: {
            arrival a;
            a.source = source;
            a.tag = h.tag;
            a.internal = h.internal != 0;
            a.via_nccl = h.via_nccl != 0;
            a.type = static_cast<dtype>(h.type);
            a.seq = h.seq;
            a.bytes = static_cast<std::size_t>(h.bytes);
            if (!a.via_nccl) a.payload.assign(payload.begin(), payload.end());
            for (auto it = posted_.begin(); it != posted_.end(); ++it)
                if (matches(**it, a)) {
                    auto op = *it;
                    posted_.erase(it);
                    match_locked(op, a);
                    return;
                }
            unexpected_.push_back(std::move(a));
            return;
        }
        case wire_kind::ready: {
            auto it = announced_.find({source, h.seq});
            if (it == announced_.end()) return;  // withdrawn: the receiver hears of it
            auto op = it->second;
            announced_.erase(it);
            const std::uint64_t index = std::max(h.index, next_open_);
            assign_locked(op, index);
            send_header_locked(source, wire_kind::go, h.seq, index);
            post_ready_locked();
            return;
        }
        case wire_kind::go: {
            auto it = handshakes_.find({source, h.seq});
            if (it == handshakes_.end()) return;
            auto op = it->second;
            handshakes_.erase(it);
            if (auto p = proposals_.find(op->proposal); p != proposals_.end()) proposals_.erase(p);
            const bool orphaned = op->orphaned;
            assign_locked(op, h.index);
            if (orphaned) op->at = nccl_op::phase::cancelled;  // still transferred (into staging), never reported
            post_ready_locked();
            return;
        }
        case wire_kind::reject: {
            auto it = announced_.find({source, h.seq});
            if (it == announced_.end()) return;
            it->second->at = nccl_op::phase::done;  // the receiver reports the mismatch; no byte moves
            announced_.erase(it);
            return;
        }
        case wire_kind::withdraw: {
            for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it)
                if (it->source == source && it->seq == h.seq && it->via_nccl) {
                    unexpected_.erase(it);
                    return;
                }
            auto it = handshakes_.find({source, h.seq});
            if (it == handshakes_.end()) return;
            auto op = it->second;
            handshakes_.erase(it);
            if (auto p = proposals_.find(op->proposal); p != proposals_.end()) proposals_.erase(p);
            if (!op->finished()) {
                op->error = concat("hitch::cuda::nccl: ", describe(*op), " failed: rank ", source,
                                   " withdrew the message (its send's deadline passed) after this receive matched it");
                op->at = nccl_op::phase::failed;
            }
            post_ready_locked();
            return;
        }
        case wire_kind::abort: {
            const std::string why(reinterpret_cast<const char*>(payload.data()), payload.size());
            abort_locked(concat("rank ", source, " aborted it: ", why), false);
            return;
        }
    }
}

inline void nccl_context::advance_locked() {
    if (!aborted_.empty()) return;
    try {
        const nccl_state s = backend_->state();
        if (s.kind == nccl_state::failed) {
            abort_locked(concat("NCCL reported an error on rank ", rank_, " (", backend_->describe(), "): ", s.message),
                         true);
            return;
        }
        for (auto it = sending_.begin(); it != sending_.end();) {
            if (family_->control().sent((*it)->control_id)) {
                (*it)->at = nccl_op::phase::done;
                it = sending_.erase(it);
            } else {
                ++it;
            }
        }
        post_ready_locked();
        while (!flights_.empty() && backend_->done(flights_.front().ticket)) {
            for (auto& op : flights_.front().ops)
                if (op->at == nccl_op::phase::posted) op->at = nccl_op::phase::done;
            flights_.pop_front();
        }
    } catch (const std::exception& e) {
        abort_locked(concat("rank ", rank_, ": ", e.what()), true);
    }
}

}  // namespace hitch::cuda::detail
