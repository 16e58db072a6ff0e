#pragma once
// hitch::cuda::nccl_api_backend: nccl_backend over the NCCL library, one non-blocking NCCL communicator
// (ncclConfig_t::blocking = 0) and a stream of its own on one GPU. Host code against the CUDA runtime and NCCL
// (link hitch::nccl).
//
// Nothing here blocks the calling thread on the GPU or on another rank:
//   - work is kept in a queue of commands and issued in order from later calls while the communicator is busy
//     (ncclInProgress: a non-blocking communicator may return from ncclGroupEnd before its kernels are on the
//     stream, so nothing is issued behind an NCCL call until ncclCommGetAsyncError says ncclSuccess);
//   - copies between host and device go through page-locked bounce buffers: cudaMemcpyAsync from pageable memory
//     can wait for the stream, which may be held by an NCCL operation waiting for a peer; the bounce buffers are
//     kept in a pool for the backend's life (freeing page-locked memory synchronizes the device);
//   - staging memory is stream-ordered (cudaMallocAsync, cudaFreeAsync: cudaMalloc and cudaFree may synchronize
//     the device, and so wait for NCCL kernels);
//   - tickets are CUDA events, polled with cudaEventQuery.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/reduce_op.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/cuda/nccl/backend.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "hitch::cuda::nccl needs NCCL 2.18 or later (non-blocking communicators, ncclCommSplit, ncclGetLastError)"
#endif

namespace hitch::cuda {

namespace detail {

/// "invalid usage: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000".
[[nodiscard]] inline std::string nccl_text(ncclResult_t result, ncclComm_t comm) {
    std::string text = ncclGetErrorString(result);
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') text += hitch::detail::concat(": ", last);
    return text;
}

[[nodiscard]] inline ncclDataType_t to_nccl_type(dtype t) {
    switch (t) {
        case dtype::f16:
            return ncclFloat16;
        case dtype::bf16:
            return ncclBfloat16;
        case dtype::f32:
            return ncclFloat32;
        case dtype::f64:
            return ncclFloat64;
        case dtype::u8:
            return ncclUint8;
        case dtype::i8:
            return ncclInt8;
        case dtype::i32:
            return ncclInt32;
        case dtype::u32:
            return ncclUint32;
        case dtype::i64:
            return ncclInt64;
        case dtype::u64:
            return ncclUint64;
    }
    throw config_error("hitch::cuda::nccl: an element type NCCL does not know");
}

[[nodiscard]] inline ncclRedOp_t to_nccl_op(reduce_op op) {
    switch (op) {
        case reduce_op::sum:
            return ncclSum;
        case reduce_op::average:
            return ncclAvg;
        case reduce_op::min:
            return ncclMin;
        case reduce_op::max:
            return ncclMax;
    }
    throw config_error("hitch::cuda::nccl: a reduce op NCCL does not know");
}

}  // namespace detail

class nccl_api_backend final : public nccl_backend {
public:
    /// Starts creating rank `rank` of `size` on GPU `device` from `id` (ncclCommInitRankConfig, non-blocking):
    /// state() is in_progress until every rank has joined.
    nccl_api_backend(int device, int size, int rank, const ncclUniqueId& id)
        : device_(device), rank_(rank), size_(size) {
        open_stream();
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclUniqueId copy = id;
        const ncclResult_t r = ncclCommInitRankConfig(&comm_, size, copy, rank, &config);
        if (r != ncclSuccess && r != ncclInProgress) failed_ = "ncclCommInitRankConfig: " + detail::nccl_text(r, comm_);
    }
    nccl_api_backend(const nccl_api_backend&) = delete;
    nccl_api_backend& operator=(const nccl_api_backend&) = delete;
    ~nccl_api_backend() override {
        activate();
        // A split still running writes comm_ when it completes: let it (the parent is aborted on a failed or
        // timed-out split, which ends it), for a bounded time, before this object goes away.
        for (int i = 0; i < 2000 && splitting_from_ != nullptr && split_progress().kind == nccl_state::in_progress; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        comm_ = __atomic_load_n(&comm_, __ATOMIC_ACQUIRE);
        if (comm_ != nullptr && !closed_) ncclCommAbort(comm_);
        comm_ = nullptr;
        for (auto& e : events_) cudaEventDestroy(e.second);
        for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
        if (order_event_ != nullptr) cudaEventDestroy(order_event_);
        if (stream_ != nullptr) cudaStreamDestroy(stream_);
        for (auto& [bytes, p] : bounce_free_) cudaFreeHost(p);
        for (auto& b : bounce_busy_) cudaFreeHost(b.memory);
        for (auto& b : bounce_unrecorded_) cudaFreeHost(b.memory);
    }

    [[nodiscard]] int rank() const override { return rank_; }
    [[nodiscard]] int size() const override { return size_; }
    [[nodiscard]] std::string describe() const override {
        int version = 0;
        ncclGetVersion(&version);
        return hitch::detail::concat("NCCL ", version / 10000, ".", (version / 100) % 100, ".", version % 100, ", GPU ",
                                     device_);
    }
    [[nodiscard]] int device() const noexcept { return device_; }

    [[nodiscard]] bool carries(const void* p) const override {
        if (p == nullptr) return false;
        cudaPointerAttributes a{};
        if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return (a.type == cudaMemoryTypeDevice && a.device == device_) || a.type == cudaMemoryTypeManaged;
    }

    [[nodiscard]] nccl_state state() override {
        if (!failed_.empty()) return {nccl_state::failed, failed_};
        if (closed_) return {nccl_state::ready, {}};
        if (pending_split_) {
            start_split();
            if (!failed_.empty()) return {nccl_state::failed, failed_};
            if (pending_split_) return {nccl_state::in_progress, {}};
        }
        if (splitting_from_ != nullptr) {
            const nccl_state s = split_progress();
            if (s.kind != nccl_state::ready) return s;
        }
        ncclResult_t r = ncclSuccess;
        const ncclResult_t q = ncclCommGetAsyncError(comm_, &r);
        if (q != ncclSuccess) r = q;
        if (r == ncclInProgress) return {nccl_state::in_progress, {}};
        if (r != ncclSuccess) {
            failed_ = detail::nccl_text(r, comm_);
            return {nccl_state::failed, failed_};
        }
        if (!known_) {
            ncclCommUserRank(comm_, &rank_);
            ncclCommCount(comm_, &size_);
            known_ = true;
        }
        pump();
        if (!failed_.empty()) return {nccl_state::failed, failed_};
        return {nccl_state::ready, {}};
    }

    [[nodiscard]] void* allocate(std::size_t bytes) override {
        activate();
        void* p = nullptr;
        check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream_), "cudaMallocAsync");
        return p;
    }
    void release(void* p) override { queue_.push_back(free_cmd{p}); }
    void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) override {
        if (bytes == 0) return;
        bounce b = take_bounce(bytes);
        std::memcpy(b.memory, host_src, bytes);
        queue_.push_back(copy_cmd{device_dst, b.memory, bytes});
        need_order_ = true;
        bounce_unrecorded_.push_back(b);
    }
    void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) override {
        if (bytes == 0) return;
        bounce b = take_bounce(bytes);
        b.host_dst = host_dst;
        b.bytes = bytes;
        queue_.push_back(copy_cmd{b.memory, device_src, bytes});
        need_order_ = true;
        bounce_unrecorded_.push_back(b);
    }
    void group(std::span<const nccl_p2p> ops) override {
        queue_.push_back(group_cmd{{ops.begin(), ops.end()}});
        need_order_ = true;
    }
    void allreduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op) override {
        queue_.push_back(allreduce_cmd{send, recv, count, type, op});
        need_order_ = true;
    }
    [[nodiscard]] nccl_ticket record() override {
        const nccl_ticket t = ++last_ticket_;
        queue_.push_back(record_cmd{t});
        for (bounce& b : bounce_unrecorded_) {
            b.ticket = t;
            bounce_busy_.push_back(b);
        }
        bounce_unrecorded_.clear();
        pump();
        return t;
    }
    [[nodiscard]] bool done(nccl_ticket ticket) override {
        pump();
        while (!events_.empty()) {
            activate();
            const cudaError_t e = cudaEventQuery(events_.front().second);
            if (e == cudaErrorNotReady) break;
            if (e != cudaSuccess) {
                cudaGetLastError();
                failed_ = hitch::detail::concat("cudaEventQuery: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
                return false;
            }
            completed_ = events_.front().first;
            spare_events_.push_back(events_.front().second);
            events_.pop_front();
            finish_bounces();
        }
        return completed_ >= ticket;
    }

    void abort() noexcept override {
        if (comm_ == nullptr || closed_) return;
        activate();
        ncclCommAbort(comm_);
        comm_ = nullptr;
        closed_ = true;
        if (failed_.empty()) failed_ = "aborted";
        queue_.clear();
    }
    [[nodiscard]] bool close() override {
        if (closed_) return true;
        pump();
        if (!queue_.empty() || !events_.empty() || !failed_.empty() || pending_split_) return false;
        if (splitting_from_ != nullptr && split_progress().kind != nccl_state::ready) return false;
        activate();
        ncclResult_t r = ncclSuccess;
        if (!finalizing_) {
            r = ncclCommFinalize(comm_);  // ncclInProgress while NCCL flushes its own work (ours is done)
            finalizing_ = true;
        } else if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) {
            return false;
        }
        if (r != ncclSuccess) {
            if (r != ncclInProgress) failed_ = "ncclCommFinalize: " + detail::nccl_text(r, comm_);
            return false;
        }
        ncclCommDestroy(comm_);
        comm_ = nullptr;
        closed_ = true;
        return true;
    }

    [[nodiscard]] std::unique_ptr<nccl_backend> split(int color, int key) override {
        return std::unique_ptr<nccl_backend>(new nccl_api_backend(*this, color, key));
    }

private:
    struct group_cmd {
        std::vector<nccl_p2p> ops;
    };
    struct allreduce_cmd {
        const void* send;
        void* recv;
        std::size_t count;
        dtype type;
        reduce_op op;
    };
    struct copy_cmd {
        void* dst;
        const void* src;
        std::size_t bytes;
    };
    struct free_cmd {
        void* p;
    };
    struct record_cmd {
        nccl_ticket ticket;
    };
    using command = std::variant<group_cmd, allreduce_cmd, copy_cmd, free_cmd, record_cmd>;

    /// A page-locked buffer in use: returned to the pool once `ticket` is done, after copying into host_dst.
    struct bounce {
        void* memory = nullptr;
        std::size_t capacity = 0;
        void* host_dst = nullptr;
        std::size_t bytes = 0;
        nccl_ticket ticket = 0;
    };

    /// A split of `parent`, issued (ncclCommSplit) once the parent is idle.
    nccl_api_backend(nccl_api_backend& parent, int color, int key)
        : device_(parent.device_), rank_(-1), size_(0), parent_(&parent), color_(color), key_(key) {
        open_stream();
        pending_split_ = true;
        start_split();
    }

    void start_split() {
        if (!pending_split_) return;
        nccl_api_backend& parent = *parent_;
        parent.pump();
        if (!parent.failed_.empty()) {
            failed_ = "the parent communicator failed: " + parent.failed_;
            pending_split_ = false;
            return;
        }
        if (parent.busy()) return;  // issued behind the parent's NCCL work, like any NCCL call on it
        activate();
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        const ncclResult_t r = ncclCommSplit(parent.comm_, color_, key_, &comm_, &config);
        pending_split_ = false;
        parent_ = nullptr;
        if (r != ncclSuccess && r != ncclInProgress)
            failed_ = "ncclCommSplit: " + detail::nccl_text(r, parent.comm_);
        else
            splitting_from_ = &parent;
    }

    /// A non-blocking ncclCommSplit leaves the new communicator NCCL_COMM_NULL until the split has completed (NCCL
    /// stores it from its own thread) and reports the split's progress and errors on the parent meanwhile; the
    /// parent refuses other calls until then (busy()).
    nccl_state split_progress() {
        if (__atomic_load_n(&comm_, __ATOMIC_ACQUIRE) != nullptr) {
            splitting_from_ = nullptr;
            return {nccl_state::ready, {}};
        }
        nccl_api_backend& parent = *splitting_from_;
        if (parent.comm_ == nullptr || parent.closed_) {
            failed_ = "the parent communicator was closed while ncclCommSplit ran";
            return {nccl_state::failed, failed_};
        }
        ncclResult_t r = ncclSuccess;
        const ncclResult_t q = ncclCommGetAsyncError(parent.comm_, &r);
        if (q != ncclSuccess) r = q;
        if (r == ncclSuccess || r == ncclInProgress) return {nccl_state::in_progress, {}};
        failed_ = "ncclCommSplit: " + detail::nccl_text(r, parent.comm_);
        return {nccl_state::failed, failed_};
    }

    void open_stream() {
        activate();
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    void activate() const noexcept { cudaSetDevice(device_); }
    static void check(cudaError_t e, const char* what) {
        if (e != cudaSuccess) {
            cudaGetLastError();
            throw cuda_error(hitch::detail::concat("hitch::cuda::nccl: ", what, " failed: ", cudaGetErrorName(e), ": ",
                                                   cudaGetErrorString(e)));
        }
    }

    /// True while the communicator's state is ncclInProgress (a call still being issued, its init, a split of it).
    /// Asks NCCL every time, not only after a call that returned ncclInProgress: a non-blocking communicator
    /// refuses any call (ncclInvalidArgument) in that state, whatever put it there.
    bool busy() {
        if (comm_ == nullptr) return false;
        ncclResult_t r = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) return false;
        if (r == ncclInProgress) return true;
        if (r != ncclSuccess && nccl_pending_) failed_ = detail::nccl_text(r, comm_);
        nccl_pending_ = false;
        return false;
    }

    /// The caller's device buffers were written by work on the legacy default stream (cudaMemcpy, kernels on
    /// stream 0), which does not order a non-blocking stream: this stream waits for what was issued there so far
    /// before it reads or writes them, as it would behind a blocking stream.
    [[nodiscard]] cudaError_t order_after_default_stream() {
        cudaError_t e = cudaSuccess;
        if (order_event_ == nullptr) e = cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventRecord(order_event_, cudaStreamLegacy);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, order_event_, 0);
        if (e == cudaSuccess) need_order_ = false;
        return e;
    }

    /// Issues queued commands in order while the communicator accepts them.
    void pump() {
        if (comm_ == nullptr || pending_split_ || closed_) return;
        activate();
        while (!queue_.empty() && failed_.empty()) {
            if (busy()) return;
            command& c = queue_.front();
            ncclResult_t r = ncclSuccess;
            cudaError_t e = need_order_ ? order_after_default_stream() : cudaSuccess;
            if (e != cudaSuccess) {
                cudaGetLastError();
                failed_ = hitch::detail::concat("ordering after the default stream: ", cudaGetErrorName(e), ": ",
                                                cudaGetErrorString(e));
                return;
            }
            if (auto* g = std::get_if<group_cmd>(&c)) {
                r = ncclGroupStart();
                for (const nccl_p2p& op : g->ops) {
                    if (r != ncclSuccess) break;
                    r = op.kind == nccl_p2p::send
                            ? ncclSend(op.send_data, op.bytes, ncclUint8, op.peer, comm_, stream_)
                            : ncclRecv(op.recv_data, op.bytes, ncclUint8, op.peer, comm_, stream_);
                }
                const ncclResult_t end = ncclGroupEnd();
                if (r == ncclSuccess) r = end;
                if (r == ncclInProgress) {
                    nccl_pending_ = true;
                    r = ncclSuccess;
                }
            } else if (auto* a = std::get_if<allreduce_cmd>(&c)) {
                r = ncclAllReduce(a->send, a->recv, a->count, detail::to_nccl_type(a->type), detail::to_nccl_op(a->op),
                                  comm_, stream_);
                if (r == ncclInProgress) {
                    nccl_pending_ = true;
                    r = ncclSuccess;
                }
            } else if (auto* cp = std::get_if<copy_cmd>(&c)) {
                e = cudaMemcpyAsync(cp->dst, cp->src, cp->bytes, cudaMemcpyDefault, stream_);
            } else if (auto* f = std::get_if<free_cmd>(&c)) {
                e = cudaFreeAsync(f->p, stream_);
            } else if (auto* rec = std::get_if<record_cmd>(&c)) {
                cudaEvent_t ev = nullptr;
                if (!spare_events_.empty()) {
                    ev = spare_events_.back();
                    spare_events_.pop_back();
                } else {
                    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
                }
                if (e == cudaSuccess) e = cudaEventRecord(ev, stream_);
                if (e == cudaSuccess) events_.emplace_back(rec->ticket, ev);
            }
            if (r != ncclSuccess) {
                failed_ = detail::nccl_text(r, comm_);
                return;
            }
            if (e != cudaSuccess) {
                cudaGetLastError();
                failed_ = hitch::detail::concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
                return;
            }
            queue_.pop_front();
        }
    }

    bounce take_bounce(std::size_t bytes) {
        bounce b;
        auto it = bounce_free_.lower_bound(bytes);
        if (it != bounce_free_.end()) {
            b.capacity = it->first;
            b.memory = it->second;
            bounce_free_.erase(it);
            return b;
        }
        std::size_t capacity = 4096;
        while (capacity < bytes) capacity *= 2;
        activate();
        check(cudaHostAlloc(&b.memory, capacity, cudaHostAllocDefault), "cudaHostAlloc");
        b.capacity = capacity;
        return b;
    }
    void finish_bounces() {
        for (auto it = bounce_busy_.begin(); it != bounce_busy_.end();) {
            if (it->ticket > completed_) {
                ++it;
                continue;
            }
            if (it->host_dst != nullptr) std::memcpy(it->host_dst, it->memory, it->bytes);
            bounce_free_.emplace(it->capacity, it->memory);
            it = bounce_busy_.erase(it);
        }
    }

    int device_;
    int rank_;
    int size_;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    bool known_ = false;
    bool nccl_pending_ = false;
    bool closed_ = false;
    bool finalizing_ = false;
    std::string failed_;

    nccl_api_backend* parent_ = nullptr;          // the parent, until ncclCommSplit is issued
    nccl_api_backend* splitting_from_ = nullptr;  // the parent, while the issued split runs
    bool pending_split_ = false;
    int color_ = 0;
    int key_ = 0;

    std::deque<command> queue_;
    std::deque<std::pair<nccl_ticket, cudaEvent_t>> events_;
    std::vector<cudaEvent_t> spare_events_;
    cudaEvent_t order_event_ = nullptr;  // recorded on the legacy default stream, waited for by stream_
    bool need_order_ = false;            // commands queued since stream_ last waited for the default stream
    nccl_ticket last_ticket_ = 0;
    nccl_ticket completed_ = 0;
    std::multimap<std::size_t, void*> bounce_free_;
    std::vector<bounce> bounce_busy_;
    std::vector<bounce> bounce_unrecorded_;
};

}  // namespace hitch::cuda
