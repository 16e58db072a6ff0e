#pragma once
// One server's shard: its parameters, the optimizer's state for them, the version counter and what the server
// knows of each worker (clock, the version its last gradient was computed on, whether it still trains). It applies
// the policy's server_rule to the requests the server loop (sync/server/runtime.hpp) hands it and says when a
// worker's pull may be answered. It sends nothing itself, so the rules are tested without a network.
//
// Every request is checked completely (shard, element count, version, the codec message) before anything
// changes: a bad push is an error for its worker and leaves the shard as it was.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/sync/server/options.hpp"
#include "hitch/sync/server/shard_plan.hpp"
#include "hitch/sync/server/wire.hpp"

namespace hitch::sync::detail {

using hitch::detail::concat;

/// Staleness values kept apart in the histogram; larger ones share the last bucket.
inline constexpr std::size_t histogram_buckets = 256;

template <optimizer O, compressor X, device D>
class server_shard {
public:
    server_shard(const typename O::options_type& optimizer, const X& codec, D& dev, std::span<const hitch::layer> model,
                 const shard_plan& plan, std::size_t shard, int workers, const server_rule& rule,
                 const parallel_options& exec)
        : codec_(codec),
          rule_(rule),
          shard_(shard),
          pieces_(plan.pieces(shard).begin(), plan.pieces(shard).end()),
          params_(plan.elements(shard)),
          grads_(plan.elements(shard)),
          scratch_(plan.elements(shard)),
          workers_(static_cast<std::size_t>(workers)) {
        std::vector<hitch::layer> layers;
        std::size_t at = 0;
        for (const shard_piece& p : pieces_) {
            const hitch::layer& l = model[p.layer];
            if (p.count != 0) std::memcpy(params_.data() + at, l.params.data() + p.offset, p.count * sizeof(float));
            const bool whole = p.offset == 0 && p.count == l.size();
            layers.push_back({whole ? l.name : concat(l.name, "[", p.offset, ":", p.offset + p.count, "]"),
                              tensor_view<float>(params_.data() + at, p.count),
                              tensor_view<float>(grads_.data() + at, p.count), l.flags, whole ? l.rows : 0});
            at += p.count;
        }
        optimizer_.emplace(optimizer, std::move(layers), dev, exec);
        histogram_.assign(histogram_buckets, 0);
    }

    [[nodiscard]] std::size_t shard() const noexcept { return shard_; }
    [[nodiscard]] std::size_t elements() const noexcept { return params_.size(); }
    [[nodiscard]] std::span<const shard_piece> pieces() const noexcept { return pieces_; }
    [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
    [[nodiscard]] std::span<const float> parameters() const noexcept { return params_; }
    [[nodiscard]] std::span<const std::uint64_t> staleness_histogram() const noexcept { return histogram_; }
    [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_total_; }
    [[nodiscard]] bool live(std::size_t w) const { return workers_.at(w).live; }
    [[nodiscard]] std::size_t live_workers() const {
        return static_cast<std::size_t>(
            std::count_if(workers_.begin(), workers_.end(), [](const worker& w) { return w.live; }));
    }
    [[nodiscard]] std::uint64_t clock(std::size_t w) const { return workers_.at(w).clock; }

    /// Checks a request of worker w against this shard; throws config_error / mismatch_error /
    /// corrupt_message_error and changes nothing. A gradient push is decoded into the scratch buffer.
    void check(std::size_t w, const request& q) {
        const std::string who = concat("hitch::sync parameter server, shard ", shard_, ": worker ", w);
        if (w >= workers_.size())
            throw config_error(concat("hitch::sync parameter server, shard ", shard_, ": worker ", w,
                                      " is not one of the ", workers_.size(), " workers"));
        if (q.header.shard != shard_)
            throw config_error(concat(who, " sent a request for shard ", q.header.shard,
                                      ", which this server does not hold (it holds shard ", shard_, ")"));
        if (!workers_[w].live) throw config_error(concat(who, " sent a request after it finished"));
        const bool gradient = (q.header.kinds & push_gradient) != 0;
        const bool parameters = (q.header.kinds & push_parameters) != 0;
        if (gradient && rule_.elastic)
            throw config_error(concat(who, " pushed a gradient to an elastic-averaging server (it takes parameters)"));
        if (parameters && !rule_.elastic)
            throw config_error(concat(who, " pushed parameters to a server that takes gradients"));
        if ((gradient || parameters) && q.header.elements != params_.size())
            throw mismatch_error(concat(who, " pushed ", q.header.elements, " elements; the shard holds ",
                                        params_.size(), describe_pieces()));
        if (gradient && q.header.version > version_)
            throw config_error(concat(who, " pushed a gradient computed on version ", q.header.version,
                                      ", newer than the server's ", version_));
        if (gradient) codec_.decode(q.payload, tensor_view<float>(scratch_.data(), scratch_.size()));
        if (parameters && q.payload.size() != params_.size() * sizeof(float))
            throw corrupt_message_error(
                concat(who, " sent ", q.payload.size(), " bytes of parameters for ", params_.size(), " elements"));
    }

    /// Applies a gradient push that check() accepted (its gradient is in the scratch buffer).
    void push(std::size_t w, const request_header& h) {
        worker& k = workers_[w];
        const std::uint64_t tau = version_ - h.version;
        ++histogram_[std::min<std::size_t>(static_cast<std::size_t>(std::min<std::uint64_t>(tau, histogram_buckets)),
                                           histogram_buckets - 1)];
        k.clock = h.clock;
        k.base = h.version;
        k.pushed = true;
        lr_ = h.learning_rate;
        if (rule_.drop_stale && h.version < version_) {
            ++k.dropped;
            ++dropped_total_;
            return;
        }
        k.staleness = std::max(k.staleness, tau);
        const float scale =
            rule_.scale_by_staleness ? 1.0f / static_cast<float>(std::max<std::uint64_t>(tau, 1)) : 1.0f;
        for (std::size_t i = 0; i < grads_.size(); ++i) grads_[i] += scale * scratch_[i];
        ++accumulated_;
        if (accumulated_ >= quorum()) update();
    }

    /// Elastic averaging: the centre moves towards the worker's parameters; `centre_before` gets the centre as
    /// it was, which the worker moves towards.
    void elastic_push(std::size_t w, std::span<const std::byte> payload, std::vector<float>& centre_before) {
        centre_before = params_;
        const auto a = static_cast<float>(rule_.alpha);
        for (std::size_t i = 0; i < params_.size(); ++i) {
            const float x = load_le<float>(payload.data() + i * sizeof(float));
            params_[i] += a * (x - centre_before[i]);
        }
        ++workers_[w].clock;
        ++version_;
    }

    /// Whether worker w's pull may be answered now: its last gradient no longer waits for an update, and it is
    /// within the staleness bound of the slowest worker still training.
    [[nodiscard]] bool can_answer(std::size_t w) const {
        const worker& k = workers_[w];
        if (k.pushed && !(version_ > k.base)) return false;
        if (rule_.staleness_bound < 0) return true;
        std::uint64_t slowest = k.clock;
        for (const worker& o : workers_)
            if (o.live) slowest = std::min(slowest, o.clock);
        return k.clock <= slowest + static_cast<std::uint64_t>(rule_.staleness_bound);
    }

    /// What worker w's reply carries besides the parameters; resets the per-reply counters.
    [[nodiscard]] reply_header answered(std::size_t w) {
        worker& k = workers_[w];
        reply_header h;
        h.version = version_;
        h.staleness = k.staleness;
        h.dropped = k.dropped;
        h.elements = params_.size();
        k.staleness = 0;
        k.dropped = 0;
        k.pushed = false;
        return h;
    }

    /// Worker w stops training: the quorum and the slowest clock no longer count it.
    void finish(std::size_t w) {
        workers_[w].live = false;
        workers_[w].pushed = false;
        if (accumulated_ > 0 && accumulated_ >= quorum()) update();
    }

    /// No live worker can send another gradient (each waits for a reply): apply what has accumulated, so nobody
    /// waits for a gradient that cannot come.
    void flush() {
        if (accumulated_ > 0) update();
    }

    /// The shard's whole state (parameters, optimizer state, version, workers, accumulator, histogram), framed.
    void save(std::vector<std::byte>& blob) const {
        std::ostringstream os(std::ios::binary);
        optimizer_->save(os);
        const std::string opt = os.str();
        frame_writer f(blob, "HPSSHRD", 1);
        auto& p = f.payload();
        p.text(optimizer_name(optimizer_->optimizer()))
            .text(X::name)
            .put(static_cast<std::uint64_t>(shard_))
            .put(static_cast<std::uint64_t>(params_.size()));
        p.put(static_cast<std::uint64_t>(workers_.size())).put(version_).put(accumulated_).put(dropped_total_).put(lr_);
        for (const worker& k : workers_)
            p.put(k.clock)
                .put(k.base)
                .put(k.staleness)
                .put(k.dropped)
                .put(static_cast<std::uint8_t>(k.pushed))
                .put(static_cast<std::uint8_t>(k.live));
        p.values(std::span<const std::uint64_t>(histogram_));
        p.values(std::span<const float>(params_)).values(std::span<const float>(grads_));
        p.text(opt);
        f.finish();
    }

    /// Checks that `blob` is a state save() wrote for this shard, and changes nothing.
    void check_saved(std::span<const std::byte> blob, const std::string& who) const { (void)parse(blob, who); }

    /// Restores the state save() wrote; throws, and the shard is untouched, when the blob is damaged or of another
    /// configuration.
    void load(std::span<const std::byte> blob, const std::string& who) {
        saved_state next = parse(blob, who);
        std::istringstream is(next.optimizer, std::ios::binary);
        optimizer_->load(is);  // validates before it commits; the last step that can fail
        std::copy(next.params.begin(), next.params.end(), params_.begin());
        std::copy(next.grads.begin(), next.grads.end(), grads_.begin());
        histogram_ = std::move(next.histogram);
        workers_ = std::move(next.workers);
        version_ = next.version;
        accumulated_ = next.accumulated;
        dropped_total_ = next.dropped_total;
        lr_ = next.lr;
    }

    server_shard(const server_shard&) = delete;
    server_shard& operator=(const server_shard&) = delete;
    server_shard(server_shard&&) noexcept = default;

private:
    struct worker {
        std::uint64_t clock = 0;      // gradient (or parameter) pushes so far
        std::uint64_t base = 0;       // version its last pushed gradient was computed on
        std::uint64_t staleness = 0;  // largest staleness applied since its last reply
        std::uint64_t dropped = 0;    // gradients dropped since its last reply
        bool pushed = false;          // pushed a gradient since its last reply
        bool live = true;
    };

    struct saved_state {
        std::uint64_t version = 0, accumulated = 0, dropped_total = 0;
        double lr = 0.0;
        std::vector<worker> workers;
        std::vector<std::uint64_t> histogram;
        std::vector<float> params, grads;
        std::string optimizer;
    };

    [[nodiscard]] saved_state parse(std::span<const std::byte> blob, const std::string& who) const {
        const auto frame = open_frame(blob, {"HPSSHRD", 1, 1, who, "parameter-server shard state"});
        byte_reader r(frame.payload, who, "shard state");
        const std::string opt_name = r.text(256, "the optimizer name");
        const std::string codec_name = r.text(256, "the codec name");
        const auto shard = r.get<std::uint64_t>("the shard");
        const auto n = r.get<std::uint64_t>("the element count");
        const auto workers = r.get<std::uint64_t>("the worker count");
        const std::string_view own_name = optimizer_name(optimizer_->optimizer());
        if (opt_name != own_name || codec_name != X::name || shard != shard_ || n != params_.size() ||
            workers != workers_.size())
            throw mismatch_error(concat(who, ": the saved shard is shard ", shard, " of ", n, " elements with ",
                                        workers, " workers, optimizer '", opt_name, "', codec '", codec_name,
                                        "'; this server holds shard ", shard_, " of ", params_.size(), " with ",
                                        workers_.size(), " workers, optimizer '", own_name, "', codec '", X::name,
                                        "'"));
        saved_state st;
        st.version = r.get<std::uint64_t>("the version");
        st.accumulated = r.get<std::uint64_t>("the accumulated count");
        st.dropped_total = r.get<std::uint64_t>("the dropped count");
        st.lr = r.get<double>("the learning rate");
        st.workers.resize(workers_.size());
        for (worker& k : st.workers) {
            k.clock = r.get<std::uint64_t>("a clock");
            k.base = r.get<std::uint64_t>("a base version");
            k.staleness = r.get<std::uint64_t>("a staleness");
            k.dropped = r.get<std::uint64_t>("a dropped count");
            k.pushed = r.get<std::uint8_t>("a pushed flag") != 0;
            k.live = r.get<std::uint8_t>("a live flag") != 0;
        }
        r.values(st.histogram, histogram_buckets, "the histogram");
        r.values(st.params, n, "the parameters");
        r.values(st.grads, n, "the accumulator");
        st.optimizer = r.text(1u << 31, "the optimizer state");
        r.expect_end();
        return st;
    }

    [[nodiscard]] std::uint64_t quorum() const {
        const std::uint64_t live = live_workers();
        const std::uint64_t c = rule_.gradients_per_update == 0 ? live : rule_.gradients_per_update;
        return std::max<std::uint64_t>(1, std::min(c, live));
    }

    void update() {
        if (accumulated_ > 1) {
            const float inv = 1.0f / static_cast<float>(accumulated_);
            for (float& g : grads_) g *= inv;
        }
        optimizer_->step(static_cast<float>(lr_));
        std::fill(grads_.begin(), grads_.end(), 0.0f);
        accumulated_ = 0;
        ++version_;
    }

    [[nodiscard]] std::string describe_pieces() const {
        std::string s = " (";
        for (std::size_t i = 0; i < pieces_.size() && i < 8; ++i)
            s += concat(i == 0 ? "" : ", ", "layer ", pieces_[i].layer, " [", pieces_[i].offset, ", ",
                        pieces_[i].offset + pieces_[i].count, ")");
        if (pieces_.size() > 8) s += ", ...";
        return s + ")";
    }

    X codec_;
    server_rule rule_;
    std::size_t shard_;
    std::vector<shard_piece> pieces_;
    std::vector<float> params_, grads_, scratch_;
    std::vector<worker> workers_;
    std::vector<std::uint64_t> histogram_;
    std::uint64_t version_ = 0;
    std::uint64_t accumulated_ = 0;
    std::uint64_t dropped_total_ = 0;
    double lr_ = 0.0;
    std::optional<optim::model_optimizer<O, D>> optimizer_;
};

}  // namespace hitch::sync::detail
