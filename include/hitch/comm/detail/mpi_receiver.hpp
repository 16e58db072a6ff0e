#pragma once
// hitch::comm::detail::mpi_receiver: comm::mpi's receives. MPI reports a truncated message through the error
// handler of MPI_COMM_WORLD (fatal by default), not through the communicator's, so receives are matched here with
// matched probes and a message of the wrong size is drained and reported as comm_error instead.

#include <mpi.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm {
namespace detail {

using hitch::detail::concat;  // the communicators' detail namespace shares hitch's message helper

[[nodiscard]] inline std::string mpi_error_string(int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return concat("MPI error code ", code);
    return std::string(text, static_cast<std::size_t>(length));
}

inline void mpi_check(int code, std::string_view call) {
    if (code != MPI_SUCCESS) throw comm_error(concat("hitch::comm::mpi: ", call, " failed: ", mpi_error_string(code)));
}

[[nodiscard]] inline bool mpi_usable() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized != 0 && finalized == 0;
}

/// A receive waiting for its message. Receives are matched lazily with matched probes (MPI_Improbe), in the order
/// they were posted, so a message of the wrong size is detected before any byte lands in the user's buffer: MPI
/// would report a truncation through MPI_COMM_WORLD's error handler (fatal by default), not through ours.
struct mpi_recv_slot {
    enum state_t : int { unmatched, receiving, done, failed, cancelled };
    std::byte* data = nullptr;
    std::size_t bytes = 0;
    int peer = 0;
    int tag = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    state_t state = unmatched;
    message_info info{};
    std::string error;
};

/// The receives of one communicator that have not met their message yet, in post order.
class mpi_receiver {
public:
    explicit mpi_receiver(int rank) : rank_(rank) {}

    void post(const std::shared_ptr<mpi_recv_slot>& slot) {
        std::lock_guard lock(m_);
        unmatched_.push_back(slot);
    }

    /// Advances `slot`; true once it is done or failed.
    bool progress(mpi_recv_slot& slot) {
        std::lock_guard lock(m_);
        match_pending();
        if (slot.state == mpi_recv_slot::receiving) {
            int flag = 0;
            MPI_Status status{};
            const int code = MPI_Test(&slot.req, &flag, &status);
            if (code != MPI_SUCCESS) {
                slot.req = MPI_REQUEST_NULL;
                slot.state = mpi_recv_slot::failed;
                slot.error = concat("hitch::comm::mpi: recv from rank ", slot.info.source, ", tag ", slot.info.tag,
                                    " on rank ", rank_, " failed: ", mpi_error_string(code));
            } else if (flag != 0) {
                slot.state = mpi_recv_slot::done;
            }
        }
        return slot.state == mpi_recv_slot::done || slot.state == mpi_recv_slot::failed;
    }

    /// Withdraws a receive that has not met its message; one already receiving is completed first.
    void cancel(mpi_recv_slot& slot) noexcept {
        std::unique_lock lock(m_);
        if (slot.state == mpi_recv_slot::unmatched) {
            std::erase_if(unmatched_, [&](const auto& p) { return p.get() == &slot; });
            slot.state = mpi_recv_slot::cancelled;
            return;
        }
        if (slot.state != mpi_recv_slot::receiving) return;
        lock.unlock();
        const deadline grace(seconds_f(1.0));
        while (!grace.expired() && !progress(slot)) std::this_thread::yield();
        lock.lock();
        if (slot.state == mpi_recv_slot::receiving) {  // a matched message that never finished: let MPI finish it
            MPI_Request_free(&slot.req);
            slot.state = mpi_recv_slot::cancelled;
        }
    }

    /// Matches pending receives to waiting messages (call before probing, so a probe sees what a receive would).
    void match() {
        std::lock_guard lock(m_);
        match_pending();
    }

private:
    void match_pending() {
        for (std::size_t i = 0; i < unmatched_.size();) {
            auto& probe_slot = *unmatched_[i];
            int flag = 0;
            MPI_Message message = MPI_MESSAGE_NULL;
            MPI_Status status{};
            const int code = MPI_Improbe(probe_slot.peer == any_source ? MPI_ANY_SOURCE : probe_slot.peer,
                                         probe_slot.tag, probe_slot.comm, &flag, &message, &status);
            if (code != MPI_SUCCESS || flag == 0) {
                ++i;
                continue;
            }
            // The message goes to the earliest-posted receive it matches (MPI's rule), which may precede i.
            std::size_t target = 0;
            while (target < i &&
                   !(unmatched_[target]->comm == probe_slot.comm && unmatched_[target]->tag == status.MPI_TAG &&
                     (unmatched_[target]->peer == any_source || unmatched_[target]->peer == status.MPI_SOURCE)))
                ++target;
            auto slot = unmatched_[target];
            unmatched_.erase(unmatched_.begin() + static_cast<std::ptrdiff_t>(target));
            bind(*slot, message, status);
            i = target;
        }
    }

    void bind(mpi_recv_slot& slot, MPI_Message& message, const MPI_Status& status) {
        MPI_Count count = 0;
        MPI_Get_count_c(&status, MPI_BYTE, &count);
        slot.info = {status.MPI_SOURCE, status.MPI_TAG, static_cast<std::size_t>(count)};
        if (static_cast<std::size_t>(count) != slot.bytes) {
            std::vector<std::byte> sink(static_cast<std::size_t>(count));  // drain it; the user's buffer is untouched
            MPI_Mrecv_c(sink.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
            slot.state = mpi_recv_slot::failed;
            slot.error = concat("hitch::comm::mpi: message mismatch on rank ", rank_, ": recv from rank ",
                                status.MPI_SOURCE, " with tag ", status.MPI_TAG, " expected ", slot.bytes,
                                " bytes but the message has ", count, " bytes");
            return;
        }
        const int code = MPI_Imrecv_c(slot.data, count, MPI_BYTE, &message, &slot.req);
        if (code != MPI_SUCCESS) {
            slot.state = mpi_recv_slot::failed;
            slot.error = concat("hitch::comm::mpi: MPI_Imrecv on rank ", rank_, " failed: ", mpi_error_string(code));
            return;
        }
        slot.state = mpi_recv_slot::receiving;
    }

    std::mutex m_;
    std::deque<std::shared_ptr<mpi_recv_slot>> unmatched_;
    int rank_;
};

}  // namespace detail

}  // namespace hitch::comm
