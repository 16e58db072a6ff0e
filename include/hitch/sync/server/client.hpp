#pragma once
// A worker's side of the parameter server: it gathers this rank's gradients for each shard (adding up those of
// steps that do not push), encodes them with the codec (per-shard codec state on the worker, so error feedback
// is this worker's own), sends one request to every shard's server and waits for every reply, which it scatters
// back into the parameters when it pulled. Every request gets exactly one reply, so a bad request is an error
// here, on the worker that sent it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/step_context.hpp"
#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/sync/server/options.hpp"
#include "hitch/sync/server/shard_plan.hpp"
#include "hitch/sync/server/wire.hpp"

namespace hitch::sync::detail {

template <compressor X, communicator C>
class server_client {
public:
    server_client(C& comm, const X& codec, const shard_plan& plan, std::vector<int> server_ranks, std::size_t worker,
                  std::span<const hitch::layer> masters, const server_rule& rule)
        : comm_(&comm),
          codec_(codec),
          plan_(&plan),
          ranks_(std::move(server_ranks)),
          worker_(worker),
          masters_(masters),
          rule_(rule) {
        shards_.resize(plan.size());
        for (std::size_t s = 0; s < plan.size(); ++s) {
            shards_[s].gathered.assign(plan.elements(s), 0.0f);
            shards_[s].codec_state.emplace_back(codec_.make_state(plan.elements(s)));
        }
    }

    [[nodiscard]] std::size_t worker() const noexcept { return worker_; }
    [[nodiscard]] std::uint64_t pushes() const noexcept { return pushes_; }
    [[nodiscard]] std::uint64_t version(std::size_t s) const { return shards_.at(s).base; }

    /// Adds this step's gradients to what is waiting to be pushed, then exchanges with every server as `q` says.
    server_reply exchange(const server_request& q, double learning_rate) {
        if (!q.push_parameters) accumulate();
        if (!q.push_gradients && !q.pull_parameters && !q.push_parameters) return {};
        std::uint32_t kinds = 0;
        if (q.push_gradients) kinds |= push_gradient;
        if (q.pull_parameters) kinds |= pull;
        if (q.push_parameters) kinds |= push_parameters;
        if (q.push_gradients || q.push_parameters) ++pushes_;
        for (std::size_t s = 0; s < shards_.size(); ++s) {
            shard& sh = shards_[s];
            request_header h{kinds,
                             static_cast<std::uint32_t>(worker_),
                             static_cast<std::uint32_t>(s),
                             q.push_gradients ? sh.first_base : sh.base,
                             pushes_,
                             learning_rate,
                             0};
            std::span<const std::byte> payload;
            if (q.push_gradients) {
                h.elements = sh.gathered.size();
                codec_.encode(tensor_view<const float>(sh.gathered.data(), sh.gathered.size()), sh.codec_state[0],
                              sh.message);
                payload = sh.message;
            } else if (q.push_parameters) {
                gather_parameters(s, sh.incoming);
                h.elements = sh.incoming.size();
                payload = std::as_bytes(std::span<const float>(sh.incoming));
            }
            encode_request(sh.out, h, payload);
        }
        if (q.push_gradients) {
            accumulated_ = 0;
            for (shard& sh : shards_) std::fill(sh.gathered.begin(), sh.gathered.end(), 0.0f);
        }
        server_reply result;
        round_trip([&](std::size_t s, const reply& a) {
            result.staleness = std::max(result.staleness, a.header.staleness);
            result.dropped += a.header.dropped;
            if ((kinds & (pull | push_parameters)) == 0) return;
            const auto n = plan_->elements(s);
            if (a.header.elements != n || a.payload.size() != n * sizeof(float))
                throw corrupt_message_error(
                    concat_who(s, " replied with ", a.payload.size(), " bytes for ", n, " parameters"));
            shards_[s].base = a.header.version;
            std::vector<float>& centre = shards_[s].incoming;
            centre.resize(n);
            for (std::size_t i = 0; i < n; ++i) centre[i] = load_le<float>(a.payload.data() + i * sizeof(float));
            if (q.push_parameters)
                move_towards(s, centre);
            else
                scatter_parameters(s, centre);
        });
        result.pulled = q.pull_parameters || q.push_parameters;
        return result;
    }

    /// A marker every server acts on once every worker still training sent it (done, save, load); the reply's
    /// errors are rethrown here. `path` is the checkpoint prefix (save, load).
    void marker(std::uint32_t kind, std::string_view path = {}) {
        for (std::size_t s = 0; s < shards_.size(); ++s) {
            request_header h{
                kind, static_cast<std::uint32_t>(worker_), static_cast<std::uint32_t>(s), shards_[s].base, pushes_, 0.0,
                0};
            encode_request(shards_[s].out, h, std::as_bytes(std::span<const char>(path.data(), path.size())));
        }
        round_trip([](std::size_t, const reply&) {});
    }

    /// This worker's own state: versions, pushes, accumulated gradients and codec states.
    void save(std::vector<std::byte>& blob) const {
        frame_writer f(blob, "HPSCLNT", 1);
        auto& p = f.payload();
        p.put(static_cast<std::uint64_t>(worker_)).put(static_cast<std::uint64_t>(shards_.size())).put(pushes_);
        p.put(accumulated_);
        for (const shard& sh : shards_) {
            std::vector<std::byte> codec;
            codec_.save_state(sh.codec_state[0], codec);
            p.put(sh.base).put(sh.first_base).put(static_cast<std::uint64_t>(sh.gathered.size()));
            p.values(std::span<const float>(sh.gathered));
            p.put(static_cast<std::uint64_t>(codec.size())).bytes(codec);
        }
        f.finish();
    }

    /// Restores what save() wrote (with commit false: only checks it); throws, and nothing changes, when it is
    /// damaged or of another layout.
    void load(std::span<const std::byte> blob, const std::string& who, bool commit = true) {
        const auto frame = open_frame(blob, {"HPSCLNT", 1, 1, who, "parameter-server client state"});
        byte_reader r(frame.payload, who, "client state");
        const auto worker = r.get<std::uint64_t>("the worker");
        const auto shards = r.get<std::uint64_t>("the shard count");
        if (worker != worker_ || shards != shards_.size())
            throw mismatch_error(hitch::detail::concat(who, ": the saved client state is worker ", worker, " of ",
                                                       shards, " shards; this is worker ", worker_, " of ",
                                                       shards_.size()));
        const auto pushes = r.get<std::uint64_t>("the push count");
        const auto accumulated = r.get<std::uint64_t>("the accumulated count");
        std::vector<shard> next(shards_.size());
        for (std::size_t s = 0; s < shards_.size(); ++s) {
            next[s].base = r.get<std::uint64_t>("a version");
            next[s].first_base = r.get<std::uint64_t>("a version");
            const auto n = r.get<std::uint64_t>("an element count");
            if (n != plan_->elements(s)) r.fail(hitch::detail::concat("shard ", s, " has ", n, " elements"));
            r.values(next[s].gathered, n, "the accumulated gradients");
            const auto codec = r.take(r.get<std::uint64_t>("the codec state size"), "the codec state");
            next[s].codec_state.emplace_back(codec_.make_state(n));
            codec_.load_state(codec, next[s].codec_state[0]);
        }
        r.expect_end();
        if (!commit) return;
        shards_ = std::move(next);
        pushes_ = pushes;
        accumulated_ = accumulated;
    }

private:
    struct shard {
        std::vector<float> gathered;                 // gradients waiting to be pushed
        std::vector<float> incoming;                 // parameters going out (elastic) or coming back
        std::vector<typename X::state> codec_state;  // one element (X::state need not be default-constructible)
        std::uint64_t base = 0;                      // version of the parameters last pulled
        std::uint64_t first_base = 0;                // version the oldest accumulated gradient was computed on
        std::vector<std::byte> message, out, in;
    };

    template <class... A>
    [[nodiscard]] std::string concat_who(std::size_t s, const A&... a) const {
        return hitch::detail::concat("hitch::sync worker ", worker_, ": the server of shard ", s, " (rank ", ranks_[s],
                                     ")", a...);
    }

    void accumulate() {
        for (std::size_t s = 0; s < shards_.size(); ++s) {
            shard& sh = shards_[s];
            if (accumulated_ == 0) sh.first_base = sh.base;
            std::size_t at = 0;
            for (const shard_piece& p : plan_->pieces(s)) {
                const float* g = masters_[p.layer].grads.data() + p.offset;
                float* out = sh.gathered.data() + at;
                if (accumulated_ == 0)
                    std::memcpy(out, g, p.count * sizeof(float));
                else
                    for (std::size_t i = 0; i < p.count; ++i) out[i] += g[i];
                at += p.count;
            }
        }
        ++accumulated_;
    }

    void gather_parameters(std::size_t s, std::vector<float>& out) const {
        out.resize(plan_->elements(s));
        std::size_t at = 0;
        for (const shard_piece& p : plan_->pieces(s)) {
            std::memcpy(out.data() + at, masters_[p.layer].params.data() + p.offset, p.count * sizeof(float));
            at += p.count;
        }
    }
    void scatter_parameters(std::size_t s, std::span<const float> in) const {
        std::size_t at = 0;
        for (const shard_piece& p : plan_->pieces(s)) {
            std::memcpy(masters_[p.layer].params.data() + p.offset, in.data() + at, p.count * sizeof(float));
            at += p.count;
        }
    }
    /// Elastic averaging's worker half: x -= alpha * (x - centre as it was).
    void move_towards(std::size_t s, std::span<const float> centre) const {
        const auto a = static_cast<float>(rule_.alpha);
        std::size_t at = 0;
        for (const shard_piece& p : plan_->pieces(s)) {
            float* x = masters_[p.layer].params.data() + p.offset;
            for (std::size_t i = 0; i < p.count; ++i) x[i] -= a * (x[i] - centre[at + i]);
            at += p.count;
        }
    }

    /// Sends every shard's prepared request, then takes every reply (in shard order), rethrowing the first error
    /// after all replies are in, so no reply is left behind for the next exchange.
    template <class F>
    void round_trip(F&& on_reply) {
        std::vector<typename C::request> sends;
        sends.reserve(shards_.size());
        for (std::size_t s = 0; s < shards_.size(); ++s)
            sends.push_back(comm_->isend(std::span<const std::byte>(shards_[s].out), ranks_[s], request_tag));
        std::exception_ptr first;
        for (std::size_t s = 0; s < shards_.size(); ++s) {
            shard& sh = shards_[s];
            message_info info;
            try {
                info = comm_->probe(ranks_[s], reply_tag);
            } catch (const timeout_error& e) {
                throw timeout_error(concat_who(s, ""), "its reply to worker " + std::to_string(worker_), e.waited());
            }
            sh.in.resize(info.bytes);
            auto r = comm_->irecv(std::span<std::byte>(sh.in), ranks_[s], reply_tag);
            r.wait();
            try {
                const reply a = decode_reply(sh.in, concat_who(s, ""));
                if (a.header.status != reply_status::ok)
                    throw_reply_error(a.header.status,
                                      std::string(reinterpret_cast<const char*>(a.payload.data()), a.payload.size()));
                on_reply(s, a);
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        wait_all(sends, comm_->timeout());
        if (first) std::rethrow_exception(first);
    }

    C* comm_;
    X codec_;
    const shard_plan* plan_;
    std::vector<int> ranks_;
    std::size_t worker_;
    std::span<const hitch::layer> masters_;
    server_rule rule_;
    std::vector<shard> shards_;
    std::uint64_t pushes_ = 0;
    std::uint64_t accumulated_ = 0;
};

}  // namespace hitch::sync::detail
