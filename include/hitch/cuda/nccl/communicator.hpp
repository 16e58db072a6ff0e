#pragma once
// hitch::cuda::nccl: the communicator over NCCL, as host code that names no CUDA or NCCL header: it is assembled
// from an nccl_backend (cuda/nccl/backend.hpp; the one over the real library is in hitch/cuda/nccl.hpp, which also
// bootstraps it over comm::mpi or comm::local) and a control channel (cuda/nccl/control.hpp). The engine below it
// (cuda/nccl/detail/engine.hpp) explains the design: tags, probe and any_source served from announcements on the
// control channel, NCCL transfers ordered by agreed slots so that no two ranks can wait on each other for ever,
// deadlines that withdraw or abort.
//
//   Device buffers (memory the backend carries: the rank's GPU, managed or mapped memory) move with ncclSend and
//   ncclRecv in ncclGroupStart/End on the communicator's stream, after a handshake on the control channel. Host
//   buffers travel inline on the control channel (or through device staging over NCCL, from
//   nccl_options::stage_host_bytes up). A send and its receive may be in different spaces.
//
// It models hitch::communicator and declares carries_device_memory (it carries host and cuda memory) and
// has_node_layout; allreduce::native runs on it as ncclAllReduce (hitch/cuda/nccl/native.hpp).

#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/detail/barrier.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/reduce_op.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/nccl/backend.hpp"
#include "hitch/cuda/nccl/control.hpp"
#include "hitch/cuda/nccl/detail/engine.hpp"
#include "hitch/cuda/nccl/options.hpp"

namespace hitch::cuda {

/// Communicator over NCCL. Move-only; every copy of a context (after a move) is the same communicator.
class nccl {
public:
    /// A non-blocking send or receive. Destroyed while pending: withdrawn where NCCL does not have it yet; an issued
    /// transfer gets a short grace, then the communicator is aborted (it could still touch the caller's buffer).
    class request {
    public:
        request() = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        request(request&& other) noexcept = default;
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                drop();
                op_ = std::move(other.op_);
                context_ = std::move(other.context_);
                timeout_ = other.timeout_;
            }
            return *this;
        }
        ~request() { drop(); }

        /// True once complete; throws comm_error when it failed (a message of the wrong size, an aborted
        /// communicator, an NCCL error).
        bool test() { return !op_ || context_->test(op_); }
        /// Waits up to the communicator's timeout.
        void wait() { wait(deadline(timeout_)); }
        /// Waits until `limit`; throws timeout_error naming the operation, its peer, tag and message number.
        void wait(const deadline& limit) {
            if (op_) context_->wait(op_, limit);
        }
        /// Source, tag and size of a completed receive (of a send: its destination, tag and size).
        [[nodiscard]] message_info status() const {
            if (!op_) return {};
            if (op_->what == detail::nccl_op::kind::send) return {op_->peer, op_->tag, op_->bytes};
            return op_->info;
        }
        [[nodiscard]] std::string describe() const { return op_ ? detail::describe(*op_) : "no operation"; }

    private:
        friend class nccl;
        request(std::shared_ptr<detail::nccl_op> op, std::shared_ptr<detail::nccl_context> context, seconds_f timeout)
            : op_(std::move(op)), context_(std::move(context)), timeout_(timeout) {}
        void drop() noexcept {
            if (op_) context_->cancel(op_);
            op_.reset();
            context_.reset();
        }

        std::shared_ptr<detail::nccl_op> op_;
        std::shared_ptr<detail::nccl_context> context_;
        seconds_f timeout_{};
    };

    static constexpr std::string_view name = "cuda::nccl";
    static constexpr bool shares_address_space = false;

    /// Assembles the communicator from an NCCL backend (being created: its state may be in_progress) and a control
    /// channel over the same ranks. Collective: every rank constructs it; a rank that does not come within the
    /// timeout is named, and NCCL's own setup has the same deadline. hitch::cuda::nccl_over() (hitch/cuda/nccl.hpp)
    /// builds both parts from a bootstrap communicator.
    nccl(std::unique_ptr<nccl_backend> backend, std::unique_ptr<nccl_control> control,
         const nccl_options& options = {}) {
        options.validate();
        if (!backend || !control) throw config_error("hitch::cuda::nccl: a backend and a control channel are needed");
        timeout_ = seconds_f(options.timeout_s);
        rank_ = control->rank();
        size_ = control->size();
        const deadline limit(timeout_);
        auto family = std::make_shared<detail::nccl_family>(std::move(control));
        {
            std::lock_guard lock(family->mutex());
            std::vector<int> members(static_cast<std::size_t>(size_));
            for (int r = 0; r < size_; ++r) members[static_cast<std::size_t>(r)] = r;
            context_ = std::make_shared<detail::nccl_context>(family, detail::nccl_context::root_id, std::move(members),
                                                              rank_, std::move(backend), options.stage_host_bytes);
        }
        barrier_until(limit);  // names a rank that never came, where NCCL's init would only wait
        context_->wait_ready(limit, "communicator creation (ncclCommInitRank)");
    }
    nccl(const nccl&) = delete;
    nccl& operator=(const nccl&) = delete;
    nccl(nccl&&) noexcept = default;
    nccl& operator=(nccl&&) noexcept = default;
    ~nccl() = default;

    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return size_; }
    [[nodiscard]] int max_tag() const noexcept { return INT_MAX; }
    [[nodiscard]] seconds_f timeout() const noexcept { return timeout_; }
    void set_timeout(seconds_f t) {
        option_validator("hitch::cuda::nccl::set_timeout").open_closed("timeout_s", t.count(), 0.0, 1e9);
        timeout_ = t;
    }
    /// Host memory travels on the control channel (or staged), device memory over NCCL: both are carried.
    [[nodiscard]] bool carries(memory_space space) const noexcept {
        return space == memory_space::host || space == memory_space::cuda;
    }
    /// The node of each rank, as the bootstrap communicator knows it.
    [[nodiscard]] hitch::node_layout node_layout() const { return context_->layout(); }
    /// What NCCL runs on, for messages ("NCCL 2.28.9, GPU 0").
    [[nodiscard]] std::string describe_backend() const { return context_->backend_description(); }
    /// Why the communicator was aborted, or "" while it works. After an abort every call throws comm_error.
    [[nodiscard]] std::string aborted() const { return context_->aborted(); }

    template <element_type T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        check_peer(peer, false, "isend");
        check_tag(tag, "isend");
        return {context_->post_send(std::as_bytes(data), dtype_of<T>(), peer, tag, false), context_, timeout_};
    }
    template <element_type T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    template <element_type T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        static_assert(!std::is_const_v<T>, "hitch::cuda::nccl::irecv needs a writable span");
        check_peer(peer, true, "irecv");
        check_tag(tag, "irecv");
        return {context_->post_recv(std::as_writable_bytes(data), dtype_of<T>(), peer, tag, false), context_, timeout_};
    }
    template <element_type T>
    void send(std::span<const T> data, int peer, int tag) {
        isend(data, peer, tag).wait();
    }
    template <element_type T>
    void send(std::span<T> data, int peer, int tag) {
        isend(std::span<const T>(data), peer, tag).wait();
    }
    template <element_type T>
    message_info recv(std::span<T> data, int peer, int tag) {
        auto r = irecv(data, peer, tag);
        r.wait();
        return r.status();
    }

    /// Blocks until a message from `peer` (or any_source) with `tag` is announced; its source and size.
    [[nodiscard]] message_info probe(int peer, int tag) {
        check_peer(peer, true, "probe");
        check_tag(tag, "probe");
        return context_->probe(peer, tag, deadline(timeout_));
    }
    [[nodiscard]] std::optional<message_info> iprobe(int peer, int tag) {
        check_peer(peer, true, "iprobe");
        check_tag(tag, "iprobe");
        return context_->iprobe(peer, tag);
    }

    /// Every rank arrives, or timeout_error names the ranks that did not.
    void barrier() { barrier_until(deadline(timeout_)); }

    /// Sub-communicators (ncclCommSplit): ranks with the same color (>= 0) form one, ordered by (key, rank).
    [[nodiscard]] nccl split(int color, int key) {
        option_validator("hitch::cuda::nccl::split").at_least("color", color, 0);
        nccl out;
        out.context_ = context_->split(color, key, deadline(timeout_));
        out.rank_ = out.context_->rank();
        out.size_ = out.context_->size();
        out.timeout_ = timeout_;
        return out;
    }

    /// NCCL's all-reduce of `data` (device memory used in place, host memory staged through the GPU), collective;
    /// until `limit`, after which the communicator is aborted. average is ncclAvg. min and max keep a NaN from any
    /// rank, as hitch's other schedules do (NCCL's own drop it): a mask of NaN positions is all-reduced with the
    /// data and the result patched, which costs two copies across PCIe for device data and one extra small
    /// all-reduce. allreduce::native calls this.
    template <floating_element T>
    void allreduce_native(std::span<T> data, reduce_op op, const deadline& limit) {
        if (data.empty()) return;
        const std::size_t n = data.size();
        const std::size_t bytes = data.size_bytes();
        const bool device = context_->carries(data.data());
        const bool minmax = op == reduce_op::min || op == reduce_op::max;
        std::vector<std::uint8_t> mask;
        if (minmax) {
            mask.resize(n);
            if (device) {
                std::vector<T> values(n);
                context_->local_work(limit, "native all-reduce (reading NaNs)",
                                     [&](nccl_backend& b) { b.copy_to_host(values.data(), data.data(), bytes); });
                for (std::size_t i = 0; i < n; ++i) mask[i] = is_nan(values[i]) ? 1 : 0;
            } else {
                for (std::size_t i = 0; i < n; ++i) mask[i] = is_nan(data[i]) ? 1 : 0;
            }
        }
        context_->collective("native all-reduce", limit, [&](nccl_backend& b) {
            void* buffer = device ? static_cast<void*>(data.data()) : b.allocate(bytes);
            if (!device) b.copy_from_host(buffer, data.data(), bytes);
            b.allreduce(buffer, buffer, n, dtype_of<T>(), op);
            if (minmax) {
                void* flags = b.allocate(n);
                b.copy_from_host(flags, mask.data(), n);
                b.allreduce(flags, flags, n, dtype::u8, reduce_op::max);
                b.copy_to_host(mask.data(), flags, n);
                b.release(flags);
            }
            if (!device) {
                b.copy_to_host(data.data(), buffer, bytes);
                b.release(buffer);
            }
        });
        if (!minmax) return;
        bool any = false;
        for (std::uint8_t m : mask) any = any || m != 0;
        if (!any) return;
        const T nan = quiet_nan<T>();
        if (!device) {
            for (std::size_t i = 0; i < n; ++i)
                if (mask[i] != 0) data[i] = nan;
            return;
        }
        std::vector<T> values(n);
        context_->local_work(limit, "native all-reduce (keeping NaNs)",
                             [&](nccl_backend& b) { b.copy_to_host(values.data(), data.data(), bytes); });
        for (std::size_t i = 0; i < n; ++i)
            if (mask[i] != 0) values[i] = nan;
        context_->local_work(limit, "native all-reduce (keeping NaNs)",
                             [&](nccl_backend& b) { b.copy_from_host(data.data(), values.data(), bytes); });
    }

private:
    nccl() = default;

    template <class T>
    [[nodiscard]] static bool is_nan(T v) noexcept {
        return std::isnan(static_cast<double>(static_cast<float>(v)));
    }
    template <class T>
    [[nodiscard]] static T quiet_nan() noexcept {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
            return std::numeric_limits<T>::quiet_NaN();
        else
            return T(std::numeric_limits<float>::quiet_NaN());
    }

    void barrier_until(const deadline& limit) {
        const std::uint64_t number = context_->next_barrier();
        comm::detail::dissemination_barrier(
            rank_, size_, number, limit, name,
            [&](int to, int tag) {
                return request(context_->post_send({}, dtype::u8, to, tag, true), context_, timeout_);
            },
            [&](int from, int tag) {
                return request(context_->post_recv({}, dtype::u8, from, tag, true), context_, timeout_);
            });
    }

    void check_peer(int peer, bool any_ok, const char* op) const {
        if (any_ok && peer == any_source) return;
        if (peer < 0 || peer >= size_)
            throw config_error(hitch::detail::concat("hitch::cuda::nccl::", op, ": peer ", peer,
                                                     " is outside the allowed range [0, ", size_, ")",
                                                     any_ok ? " (or hitch::any_source)" : ""));
    }
    void check_tag(int tag, const char* op) const {
        if (tag < 0)
            throw config_error(hitch::detail::concat("hitch::cuda::nccl::", op, ": tag ", tag,
                                                     " is outside the allowed range [0, ", max_tag(), "]"));
    }

    std::shared_ptr<detail::nccl_context> context_;
    int rank_ = 0;
    int size_ = 1;
    seconds_f timeout_{};
};

static_assert(communicator<nccl>, "hitch::cuda::nccl must model hitch::communicator");
static_assert(carries_device_memory<nccl> && has_node_layout<nccl> && !shares_address_space<nccl>,
              "hitch::cuda::nccl carries device memory and knows its node layout; its ranks do not share memory");

}  // namespace hitch::cuda
