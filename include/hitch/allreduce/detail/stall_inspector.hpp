#pragma once
// hitch::allreduce::detail::stall_inspector<C>: a group's stall inspector (core/observer.hpp says what it reports).
//
// A rank inside a collective cannot tell which ranks have not come: it waits on its peer of the moment, which may
// itself wait on another. The ranks that have not come are elsewhere (computing, or in an earlier call) and do not
// read the group's messages. So each rank of the group runs a small service thread of its own, on a communicator of
// its own (split from the group's parent, so nothing here meets the calls' traffic or their thread): it answers
// "where are you?" with the calls it has finished and the call it is in, whatever its calls are doing. A reporting
// rank whose call has waited the threshold asks every other rank, waits for their answers (a short grace), and
// reports those that had not entered the call. Nothing is sent while no call waits that long.
//
// The thread polls its two receives every `poll` (a twentieth of the threshold, 1 to 50 ms): a few tests per second
// of a communicator nothing else uses.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/observer.hpp"

namespace hitch::allreduce::detail {

template <communicator C>
class stall_inspector {
public:
    using clock = std::chrono::steady_clock;
    /// Names an operation code of the group's calls.
    using namer = std::string_view (*)(std::uint8_t);

    /// `comm` is the inspector's own communicator (every rank of the group makes one); `report` the observer's
    /// stall callback on a reporting rank (empty elsewhere), `warning_s` its threshold; `shortest_s` the shortest
    /// threshold of any reporting rank (every rank answers within a twentieth of it).
    stall_inspector(C comm, std::function<void(const stall_report&)> report, double warning_s, double shortest_s,
                    namer name_of)
        : comm_(std::move(comm)),
          report_(std::move(report)),
          warning_(warning_s),
          poll_(std::clamp(seconds_f(shortest_s) / 20, seconds_f(0.001), seconds_f(0.05))),
          grace_(std::clamp(warning_ / 2, 4 * poll_, std::max(seconds_f(2.0), 4 * poll_))),
          reports_(static_cast<bool>(report_) && warning_s > 0.0),
          name_of_(name_of),
          thread_([this] { serve(); }) {}
    stall_inspector(const stall_inspector&) = delete;
    stall_inspector& operator=(const stall_inspector&) = delete;
    ~stall_inspector() {
        {
            std::lock_guard lock(m_);
            stopping_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }

    /// The group's call `sequence` starts on this rank (operation code, schedule, deadline).
    void entered(std::uint64_t sequence, std::uint8_t operation, std::string_view schedule, seconds_f timeout) {
        std::lock_guard lock(m_);
        current_ = sequence + 1;
        operation_ = operation;
        schedule_.assign(schedule);
        started_ = clock::now();
        timeout_ = timeout;
    }
    /// ... and has ended (returned or thrown).
    void left(std::uint64_t sequence) {
        std::lock_guard lock(m_);
        current_ = 0;
        done_ = std::max(done_, sequence + 1);
    }

private:
    static constexpr int ask_tag = 1;
    static constexpr int answer_tag = 2;

    struct question {
        std::uint64_t sequence = 0;  // the call the asker waits in
        std::uint64_t inquiry = 0;   // the asker's count of its inquiries
    };
    struct answer {
        std::uint64_t sequence = 0;  // echoed
        std::uint64_t inquiry = 0;   // echoed
        std::uint64_t done = 0;      // calls finished
        std::uint64_t current = 0;   // the call it is in, plus one; 0 between calls
        std::uint8_t operation = 0;  // of the current call
        std::uint8_t reserved[7] = {};
    };
    static_assert(std::is_trivially_copyable_v<question> && std::is_trivially_copyable_v<answer>);

    /// A message on its way out; its bytes live here until the send completes.
    struct outgoing {
        std::unique_ptr<std::byte[]> bytes;
        typename C::request request;
    };

    /// An open inquiry into call `sequence`.
    struct inquiry {
        std::uint64_t id = 0;
        std::uint64_t sequence = 0;
        std::uint8_t operation = 0;
        std::string schedule;
        seconds_f waited{};
        seconds_f timeout{};
        clock::time_point until{};
        std::vector<std::optional<answer>> answers;  // by rank
        int missing = 0;
    };

    template <class T>
    void send(int to, const T& value, int tag) {
        outgoing o;
        o.bytes = std::make_unique<std::byte[]>(sizeof(T));
        std::memcpy(o.bytes.get(), &value, sizeof(T));
        try {
            o.request = comm_.isend(std::span<const std::byte>(o.bytes.get(), sizeof(T)), to, tag);
        } catch (const error&) {
            return;  // a transport that refuses: that rank hears nothing (an inquiry then names it unanswered)
        }
        sends_.push_back(std::move(o));
    }

    void serve() {
        const int p = comm_.size();
        question asked{};
        answer heard{};
        std::optional<typename C::request> asks, answers;
        const auto post = [&] {
            try {
                if (!asks) asks.emplace(comm_.irecv(std::as_writable_bytes(std::span(&asked, 1)), any_source, ask_tag));
                if (!answers)
                    answers.emplace(comm_.irecv(std::as_writable_bytes(std::span(&heard, 1)), any_source, answer_tag));
            } catch (const error&) {}
        };
        std::optional<inquiry> open;
        std::uint64_t inquiries = 0, watched = 0;
        seconds_f next_warning{};
        std::unique_lock lock(m_);
        while (!stopping_) {
            lock.unlock();
            post();
            try {
                while (asks && asks->test()) {  // someone waits in a call: say where this rank is
                    const int from = asks->status().source;
                    asks.reset();
                    answer a;
                    a.sequence = asked.sequence;
                    a.inquiry = asked.inquiry;
                    {
                        std::lock_guard guard(m_);
                        a.done = done_;
                        a.current = current_;
                        a.operation = operation_;
                    }
                    send(from, a, answer_tag);
                    post();
                }
                while (answers && answers->test()) {
                    const int from = answers->status().source;
                    answers.reset();
                    if (open && heard.inquiry == open->id && heard.sequence == open->sequence &&
                        !open->answers[static_cast<std::size_t>(from)]) {
                        open->answers[static_cast<std::size_t>(from)] = heard;
                        --open->missing;
                    }
                    post();
                }
            } catch (const error&) {  // a failed receive (an aborted world): post again next time
                asks.reset();
                answers.reset();
            }
            std::erase_if(sends_, [](outgoing& o) {
                try {
                    return o.request.test();
                } catch (const error&) {
                    return true;
                }
            });
            const clock::time_point now = clock::now();
            if (reports_ && !open) {
                std::lock_guard guard(m_);
                if (current_ != 0 && current_ != watched) {  // a new call: its first warning at the threshold
                    watched = current_;
                    next_warning = warning_;
                }
                if (current_ != 0 && current_ == watched) {
                    const seconds_f waited = now - started_;
                    if (waited >= next_warning && waited < timeout_) {
                        while (next_warning <= waited) next_warning *= 2;
                        open.emplace();
                        open->id = ++inquiries;
                        open->sequence = current_ - 1;
                        open->operation = operation_;
                        open->schedule = schedule_;
                        open->waited = waited;
                        open->timeout = timeout_;
                        open->answers.assign(static_cast<std::size_t>(p), std::nullopt);
                        open->missing = p - 1;
                    }
                }
                if (open) {
                    open->until = now + std::chrono::duration_cast<clock::duration>(grace_);
                    const question q{open->sequence, open->id};
                    for (int r = 0; r < p; ++r)
                        if (r != comm_.rank()) send(r, q, ask_tag);
                }
            }
            if (open && (open->missing == 0 || now >= open->until)) {
                conclude(*open);
                open.reset();
            }
            lock.lock();
            cv_.wait_for(lock, poll_, [&] { return stopping_; });
        }
    }

    /// Reports the ranks that had not entered the call (none: every rank was in it, slow inside; nothing to say).
    void conclude(const inquiry& q) {
        stall_report r;
        r.operation = std::string(name_of_(q.operation));
        r.schedule = q.schedule;
        r.sequence = q.sequence;
        r.rank = comm_.rank();
        r.size = comm_.size();
        r.waited = q.waited;
        r.deadline = q.timeout;
        for (int k = 0; k < comm_.size(); ++k) {
            if (k == comm_.rank()) continue;
            const std::optional<answer>& a = q.answers[static_cast<std::size_t>(k)];
            if (a && (a->done > q.sequence || a->current == q.sequence + 1)) continue;  // it has entered the call
            stall_report::absentee who;
            who.rank = k;
            if (a) {
                who.answered = true;
                who.calls_done = a->done;
                who.in_call = a->current != 0;
                if (who.in_call) {
                    who.in_call_sequence = a->current - 1;
                    who.in_operation = std::string(name_of_(a->operation));
                }
            }
            r.absent.push_back(std::move(who));
        }
        if (r.absent.empty()) return;
        try {
            report_(r);
        } catch (...) {  // the observer's own failure is not the call's
        }
    }

    C comm_;
    std::function<void(const stall_report&)> report_;
    seconds_f warning_;
    seconds_f poll_;
    seconds_f grace_;
    bool reports_;
    namer name_of_;
    std::deque<outgoing> sends_;  // the service thread's only

    std::mutex m_;  // guards what follows, shared with the group's calls
    std::condition_variable cv_;
    bool stopping_ = false;
    std::uint64_t current_ = 0;  // the call in progress, plus one; 0 between calls
    std::uint64_t done_ = 0;     // calls finished
    std::uint8_t operation_ = 0;
    std::string schedule_;
    clock::time_point started_{};
    seconds_f timeout_{};

    std::thread thread_;  // last: it starts once everything above is ready
};

}  // namespace hitch::allreduce::detail
