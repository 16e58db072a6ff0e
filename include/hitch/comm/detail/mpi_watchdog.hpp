#pragma once
// Deadlines for the MPI calls that have no non-blocking form (MPI_Comm_split, MPI_Comm_split_type, MPI_Finalize) or
// whose non-blocking form costs more than the call (a small MPI_Allreduce once every rank is known to be there).
// MPICH 4.0 cannot recover a communicator after a rank dies, and such a call then never returns; so each one runs
// under a watch, and a watchdog thread that finds a watch past its deadline says on standard error what was waited
// for, on which rank and for how long, and ends the job: MPI_Abort (every rank stops, the launcher exits non-zero),
// or, for MPI_Finalize, this process alone with exit status 1 (the launcher ends the rest).
//
// A watch costs a lock and a list insertion and wakes nobody; the thread, started by the first watch, looks every
// 50 ms.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "hitch/comm/detail/mpi_receiver.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm::detail {

/// Set once this process has seen a deadline pass, or an MPI error, on an MPI communicator: a rank may be gone, so
/// MPI_Finalize gets a shorter watch.
inline std::atomic<bool>& mpi_trouble() {
    static std::atomic<bool> seen{false};
    return seen;
}

/// How long MPI_Finalize may take: the default deadline, or after trouble a quarter of it (1 s at least), since the
/// ranks that are left reach it about together.
[[nodiscard]] inline seconds_f finalize_timeout() {
    const seconds_f full = timeout_from_environment();
    return mpi_trouble().load() ? std::clamp(full / 4, std::min(full, seconds_f(1.0)), full) : full;
}

/// Waits for a non-blocking MPI collective until `limit`; past it, timeout_error naming `what` (the collective
/// cannot be cancelled: the communicator is unusable afterwards).
inline void mpi_wait_collective(MPI_Request& request, const deadline& limit, const std::string& what, int rank) {
    int code = MPI_SUCCESS;
    const bool done = poll_until(limit, [&] {
        int flag = 0;
        code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
        return code != MPI_SUCCESS || flag != 0;
    });
    if (code != MPI_SUCCESS) {
        mpi_trouble().store(true);
        mpi_check(code, what);
    }
    if (!done) {
        mpi_trouble().store(true);
        throw timeout_error(what,
                            concat("on rank ", rank, ": a rank did not take part (an MPI collective cannot be ",
                                   "cancelled; this communicator is unusable now)"),
                            limit.waited());
    }
}

class mpi_watchdog {
public:
    enum class ending { abort_job, exit_process };

private:
    struct entry {
        std::string what;
        std::chrono::steady_clock::time_point due;
        seconds_f timeout;
        ending how;
        int rank;        // in MPI_COMM_WORLD, asked when the watch opens (MPI may be finalising when it fires)
        bool may_abort;  // MPI_THREAD_MULTIPLE: MPI_Abort may be called from the watchdog's thread
    };

public:
    /// Watches the code between its construction and destruction: past `timeout`, the job ends (see above).
    class watch {
    public:
        watch(std::string what, seconds_f timeout, ending how = ending::abort_job)
            : it_(instance().open(std::move(what), timeout, how)) {}
        watch(const watch&) = delete;
        watch& operator=(const watch&) = delete;
        ~watch() { instance().close(it_); }

    private:
        std::list<entry>::iterator it_;
    };

    mpi_watchdog(const mpi_watchdog&) = delete;
    mpi_watchdog& operator=(const mpi_watchdog&) = delete;
    ~mpi_watchdog() {
        {
            std::lock_guard lock(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    static mpi_watchdog& instance() {
        static mpi_watchdog dog;
        return dog;
    }

private:
    mpi_watchdog() = default;

    std::list<entry>::iterator open(std::string what, seconds_f timeout, ending how) {
        std::lock_guard lock(m_);
        if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
        const auto due =
            std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout);
        int rank = -1;
        int level = MPI_THREAD_SINGLE;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Query_thread(&level);
        watches_.push_front({std::move(what), due, timeout, how, rank, level == MPI_THREAD_MULTIPLE});
        return watches_.begin();  // no wake-up: the thread looks every 50 ms, so a watch costs the caller no switch
    }
    void close(std::list<entry>::iterator it) {
        std::lock_guard lock(m_);
        watches_.erase(it);
    }

    void run() {
        std::unique_lock lock(m_);
        while (!stop_) {
            const auto now = std::chrono::steady_clock::now();
            for (const entry& e : watches_)
                if (now >= e.due) end_job(e);  // does not return
            cv_.wait_for(lock, std::chrono::milliseconds(50));
        }
    }

    [[noreturn]] static void end_job(const entry& e) {
        std::fprintf(stderr,
                     "hitch: %s did not return within %.3f s on world rank %d (a rank has died or stopped calling "
                     "MPI; an MPI call cannot be cancelled): ending the %s\n",
                     e.what.c_str(), e.timeout.count(), e.rank, e.how == ending::abort_job ? "job" : "process");
        std::fflush(stderr);
        if (e.how == ending::abort_job && e.may_abort) MPI_Abort(MPI_COMM_WORLD, 1);
        std::_Exit(1);  // MPI_Abort returned, or may not be called from this thread: the launcher ends the rest
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::list<entry> watches_;
    std::thread thread_;
    bool stop_ = false;
};

}  // namespace hitch::comm::detail
