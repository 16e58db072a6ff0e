#pragma once
// A timeline of what each rank did, in Chrome's trace-event format (load the file in chrome://tracing or
// https://ui.perfetto.dev): one complete event ("ph":"X") per span of compute, bucket packing, compression and
// each all-reduce, with the rank as the process and the thread that ran it as the thread.
//
//   hitch::train::timeline tl(rank);
//   { auto s = tl.span("backward", "compute"); ... }   // recorded when s goes out of scope
//   tl.write(file);                                    // {"traceEvents":[...]}
//
// Recording is thread-safe and cheap (a clock read and a vector push under a mutex); a disabled timeline records
// nothing. Work that runs on neither thread (a GPU stream's kernels, timed by events) goes on a named lane of its own
// (record_on_lane), shown as a thread of that name.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hitch::train {

class timeline {
public:
    using clock = std::chrono::steady_clock;

    struct event {
        std::string name;
        std::string category;
        std::int64_t begin_us = 0;
        std::int64_t duration_us = 0;
        int thread = 0;
        std::string args;  // a JSON object's members, e.g. "\"bytes\":1024", or empty
    };

    /// Records the time between its construction and its destruction.
    class scoped_span {
    public:
        scoped_span(timeline* owner, std::string name, std::string category)
            : owner_(owner), name_(std::move(name)), category_(std::move(category)), begin_(clock::now()) {}
        scoped_span(const scoped_span&) = delete;
        scoped_span& operator=(const scoped_span&) = delete;
        ~scoped_span() {
            if (owner_ != nullptr) owner_->record(std::move(name_), std::move(category_), begin_, clock::now(), args_);
        }
        /// Adds "key":value to the event's args (value written as a JSON number).
        void arg(std::string_view key, double value) {
            if (!args_.empty()) args_ += ',';
            args_ += '"';
            args_ += key;
            args_ += "\":";
            args_ += std::to_string(value);
        }
        /// Adds "key":"text" to the event's args (text is a name: no quotes or backslashes to escape).
        void arg(std::string_view key, std::string_view text) {
            if (!args_.empty()) args_ += ',';
            args_ += '"';
            args_ += key;
            args_ += "\":\"";
            args_ += text;
            args_ += '"';
        }

    private:
        timeline* owner_;
        std::string name_;
        std::string category_;
        clock::time_point begin_;
        std::string args_;
    };

    explicit timeline(int rank = 0, bool enabled = true) : rank_(rank), enabled_(enabled), origin_(clock::now()) {}

    [[nodiscard]] bool enabled() const noexcept { return enabled_; }
    [[nodiscard]] scoped_span span(std::string name, std::string category) {
        return scoped_span(enabled_ ? this : nullptr, std::move(name), std::move(category));
    }

    void record(std::string name, std::string category, clock::time_point begin, clock::time_point end,
                std::string args = {}) {
        if (!enabled_) return;
        const auto us = [&](clock::time_point t) {
            return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
        };
        std::lock_guard lock(m_);
        const auto [it, inserted] = threads_.try_emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()));
        events_.push_back(
            event{std::move(name), std::move(category), us(begin), us(end) - us(begin), it->second, std::move(args)});
    }

    /// Records a span on the lane named `lane` (e.g. "GPU stream"), not on the calling thread's.
    void record_on_lane(std::string_view lane, std::string name, std::string category, clock::time_point begin,
                        clock::time_point end, std::string args = {}) {
        if (!enabled_) return;
        const auto us = [&](clock::time_point t) {
            return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
        };
        std::lock_guard lock(m_);
        int tid = lane_base;
        const auto known = std::find(lanes_.begin(), lanes_.end(), lane);
        if (known == lanes_.end()) {
            tid += static_cast<int>(lanes_.size());
            lanes_.emplace_back(lane);
        } else {
            tid += static_cast<int>(known - lanes_.begin());
        }
        events_.push_back(
            event{std::move(name), std::move(category), us(begin), us(end) - us(begin), tid, std::move(args)});
    }

    [[nodiscard]] std::vector<event> events() const {
        std::lock_guard lock(m_);
        return events_;
    }

    /// Writes {"traceEvents":[...]} with every event recorded so far.
    void write(std::ostream& out) const {
        std::lock_guard lock(m_);
        out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
        bool first = true;
        out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << rank_ << ",\"args\":{\"name\":\"rank " << rank_
            << "\"}}";
        first = false;
        for (std::size_t i = 0; i < lanes_.size(); ++i)
            out << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << rank_
                << ",\"tid\":" << lane_base + static_cast<int>(i) << ",\"args\":{\"name\":\"" << escaped(lanes_[i])
                << "\"}}";
        for (const event& e : events_) {
            if (!first) out << ',';
            first = false;
            out << "\n{\"name\":\"" << escaped(e.name) << "\",\"cat\":\"" << escaped(e.category)
                << "\",\"ph\":\"X\",\"ts\":" << e.begin_us << ",\"dur\":" << e.duration_us << ",\"pid\":" << rank_
                << ",\"tid\":" << e.thread << ",\"args\":{" << e.args << "}}";
        }
        out << "\n]}\n";
    }

private:
    static std::string escaped(std::string_view s) {
        std::string out;
        for (char c : s) {
            if (c == '"' || c == '\\') out += '\\';
            if (static_cast<unsigned char>(c) < 0x20) continue;
            out += c;
        }
        return out;
    }

    /// Lanes' thread ids start here, apart from the threads' (numbered from 0).
    static constexpr int lane_base = 1000;

    int rank_;
    bool enabled_;
    clock::time_point origin_;
    mutable std::mutex m_;
    std::vector<event> events_;
    std::unordered_map<std::thread::id, int> threads_;
    std::vector<std::string> lanes_;
};

/// A span on `t`; without a timeline, one that records nothing.
[[nodiscard]] inline timeline::scoped_span trace(timeline* t, std::string name, std::string category) {
    if (t == nullptr) return timeline::scoped_span(nullptr, {}, {});
    return t->span(std::move(name), std::move(category));
}

}  // namespace hitch::train
