#pragma once
// A small persistent thread pool and parallel_for with static chunking, for the memory-bound loops of hitch
// (optimizer updates, norms, compressors, local reductions).
//
//   hitch::parallel_for(n, [&](std::size_t begin, std::size_t end) { ... });          // shared pool, all threads
//   hitch::parallel_for(n, fn, {.threads = 2, .align = 4096});                          // chosen width/alignment
//   hitch::parallel_chunks(chunks, [&](std::size_t c) { ... });                          // one call per chunk
//
// Static chunking: [0, n) is cut into contiguous chunks whose boundaries depend only on (n, the number of chunks,
// the alignment), never on timing. Which thread runs a chunk does vary, so a loop whose chunks write disjoint
// elements, or whose per-chunk partial results are combined in chunk order, gives the same bits on every run.
// A reduction that must not depend on the thread count keeps partials per fixed-size block instead (see
// hitch/optim/detail/norm.hpp).
//
// The calling thread always works on its own call's chunks, so nested calls and calls from several threads at
// once cannot deadlock: if every worker is busy elsewhere the caller runs all its chunks itself. An exception
// thrown by any chunk is rethrown in the caller once every started chunk has finished (later chunks are skipped).
// The pool never prints.
//
// Waking a sleeping thread costs tens of microseconds on a virtual machine, as much as a chunk of a 1 MiB loop:
// a worker that finished a job therefore watches for the next one for a short while (spin_wait, set in
// core/tuning.hpp; yielding the processor between looks so other processes still run) before it sleeps, and
// a caller watches its job's last chunks the same way before it blocks. Back-to-back loops (an encode's passes,
// an optimizer's layers) then pay no wake-up.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/tuning.hpp"

namespace hitch {

/// A fixed set of worker threads that run the chunks of parallel_chunks calls. Thread-safe.
class thread_pool {
public:
    /// A pool whose calls run on up to `threads` threads: the caller plus `threads - 1` workers (threads >= 1).
    explicit thread_pool(std::size_t threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    /// The number of threads a call can use (workers + the calling thread).
    [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

    /// Runs fn(c) for every c in [0, chunks), on the calling thread and the workers; returns when all are done.
    /// The first exception thrown by fn is rethrown here (chunks not yet started are then skipped).
    template <class F>
    void run(std::size_t chunks, F&& fn);

    /// The process-wide pool, sized to std::thread::hardware_concurrency() (at least 1). Created on first use.
    [[nodiscard]] static thread_pool& shared();

    /// How long an idle worker, or a caller waiting for its chunks, watches before it sleeps.
    static constexpr std::chrono::microseconds spin_wait = tuning::pool_spin_wait;

private:
    struct job {
        std::function<void(std::size_t)> fn;
        std::size_t chunks = 0;
        std::atomic<std::size_t> next{0};
        std::size_t finished = 0;  // guarded by done_mutex
        std::size_t attached = 0;  // workers inside work_on; guarded by done_mutex
        std::atomic<bool> failed{false};
        std::exception_ptr error;           // guarded by done_mutex
        std::atomic<bool> complete{false};  // finished == chunks && attached == 0, set under done_mutex
        std::mutex done_mutex;
        std::condition_variable done_cv;
    };

    static void work_on(job& j);
    void worker_loop();
    /// Polls ready() until it holds or spin_wait has passed; true if it held.
    template <class Ready>
    static bool spin_until(Ready&& ready);

    std::mutex mutex_;
    std::atomic<std::size_t> queued_{0};  // queue_.size(), for idle workers to watch without the mutex
    std::condition_variable cv_;
    std::deque<job*> queue_;             // jobs with chunks not yet claimed
    std::atomic<bool> stopping_{false};  // set under mutex_ (the condition variable's predicate reads it)
    std::vector<std::thread> workers_;
};

/// How a parallel loop is spread.
struct parallel_options {
    /// Chunks to cut the range into at most (0: the pool's size). 1 runs serially on the caller.
    std::size_t threads = 0;
    /// Chunk boundaries are multiples of this many elements (e.g. a SIMD width or a reduction block).
    std::size_t align = 16;
    /// Fewer than this many elements per chunk is not worth a thread: the loop uses fewer chunks.
    std::size_t min_chunk = 32768;
    /// The pool to run on (nullptr: thread_pool::shared()).
    thread_pool* pool = nullptr;

    void validate() const {
        option_validator("hitch::parallel_options")
            .at_least("align", align, std::size_t{1})
            .at_least("min_chunk", min_chunk, std::size_t{1});
    }
};

/// [begin, end) of chunk `c` when [0, n) is cut into `chunks` pieces with boundaries on multiples of `align`
/// (the last chunk takes the remainder). Chunks may be empty when n is small.
[[nodiscard]] inline std::pair<std::size_t, std::size_t> static_chunk(std::size_t n, std::size_t chunks, std::size_t c,
                                                                      std::size_t align) noexcept {
    const std::size_t units = (n + align - 1) / align;
    const auto at = [&](std::size_t k) {
        // units * k / chunks without overflow for any realistic n (units < 2^58 / chunks).
        return std::min(n, (units / chunks * k + units % chunks * k / chunks) * align);
    };
    return {at(c), c + 1 == chunks ? n : at(c + 1)};
}

/// The number of chunks parallel_for uses for n elements under `options`.
[[nodiscard]] inline std::size_t chunk_count(std::size_t n, const parallel_options& options);

/// Runs fn(begin, end) over static chunks of [0, n). See the file comment for the guarantees.
template <class F>
void parallel_for(std::size_t n, F&& fn, const parallel_options& options = {});

/// Runs fn(c) for c in [0, chunks) on the pool in `options` (its threads field is ignored).
template <class F>
void parallel_chunks(std::size_t chunks, F&& fn, const parallel_options& options = {});

// ================================================ implementation ================================================

inline thread_pool::thread_pool(std::size_t threads) {
    option_validator("hitch::thread_pool").closed("threads", threads, std::size_t{1}, std::size_t{4096});
    workers_.reserve(threads - 1);
    try {
        for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
    } catch (...) {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
        throw;
    }
}

inline thread_pool::~thread_pool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
}

inline thread_pool& thread_pool::shared() {
    static thread_pool pool(std::max<std::size_t>(1, std::thread::hardware_concurrency()));
    return pool;
}

inline void thread_pool::work_on(job& j) {
    for (;;) {
        const std::size_t c = j.next.fetch_add(1, std::memory_order_relaxed);
        if (c >= j.chunks) return;
        std::exception_ptr error;
        if (!j.failed.load(std::memory_order_relaxed)) {
            try {
                j.fn(c);
            } catch (...) {
                error = std::current_exception();
                j.failed.store(true, std::memory_order_relaxed);
            }
        }
        std::lock_guard lock(j.done_mutex);
        if (error && !j.error) j.error = error;
        if (++j.finished == j.chunks && j.attached == 0) j.complete.store(true, std::memory_order_release);
        if (j.finished == j.chunks) j.done_cv.notify_all();
    }
}

template <class Ready>
bool thread_pool::spin_until(Ready&& ready) {
    const auto until = std::chrono::steady_clock::now() + spin_wait;
    for (unsigned k = 1;; ++k) {
        if (ready()) return true;
        if (k % 16 == 0) {
            if (std::chrono::steady_clock::now() >= until) return false;
            std::this_thread::yield();  // lets another process's thread run where the processor is shared
        }
    }
}

inline void thread_pool::worker_loop() {
    for (;;) {
        job* j = nullptr;
        {
            // Recently busy: watch for the next job for a moment before sleeping on the condition variable.
            spin_until([&] {
                return queued_.load(std::memory_order_acquire) != 0 || stopping_.load(std::memory_order_acquire);
            });
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping
            j = queue_.front();
            const std::size_t claimed = j->next.load(std::memory_order_relaxed);
            // A job leaves the queue once nothing is left to claim (the claim below may take the last chunk).
            if (claimed + 1 >= j->chunks) {
                queue_.pop_front();
                queued_.store(queue_.size(), std::memory_order_release);
            }
            if (claimed >= j->chunks) continue;
            // Attach while the job is certainly alive: its caller removes it from the queue under mutex_ and then
            // waits for every attached worker to leave before it returns.
            std::lock_guard attach(j->done_mutex);
            ++j->attached;
        }
        work_on(*j);
        std::lock_guard lock(j->done_mutex);
        if (--j->attached == 0 && j->finished == j->chunks) {
            j->complete.store(true, std::memory_order_release);
            j->done_cv.notify_all();
        }
    }
}

template <class F>
void thread_pool::run(std::size_t chunks, F&& fn) {
    if (chunks == 0) return;
    if (chunks == 1 || workers_.empty()) {
        for (std::size_t c = 0; c < chunks; ++c) fn(c);
        return;
    }
    job j;
    j.fn = std::ref(fn);
    j.chunks = chunks;
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(&j);
        queued_.store(queue_.size(), std::memory_order_release);
    }
    if (chunks - 1 >= workers_.size())
        cv_.notify_all();
    else
        for (std::size_t i = 0; i + 1 < chunks; ++i) cv_.notify_one();
    work_on(j);
    {
        // Every chunk is claimed now; make sure no worker can still pick the job up from the queue.
        std::lock_guard lock(mutex_);
        const auto it = std::find(queue_.begin(), queue_.end(), &j);
        if (it != queue_.end()) {
            queue_.erase(it);
            queued_.store(queue_.size(), std::memory_order_release);
        }
    }
    // The job lives on this stack: return only after taking done_mutex, which the last worker releases after its
    // final touch of the job.
    spin_until([&] { return j.complete.load(std::memory_order_acquire); });
    std::unique_lock lock(j.done_mutex);
    j.done_cv.wait(lock, [&] { return j.finished == j.chunks && j.attached == 0; });
    if (j.error) std::rethrow_exception(j.error);
}

inline std::size_t chunk_count(std::size_t n, const parallel_options& options) {
    thread_pool& pool = options.pool != nullptr ? *options.pool : thread_pool::shared();
    const std::size_t width = options.threads == 0 ? pool.size() : options.threads;
    const std::size_t by_size = std::max<std::size_t>(1, n / std::max<std::size_t>(1, options.min_chunk));
    const std::size_t by_align = std::max<std::size_t>(1, (n + options.align - 1) / options.align);
    return std::max<std::size_t>(1, std::min({width, by_size, by_align}));
}

template <class F>
void parallel_for(std::size_t n, F&& fn, const parallel_options& options) {
    options.validate();
    if (n == 0) return;
    const std::size_t chunks = chunk_count(n, options);
    if (chunks == 1) {
        fn(std::size_t{0}, n);
        return;
    }
    thread_pool& pool = options.pool != nullptr ? *options.pool : thread_pool::shared();
    pool.run(chunks, [&](std::size_t c) {
        const auto [begin, end] = static_chunk(n, chunks, c, options.align);
        if (begin < end) fn(begin, end);
    });
}

template <class F>
void parallel_chunks(std::size_t chunks, F&& fn, const parallel_options& options) {
    thread_pool& pool = options.pool != nullptr ? *options.pool : thread_pool::shared();
    pool.run(chunks, fn);
}

}  // namespace hitch
