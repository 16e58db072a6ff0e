#pragma once
// hitch::allreduce::fusion_buffer: tensor fusion (Horovod's fusion buffer; the gradient buckets of PyTorch DDP,
// Li et al. 2020). Gradients become ready one layer at a time during backward; all-reducing each on its own pays
// the latency term once per tensor. The fusion buffer copies tensors into buckets of bucket_bytes as they are
// added and starts a non-blocking all-reduce of each bucket as soon as it is full, so communication overlaps the
// rest of backward; wait() flushes the last partial bucket, waits for every bucket and the results are back in
// the original tensors. A tensor of bucket_bytes or more skips the copy and is all-reduced alone, in place; a
// zero-size tensor is accepted and needs no traffic.
//
//   hitch::allreduce::fusion_buffer<hitch::comm::mpi> fusion(g, {.bucket_bytes = 25 << 20, .op = average});
//   for (layer in reverse) { backward(layer); fusion.add(hitch::view(layer.grad)); }
//   fusion.wait();   // every gradient is now averaged over the ranks
//
// Every rank must add the same tensors (sizes) in the same order; each bucket's all-reduce carries a fingerprint
// of its tensor sizes in its agreement check, so ranks that packed differently get mismatch_error. The scatter
// back into the tensors happens on the group's progress thread right after each bucket's all-reduce: a tensor
// must not be touched between add() and the end of wait().

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/core/hash.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::allreduce {

struct fusion_options {
    /// Bytes per bucket (Horovod's and DDP's default is 25 MiB).
    std::size_t bucket_bytes = std::size_t{25} << 20;
    /// How the buckets are combined.
    reduce_op op = reduce_op::sum;
    /// Options of each bucket's all-reduce.
    call_options call{};

    void validate() const {
        option_validator("hitch::allreduce::fusion_options")
            .closed("bucket_bytes", bucket_bytes, std::size_t{1}, std::size_t{1} << 40)
            .require(is_valid(op), "op", static_cast<int>(op), "{sum, average, min, max}");
        call.validate();
    }
};

template <communicator C, floating_element T = float, class Schedule = automatic>
class fusion_buffer {
public:
    explicit fusion_buffer(group<C>& g, const fusion_options& options = {}, const Schedule& schedule = Schedule{})
        : group_(g), options_(options), schedule_(schedule) {
        static_assert(check_schedule<Schedule, C>());
        options_.validate();
        capacity_ = std::max<std::size_t>(1, options_.bucket_bytes / sizeof(T));
    }
    fusion_buffer(const fusion_buffer&) = delete;
    fusion_buffer& operator=(const fusion_buffer&) = delete;
    /// Waits for whatever is still in flight (errors are dropped here; call wait() to see them).
    ~fusion_buffer() {
        try {
            wait();
        } catch (...) {}
    }

    /// Queues a tensor whose values are ready. Its data is copied into the current bucket now (or, for a tensor of
    /// bucket_bytes or more, all-reduced in place); the result lands in it by the end of wait().
    void add(tensor_view<T> tensor) {
        if (!tensor.on_host())
            throw config_error("hitch::allreduce::fusion_buffer::add: the tensor is not in host memory");
        ++added_;
        if (tensor.empty()) return;
        if (tensor.size() >= capacity_) {
            call_options call = options_.call;
            call.fingerprint = fingerprint_of({}, tensor.size());
            inflight_.push_back(flight{nullptr, allreduce_async(group_, tensor, options_.op, schedule_, call)});
            return;
        }
        if (current_ != nullptr && current_->used + tensor.size() > capacity_) flush();
        if (current_ == nullptr) current_ = take_bucket();
        std::memcpy(current_->data.data() + current_->used, tensor.data(), tensor.size_bytes());
        current_->entries.push_back(entry{tensor, current_->used});
        current_->used += tensor.size();
        if (current_->used == capacity_) flush();
    }

    /// Starts the all-reduce of the partly filled bucket, if any.
    void flush() {
        if (current_ == nullptr) return;
        bucket* b = current_;
        current_ = nullptr;
        std::vector<std::size_t> sizes;
        sizes.reserve(b->entries.size());
        for (const entry& e : b->entries) sizes.push_back(e.tensor.size());
        call_options call = options_.call;
        call.fingerprint = fingerprint_of(std::span<const std::size_t>(sizes), b->used);
        const Schedule schedule = schedule_;
        const reduce_op op = options_.op;
        const tensor_view<T> packed(b->data.data(), b->used);
        inflight_.push_back(flight{
            b,
            detail::issue<true>(
                group_, call,
                [=] { return detail::describe<T>(operation::allreduce, packed.size(), op, -1, Schedule::name, call); },
                [=](transport<C>& t, const call_descriptor&) {
                    schedule.run(t, std::span<T>(packed.data(), packed.size()), op);
                    for (const entry& e : b->entries)
                        std::memcpy(e.tensor.data(), packed.data() + e.offset, e.tensor.size_bytes());
                })});
    }

    /// Flushes, then waits for every bucket; afterwards each added tensor holds its all-reduced values. Rethrows
    /// the first error after every bucket has finished.
    void wait() {
        flush();
        std::exception_ptr first;
        for (flight& f : inflight_) {
            try {
                f.done.wait();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        for (flight& f : inflight_)
            if (f.b != nullptr) release(f.b);
        inflight_.clear();
        added_ = 0;
        if (first) std::rethrow_exception(first);
    }

    /// Tensors added since the last wait(), and buckets started.
    [[nodiscard]] std::size_t tensors_added() const noexcept { return added_; }
    [[nodiscard]] std::size_t calls_started() const noexcept { return inflight_.size(); }
    /// Elements per bucket.
    [[nodiscard]] std::size_t bucket_capacity() const noexcept { return capacity_; }

private:
    struct entry {
        tensor_view<T> tensor;
        std::size_t offset = 0;
    };
    struct bucket {
        std::vector<T> data;
        std::vector<entry> entries;
        std::size_t used = 0;
        bool in_use = false;
    };
    struct flight {
        bucket* b = nullptr;  // null: a large tensor all-reduced in place
        handle done;
    };

    static std::uint64_t fingerprint_of(std::span<const std::size_t> sizes, std::size_t total) noexcept {
        std::uint64_t h = fnv1a_basis;  // FNV-1a of the sizes as little-endian bytes, the same on every host
        const auto mix = [&](std::uint64_t v) {
            std::array<std::byte, 8> bytes;
            for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffu);
            h = fnv1a(bytes, h);
        };
        for (std::size_t s : sizes) mix(s);
        mix(total);
        return h;
    }

    bucket* take_bucket() {
        for (auto& b : pool_)
            if (!b->in_use) {
                b->in_use = true;
                return b.get();
            }
        pool_.push_back(std::make_unique<bucket>());
        bucket* b = pool_.back().get();
        b->data.resize(capacity_);
        b->in_use = true;
        return b;
    }
    static void release(bucket* b) {
        b->entries.clear();
        b->used = 0;
        b->in_use = false;
    }

    group<C>& group_;
    fusion_options options_;
    Schedule schedule_;
    std::size_t capacity_ = 1;
    bucket* current_ = nullptr;
    std::vector<std::unique_ptr<bucket>> pool_;
    std::vector<flight> inflight_;
    std::size_t added_ = 0;
};

}  // namespace hitch::allreduce
