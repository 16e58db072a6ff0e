#pragma once
// Buffers: model state that is not a parameter (no gradient, no optimizer) but must agree across ranks, such as
// batch normalisation's running mean and variance, which every rank updates from its own batches. As DDP's
// broadcast_buffers does, data_parallel makes them agree after every synchronised step, per buffer:
//   broadcast   every rank takes rank 0's values (DDP's default)
//   average     every rank takes the mean over ranks (the statistics of all ranks' batches, for equal batch sizes)
// All buffers of one kind travel together, in one broadcast or one all-reduce per step. On a GPU, buffers may also
// live in device memory: they are staged through host memory with the device's copies (after the model's stream
// has written them).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/train/layer_agreement.hpp"

namespace hitch::train {

/// How a buffer is made to agree across ranks.
enum class buffer_sync : unsigned char { broadcast, average };

/// A buffer of the model: a name (unique among buffers) and its values in host memory (hitch::view(vec), a span) or
/// in the memory of data_parallel's device, which must outlive data_parallel.
struct buffer {
    std::string name;
    tensor_view<float> values;
    buffer_sync sync = buffer_sync::broadcast;
};

namespace detail {

/// Copies between host memory and another space (buffer_set's staging); on the host, memcpy.
struct host_copies {
    void to_host(void* dst, const void* src, std::size_t bytes) const { std::memcpy(dst, src, bytes); }
    void from_host(void* dst, const void* src, std::size_t bytes) const { std::memcpy(dst, src, bytes); }
};

/// The registered buffers and their staging.
template <communicator C>
class buffer_set {
public:
    [[nodiscard]] bool empty() const noexcept { return buffers_.empty(); }
    [[nodiscard]] std::size_t size() const noexcept { return buffers_.size(); }

    /// Checks the buffers locally (names unique and non-empty, in host memory or in `device_space`) and across ranks
    /// (the same names, sizes and kinds, in the same order: mismatch_error naming them), then adds them. Collective
    /// over `control`.
    void add(C& control, std::vector<buffer> more, memory_space device_space = memory_space::host) {
        for (std::size_t i = 0; i < more.size(); ++i) {
            const std::string& name = more[i].name;
            if (name.empty())
                throw config_error(
                    hitch::detail::concat("hitch::data_parallel::register_buffers: buffer ", i, " has no name"));
            if (!more[i].values.on_host() && more[i].values.space() != device_space)
                throw config_error(hitch::detail::concat(
                    "hitch::data_parallel::register_buffers: buffer '", name, "' is in ",
                    hitch::name(more[i].values.space()), " memory; buffers live in host memory",
                    device_space == memory_space::host
                        ? std::string()
                        : hitch::detail::concat(" or in ", hitch::name(device_space), " memory")));
            const auto same = [&](const buffer& b) { return b.name == name; };
            if (std::count_if(more.begin(), more.end(), same) > 1 ||
                std::any_of(buffers_.begin(), buffers_.end(), same))
                throw config_error(
                    hitch::detail::concat("hitch::data_parallel::register_buffers: two buffers are "
                                          "named '",
                                          name, "'"));
        }
        struct described {
            std::string name;
            tensor_view<float> params;
        };
        std::vector<described> d;
        for (const buffer& b : more)
            d.push_back({b.name + (b.sync == buffer_sync::broadcast ? " (broadcast)" : " (average)"), b.values});
        agree_on_layers(control, std::span<const described>(d), dtype::f32, "buffers");
        for (buffer& b : more) buffers_.push_back(std::move(b));
        // Staging: the broadcast buffers first, then the averaged ones, each kind in registration order.
        broadcast_n_ = 0;
        std::size_t average_n = 0;
        for (const buffer& b : buffers_)
            (b.sync == buffer_sync::broadcast ? broadcast_n_ : average_n) += b.values.size();
        offsets_.clear();
        std::size_t at_b = 0, at_a = broadcast_n_;
        for (const buffer& b : buffers_) {
            std::size_t& at = b.sync == buffer_sync::broadcast ? at_b : at_a;
            offsets_.push_back(at);
            at += b.values.size();
        }
        staging_.assign(broadcast_n_ + average_n, 0.0f);
    }

    /// Every rank takes rank 0's values of the broadcast buffers and the mean of the averaged ones (`average`
    /// all-reduce-averages a float view in place), or, with `all_from_root`, rank 0's values of every buffer (their
    /// starting values). Collective over `group`.
    /// Buffers outside host memory go through `copies` (to_host before, from_host after).
    template <class Average, class Copies = host_copies>
    void synchronize(allreduce::group<C>& group, const allreduce::call_options& call, Average&& average,
                     bool all_from_root = false, const Copies& copies = {}) {
        if (buffers_.empty()) return;
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            const tensor_view<float>& v = buffers_[i].values;
            if (v.on_host())
                std::memcpy(staging_.data() + offsets_[i], v.data(), v.size_bytes());
            else if (!v.empty())
                copies.to_host(staging_.data() + offsets_[i], v.data(), v.size_bytes());
        }
        const std::size_t broadcast_n = all_from_root ? staging_.size() : broadcast_n_;
        if (broadcast_n != 0)
            allreduce::broadcast(group, tensor_view<float>(staging_.data(), broadcast_n), 0, allreduce::binary_tree{},
                                 call);
        if (broadcast_n < staging_.size())
            average(tensor_view<float>(staging_.data() + broadcast_n, staging_.size() - broadcast_n));
        for (std::size_t i = 0; i < buffers_.size(); ++i) {
            const tensor_view<float>& v = buffers_[i].values;
            if (v.on_host())
                std::memcpy(v.data(), staging_.data() + offsets_[i], v.size_bytes());
            else if (!v.empty())
                copies.from_host(v.data(), staging_.data() + offsets_[i], v.size_bytes());
        }
    }

    /// Whether some buffer lives outside host memory.
    [[nodiscard]] bool any_on_device() const noexcept {
        for (const buffer& b : buffers_)
            if (!b.values.on_host()) return true;
        return false;
    }

private:
    std::vector<buffer> buffers_;
    std::vector<float> staging_;
    std::vector<std::size_t> offsets_;  // each buffer's place in the staging
    std::size_t broadcast_n_ = 0;       // the broadcast buffers' elements, at the staging's start
};

}  // namespace detail

}  // namespace hitch::train
