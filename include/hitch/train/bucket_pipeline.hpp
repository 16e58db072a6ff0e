#pragma once
// The order in which a step's gradient buckets are exchanged, and the worker thread that exchanges them while
// backward goes on. Buckets are launched in plan order (bucket k only after buckets < k, so every rank runs the
// same collectives in the same order); with a worker they run there, one at a time, else inline when the step
// finishes. The first error the worker meets is rethrown on the training thread by finish(). The worker is a thread of
// the rank as its communicator C runs them (rank_threads<C>: a system thread, or a simulated cluster's own thread,
// whose exchanges then overlap the rank's computation in virtual time).

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "hitch/concepts/communicator.hpp"

namespace hitch::train::detail {

template <communicator C>
class bucket_pipeline {
public:
    /// `run(b)` exchanges bucket b; it runs on the worker once start() was called, else on the training thread.
    explicit bucket_pipeline(std::function<void(std::size_t)> run) : run_(std::move(run)) {}
    bucket_pipeline(const bucket_pipeline&) = delete;
    bucket_pipeline& operator=(const bucket_pipeline&) = delete;

    ~bucket_pipeline() {
        {
            std::lock_guard lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (worker_.joinable()) worker_.join();
    }

    /// Starts the worker thread, a thread of the rank of `comm`; until then (or without it) buckets run inline in
    /// finish().
    void start(C& comm) {
        worker_ = rank_threads<C>::start(comm, [this] { worker_loop(); });
    }

    [[nodiscard]] bool threaded() const noexcept { return worker_.joinable(); }
    /// Buckets launched in this step.
    [[nodiscard]] std::size_t launched() const noexcept { return launched_; }

    /// Launches buckets [launched(), end): hands them to the worker, or keeps them for finish().
    void launch_until(std::size_t end) {
        if (end <= launched_) return;
        if (!threaded()) {
            launched_ = end;
            return;
        }
        {
            std::lock_guard lock(m_);
            for (std::size_t b = launched_; b < end; ++b) queue_.push_back(b);
            launched_ = end;
        }
        cv_.notify_all();
    }

    /// Runs (inline) or waits for (worker) every launched bucket; rethrows the worker's first error.
    void finish() {
        if (!threaded()) {
            while (next_to_run_ < launched_) run_(next_to_run_++);
            return;
        }
        std::unique_lock lock(m_);
        done_cv_.wait(lock, [&] { return finished_ == launched_; });
        if (worker_error_) std::rethrow_exception(std::exchange(worker_error_, nullptr));
    }

    /// Ends the step: waits for the worker to drain (a failed step may leave buckets running) and forgets its error.
    void reset() {
        if (threaded()) {
            std::unique_lock lock(m_);
            done_cv_.wait(lock, [&] { return finished_ == launched_; });
            worker_error_ = nullptr;
        }
        launched_ = 0;
        finished_ = 0;
        next_to_run_ = 0;
    }

private:
    void worker_loop() {
        for (;;) {
            std::size_t b = 0;
            {
                std::unique_lock lock(m_);
                cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
                if (stop_ && queue_.empty()) return;
                b = queue_.front();
                queue_.pop_front();
            }
            std::exception_ptr failure;
            try {
                run_(b);
            } catch (...) {
                failure = std::current_exception();
            }
            {
                std::lock_guard lock(m_);
                if (failure && !worker_error_) worker_error_ = failure;
                ++finished_;
            }
            done_cv_.notify_all();
        }
    }

    std::function<void(std::size_t)> run_;
    typename rank_threads<C>::thread worker_;
    std::mutex m_;
    typename rank_threads<C>::condition_variable cv_;       // the worker: a bucket was queued, or stop
    typename rank_threads<C>::condition_variable done_cv_;  // the training thread: a bucket finished
    std::deque<std::size_t> queue_;
    bool stop_ = false;
    std::size_t launched_ = 0;     // buckets launched this step (written by the training thread only)
    std::size_t finished_ = 0;     // buckets the worker finished this step
    std::size_t next_to_run_ = 0;  // inline: the next bucket to run
    std::exception_ptr worker_error_;
};

}  // namespace hitch::train::detail
