#pragma once
// optim::sharded_optimizer<O, D>: the optimizer side of sharded optimizer state (ZeRO stages 1 and 2,
// Rajbhandari et al., SC'20): each rank holds the state of, and steps, only its pieces of the model's layers, so
// its state bytes are about 1/p of model_optimizer's. A piece is a range of one layer's elements; the caller
// reduce-scatters the gradients so each rank has the summed gradient of its pieces, steps, and all-gathers the
// parameters.
//
// Elementwise rules (sgd, momentum, adam, adamw) step each piece alone. Layer-wise rules (lars, lamb) need norms
// of whole layers: step() computes this rank's partial sums (hitch/optim/split_step.hpp), hands all of them to
// the caller's reduce_sums once (which replaces them by their sum over the ranks, an all-reduce), then finishes
// every piece with its layer's sums.
//
//   auto mine = hitch::optim::layer_pieces(layers, size, rank);     // or flat_range_pieces for a flat shard
//   hitch::optim::sharded_optimizer<hitch::optim::lamb> opt({}, layers, mine);
//   opt.step(lr, [&](std::span<double> sums) { allreduce_sum(sums); });

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hitch/allreduce/partition.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/split_step.hpp"
#include "hitch/optim/state_io.hpp"

namespace hitch::optim {

/// Elements [begin, end) of layer `layer` of a model.
struct piece {
    std::size_t layer = 0;
    std::size_t begin = 0;
    std::size_t end = 0;

    [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
    friend bool operator==(const piece&, const piece&) = default;
};

/// Rank `rank`'s pieces when every layer is cut into `ranks` near-equal blocks (allreduce::partition); a rank may
/// get an empty piece of a layer smaller than `ranks`.
[[nodiscard]] std::vector<piece> layer_pieces(std::span<const layer> layers, int ranks, int rank);

/// The pieces covering elements [begin, end) of the model's layers laid end to end (a rank's block of a flat
/// gradient buffer after a reduce-scatter); layers the range misses get no piece.
[[nodiscard]] std::vector<piece> flat_range_pieces(std::span<const layer> layers, std::size_t begin, std::size_t end);

template <class O, class D = cpu>
class sharded_optimizer {
    static_assert(check_shardable_rule<O, D>());

public:
    using optimizer_type = O;
    using options_type = typename O::options_type;
    using state_type = typename O::template state_type<D>;

    /// Whether step() needs the all-reduce of per-layer sums (layer-wise rules).
    static constexpr bool needs_reduction = !elementwise_rule<O>;

    /// `layers` is the whole model (full views); `pieces` this rank's, at most one per layer (kept sorted by
    /// layer). Makes zeroed state for every piece on `dev`.
    sharded_optimizer(const options_type& options, std::vector<layer> layers, std::vector<piece> pieces, D& dev,
                      const parallel_options& exec = {});
    /// On the host.
    sharded_optimizer(const options_type& options, std::vector<layer> layers, std::vector<piece> pieces,
                      const parallel_options& exec = {})
        requires std::same_as<D, cpu>
        : sharded_optimizer(options, std::move(layers), std::move(pieces), detail::default_cpu(), exec) {}

    sharded_optimizer(const sharded_optimizer&) = delete;
    sharded_optimizer& operator=(const sharded_optimizer&) = delete;
    sharded_optimizer(sharded_optimizer&&) noexcept = default;
    sharded_optimizer& operator=(sharded_optimizer&&) noexcept = default;

    /// The model's layers (full views).
    [[nodiscard]] std::span<const layer> layers() const noexcept { return layers_; }
    /// This rank's pieces, sorted by layer; piece i is stepped through piece_layers()[i] with state(i).
    [[nodiscard]] std::span<const piece> pieces() const noexcept { return pieces_; }
    /// The pieces as layers: sub-views of their layer's views, named "name[begin:end]", with the layer's flags.
    [[nodiscard]] std::span<const layer> piece_layers() const noexcept { return piece_layers_; }
    [[nodiscard]] const state_type& state(std::size_t i) const { return states_.at(i); }
    [[nodiscard]] state_type& state(std::size_t i) { return states_.at(i); }
    [[nodiscard]] const O& optimizer() const noexcept { return optimizer_; }
    [[nodiscard]] const parallel_options& execution() const noexcept { return exec_; }
    void set_execution(const parallel_options& exec) {
        exec.validate();
        exec_ = exec;
    }
    /// Bytes of optimizer state this rank holds (every buffer of every piece's state).
    [[nodiscard]] std::size_t state_bytes() const;

    /// Points model layer k at new full views of the same size; its piece follows.
    void rebind(std::size_t k, tensor_view<float> params, tensor_view<float> grads);

    /// One step of every piece. A layer-wise rule calls reduce_sums(std::span<double>) exactly once, with
    /// 2 * layers().size() values: this rank's partial sums of layer k at [2k, 2k + 2) (zeros where it owns
    /// nothing of k), which it must replace by their sum over all ranks; every rank calls it with the same
    /// length, as a collective needs. An elementwise rule never calls it.
    template <class Reduce>
        requires std::invocable<Reduce&, std::span<double>>
    void step(float lr, Reduce&& reduce_sums) {
        step(lr, reduce_sums, {});
    }
    /// The same, leaving the state and parameters of layers with skip[k] != 0 untouched (a layer no rank has a
    /// gradient for); every rank must pass the same mask. An empty mask skips nothing.
    template <class Reduce>
        requires std::invocable<Reduce&, std::span<double>>
    void step(float lr, Reduce&& reduce_sums, std::span<const unsigned char> skip);
    /// An elementwise rule's step, which needs no reduction.
    void step(float lr)
        requires(!needs_reduction)
    {
        step(lr, [](std::span<double>) {}, {});
    }

    /// One step of piece i alone, for an elementwise rule (e.g. as soon as its block of the reduce-scatter lands).
    void step_piece(std::size_t i, float lr)
        requires(!needs_reduction)
    {
        if (i >= pieces_.size())
            throw config_error(hitch::detail::concat("hitch::optim::sharded_optimizer::step_piece: piece index ", i,
                                                     " is outside [0, ", pieces_.size(), ")"));
        optimizer_.step(piece_layers_[i], states_[i], lr, exec_);
    }

    /// Writes the pieces' state (hitch/optim/state_io.hpp; the layers are the pieces, named by their range).
    void save(std::ostream& out) const {
        save_state(out, optimizer_name(optimizer_), std::span<const layer>(piece_layers_),
                   std::span<const state_type>(states_), *device_);
    }
    /// Reads a state save() wrote for the same pieces; throws mismatch_error, changing nothing, for another
    /// rank's or another partition's.
    void load(std::istream& in) {
        load_state(in, optimizer_name(optimizer_), std::span<const layer>(piece_layers_),
                   std::span<state_type>(states_), *device_, layer_names::must_match);
    }

private:
    [[nodiscard]] static layer piece_layer(const layer& l, const piece& p) {
        return {hitch::detail::concat(l.name, "[", p.begin, ":", p.end, "]"), l.params.subview(p.begin, p.size()),
                l.grads.subview(p.begin, p.size()), l.flags, 0};
    }

    O optimizer_;
    std::vector<layer> layers_;
    std::vector<piece> pieces_;
    std::vector<layer> piece_layers_;
    std::vector<state_type> states_;
    std::vector<double> sums_;
    D* device_;
    parallel_options exec_;
};

// ================================================ implementation ================================================

inline std::vector<piece> layer_pieces(std::span<const layer> layers, int ranks, int rank) {
    if (ranks < 1 || rank < 0 || rank >= ranks)
        throw config_error(hitch::detail::concat("hitch::optim::layer_pieces: rank ", rank, " is outside [0, ", ranks,
                                                 ") (ranks must be at least 1)"));
    std::vector<piece> out;
    out.reserve(layers.size());
    for (std::size_t k = 0; k < layers.size(); ++k) {
        const allreduce::block b = allreduce::partition(layers[k].size(), ranks, rank);
        out.push_back({k, b.offset, b.offset + b.count});
    }
    return out;
}

inline std::vector<piece> flat_range_pieces(std::span<const layer> layers, std::size_t begin, std::size_t end) {
    std::size_t total = 0;
    for (const layer& l : layers) total += l.size();
    if (begin > end || end > total)
        throw config_error(hitch::detail::concat("hitch::optim::flat_range_pieces: range [", begin, ", ", end,
                                                 ") is outside the model's ", total, " elements"));
    std::vector<piece> out;
    std::size_t at = 0;
    for (std::size_t k = 0; k < layers.size(); ++k) {
        const std::size_t lo = std::max(begin, at), hi = std::min(end, at + layers[k].size());
        if (lo < hi) out.push_back({k, lo - at, hi - at});
        at += layers[k].size();
    }
    return out;
}

template <class O, class D>
sharded_optimizer<O, D>::sharded_optimizer(const options_type& options, std::vector<layer> layers,
                                           std::vector<piece> pieces, D& dev, const parallel_options& exec)
    : optimizer_(options), layers_(std::move(layers)), pieces_(std::move(pieces)), device_(&dev), exec_(exec) {
    using hitch::detail::concat;
    constexpr std::string_view who = "hitch::optim::sharded_optimizer";
    exec_.validate();
    for (const layer& l : layers_) check_layer(l, D::space, who);
    for (const piece& p : pieces_)
        if (p.layer >= layers_.size())
            throw config_error(
                concat(who, ": a piece names layer ", p.layer, " but the model has ", layers_.size(), " layers"));
    std::ranges::stable_sort(pieces_, {}, &piece::layer);
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
        const piece& p = pieces_[i];
        const layer& l = layers_[p.layer];
        if (p.begin > p.end || p.end > l.size())
            throw config_error(concat(who, ": the piece [", p.begin, ", ", p.end, ") of layer ", p.layer, " ('", l.name,
                                      "') is outside its ", l.size(), " elements"));
        if (i > 0 && pieces_[i - 1].layer == p.layer)
            throw config_error(concat(who, ": layer ", p.layer, " ('", l.name,
                                      "') has two pieces; a rank holds at most one piece of a layer"));
    }
    piece_layers_.reserve(pieces_.size());
    states_.reserve(pieces_.size());
    for (const piece& p : pieces_) {
        piece_layers_.push_back(piece_layer(layers_[p.layer], p));
        states_.push_back(optimizer_.make_state(dev, p.size()));
    }
    if constexpr (needs_reduction) sums_.assign(2 * layers_.size(), 0.0);
}

template <class O, class D>
std::size_t sharded_optimizer<O, D>::state_bytes() const {
    std::size_t bytes = 0;
    for (const state_type& s : states_)
        for (const tensor_view<float> b : s.buffers()) bytes += b.size_bytes();
    return bytes;
}

template <class O, class D>
void sharded_optimizer<O, D>::rebind(std::size_t k, tensor_view<float> params, tensor_view<float> grads) {
    constexpr std::string_view who = "hitch::optim::sharded_optimizer::rebind";
    layer& l = layers_.at(k);
    layer next = l;
    next.params = params;
    next.grads = grads;
    check_layer(next, D::space, who);
    if (next.size() != l.size())
        throw config_error(hitch::detail::concat(who, ": layer '", l.name, "' has ", l.size(),
                                                 " parameters; the new view has ", next.size()));
    l = next;
    for (std::size_t i = 0; i < pieces_.size(); ++i)
        if (pieces_[i].layer == k) piece_layers_[i] = piece_layer(l, pieces_[i]);
}

template <class O, class D>
template <class Reduce>
    requires std::invocable<Reduce&, std::span<double>>
void sharded_optimizer<O, D>::step(float lr, Reduce&& reduce_sums, std::span<const unsigned char> skip) {
    using hitch::detail::concat;
    // Checked before phase 1 moves any state (LAMB's moments), so a bad call changes nothing.
    if (!(lr >= 0.0f) || !std::isfinite(lr))
        throw config_error(concat("hitch::optim::sharded_optimizer::step: learning rate ", lr,
                                  " is outside the allowed range [0, inf)"));
    if (!skip.empty() && skip.size() != layers_.size())
        throw config_error(concat("hitch::optim::sharded_optimizer::step: the skip mask has ", skip.size(),
                                  " entries but the model has ", layers_.size(), " layers"));
    const auto skipped = [&](std::size_t i) { return !skip.empty() && skip[pieces_[i].layer] != 0; };
    if constexpr (needs_reduction) {
        std::ranges::fill(sums_, 0.0);
        for (std::size_t i = 0; i < pieces_.size(); ++i) {
            if (skipped(i)) continue;
            const layer_sums s = optimizer_.norm_sums(piece_layers_[i], states_[i], exec_);
            sums_[2 * pieces_[i].layer] = s[0];
            sums_[2 * pieces_[i].layer + 1] = s[1];
        }
        reduce_sums(std::span<double>(sums_));
        for (std::size_t i = 0; i < pieces_.size(); ++i) {
            if (skipped(i)) continue;
            const std::size_t k = pieces_[i].layer;
            optimizer_.apply_with_sums(piece_layers_[i], states_[i], lr, layer_sums{sums_[2 * k], sums_[2 * k + 1]},
                                       exec_);
        }
    } else {
        for (std::size_t i = 0; i < pieces_.size(); ++i)
            if (!skipped(i)) optimizer_.step(piece_layers_[i], states_[i], lr, exec_);
    }
}

}  // namespace hitch::optim
