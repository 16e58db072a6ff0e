#pragma once
// The parameter-server runtime data_parallel builds for a server_policy: the roles of the ranks (workers and the
// servers of the shards, co-located or dedicated), the server loop, and the worker's client.
//
// The server loop takes one request at a time: from whichever worker sent first, or, in deterministic mode, from
// the next worker in a fixed round-robin (skipping those that wait for a reply, which cannot send). A pull is
// answered when the shard's rule allows (server_shard::can_answer); when every worker still training waits, the
// shard applies what it has accumulated, so nobody waits for a gradient that cannot come. Markers (done, save,
// load) are acted on once every worker still training has sent the same one. Every wait has the communicator's
// deadline, and its timeout_error names the shard and the workers it waited for.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/sync/server/client.hpp"
#include "hitch/sync/server/files.hpp"
#include "hitch/sync/server/options.hpp"
#include "hitch/sync/server/shard.hpp"
#include "hitch/sync/server/shard_plan.hpp"
#include "hitch/sync/server/wire.hpp"

namespace hitch::sync::detail {

/// Which rank does what.
struct server_roles {
    int workers = 0;
    std::vector<int> server_ranks;  // per shard
    int my_shard = -1;              // the shard this rank serves, or -1
    bool worker = false;

    server_roles(int rank, int size, const server_options& o) {
        if (o.placement == server_placement::colocated) {
            workers = size;
            for (int r = 0; r < size; ++r) server_ranks.push_back(r);
            my_shard = rank;
            worker = true;
            return;
        }
        if (o.dedicated_servers >= size)
            throw config_error(
                hitch::detail::concat("hitch::sync::server_options: dedicated_servers = ", o.dedicated_servers,
                                      " leaves no worker among ", size, " ranks (at most ", size - 1, ")"));
        workers = size - o.dedicated_servers;
        for (int s = 0; s < o.dedicated_servers; ++s) server_ranks.push_back(workers + s);
        worker = rank < workers;
        my_shard = worker ? -1 : rank - workers;
    }
};

/// One server role's loop over its shard.
template <optimizer O, compressor X, communicator C, device D>
class server_loop {
public:
    server_loop(C& comm, server_shard<O, X, D> shard, int workers, bool deterministic)
        : comm_(&comm),
          shard_(std::move(shard)),
          waiting_(static_cast<std::size_t>(workers), wait_none),
          deterministic_(deterministic) {}

    /// Serves until every worker has finished.
    void run() {
        while (shard_.live_workers() > 0 || any_waiting()) {
            int source = -1;
            const std::vector<std::byte> bytes = receive(source);
            handle(source, bytes);
            settle();
        }
        for (outgoing& o : outgoing_) o.request.wait();
        outgoing_.clear();
    }

    [[nodiscard]] const server_shard<O, X, D>& shard() const noexcept { return shard_; }

private:
    enum wait_kind : std::uint32_t { wait_none = 0 };

    [[nodiscard]] std::string who() const {
        return hitch::detail::concat("hitch::sync parameter server of shard ", shard_.shard(), " (rank ", comm_->rank(),
                                     ")");
    }
    [[nodiscard]] bool any_waiting() const {
        for (std::uint32_t w : waiting_)
            if (w != wait_none) return true;
        return false;
    }
    [[nodiscard]] std::string expected_workers() const {
        std::string s;
        for (std::size_t w = 0; w < waiting_.size(); ++w)
            if (shard_.live(w) && waiting_[w] == wait_none) s += hitch::detail::concat(s.empty() ? "" : ", ", w);
        return s.empty() ? std::string("none") : s;
    }

    /// The next request: the first to arrive, or (deterministic) the next worker's in round-robin order.
    std::vector<std::byte> receive(int& source) {
        int from = any_source;
        if (deterministic_) {
            const std::size_t n = waiting_.size();
            for (std::size_t i = 0; i < n; ++i) {
                const std::size_t w = (turn_ + i) % n;
                if (shard_.live(w) && waiting_[w] == wait_none) {
                    from = static_cast<int>(w);
                    turn_ = w + 1;
                    break;
                }
            }
            if (from == any_source)
                throw error(who() +
                            ": every worker waits for a reply and none can be given (a rule that cannot "
                            "make progress)");
        }
        message_info info;
        try {
            info = comm_->probe(from, request_tag);
        } catch (const timeout_error& e) {
            throw timeout_error(
                who(), "a request from worker(s) " + (from == any_source ? expected_workers() : std::to_string(from)),
                e.waited());
        }
        std::vector<std::byte> bytes(info.bytes);
        auto r = comm_->irecv(std::span<std::byte>(bytes), info.source, request_tag);
        r.wait();
        source = info.source;
        return bytes;
    }

    /// Replies go out without waiting for the worker to take them: a worker takes its replies one server after
    /// another, and a server blocked on a large reply to a worker that waits for another server would stall
    /// every worker whose update needs this one. Finished sends are reaped as the loop goes.
    void send_reply(int to, const reply_header& h, std::span<const std::byte> payload) {
        std::erase_if(outgoing_, [](outgoing& o) { return o.request.test(); });
        auto& o = outgoing_.emplace_back();
        encode_reply(o.bytes, h, payload);
        o.request = comm_->isend(std::span<const std::byte>(o.bytes), to, reply_tag);
    }
    void send_error(int to, reply_status status, std::string_view text) {
        reply_header h;
        h.status = status;
        send_reply(to, h, std::as_bytes(std::span<const char>(text.data(), text.size())));
    }
    void answer(std::size_t w) {
        const reply_header h = shard_.answered(w);
        waiting_[w] = wait_none;
        send_reply(static_cast<int>(w), h, std::as_bytes(shard_.parameters()));
    }

    void handle(int source, std::span<const std::byte> bytes) {
        const auto w = static_cast<std::size_t>(source);
        request q;
        try {
            if (w >= waiting_.size())
                throw config_error(hitch::detail::concat(who(), ": rank ", source, " is not a worker"));
            q = decode_request(bytes, who());
            if (q.header.worker != w)
                throw config_error(
                    hitch::detail::concat(who(), ": rank ", source, " sent a request as worker ", q.header.worker));
            if ((q.header.kinds & (push_gradient | pull | push_parameters)) != 0) shard_.check(w, q);
        } catch (const config_error& e) {
            return send_error(source, reply_status::config, e.what());
        } catch (const mismatch_error& e) {
            return send_error(source, reply_status::mismatch, e.what());
        } catch (const corrupt_message_error& e) {
            return send_error(source, reply_status::corrupt, e.what());
        }
        const std::uint32_t k = q.header.kinds;
        if ((k & push_parameters) != 0) {
            shard_.elastic_push(w, q.payload, centre_);
            reply_header h = shard_.answered(w);
            return send_reply(source, h, std::as_bytes(std::span<const float>(centre_)));
        }
        if ((k & push_gradient) != 0) shard_.push(w, q.header);
        if ((k & pull) != 0) {
            waiting_[w] = pull;
            return;
        }
        if ((k & push_gradient) != 0) {  // a push alone: acknowledged at once
            reply_header h = shard_.answered(w);
            h.elements = 0;
            return send_reply(source, h, {});
        }
        if ((k & done) != 0) {
            shard_.finish(w);
            reply_header h;
            h.version = shard_.version();
            return send_reply(source, h, {});
        }
        waiting_[w] = k;  // a marker
        markers_.resize(waiting_.size());
        markers_[w].assign(reinterpret_cast<const char*>(q.payload.data()), q.payload.size());
    }

    /// Answers every pull the rule allows; flushes when every live worker waits; acts on complete markers.
    void settle() {
        for (;;) {
            // The workers behind first (the lowest clocks, then by index): under a staleness bound every other
            // worker waits on the slowest, which answered in index order would be last in every settle, behind
            // p - 1 replies (on 256 simulated ranks with the last 2x slower, SSP stepped 1.4x slower than hard sync).
            answerable_.clear();
            for (std::size_t w = 0; w < waiting_.size(); ++w)
                if (waiting_[w] == pull && shard_.can_answer(w)) answerable_.push_back(w);
            std::stable_sort(answerable_.begin(), answerable_.end(),
                             [&](std::size_t a, std::size_t b) { return shard_.clock(a) < shard_.clock(b); });
            for (const std::size_t w : answerable_) answer(w);
            if (!answerable_.empty()) continue;
            bool all_wait = shard_.live_workers() > 0;
            bool pulls_blocked = false;
            for (std::size_t w = 0; w < waiting_.size(); ++w) {
                if (!shard_.live(w)) continue;
                if (waiting_[w] == wait_none) all_wait = false;
                if (waiting_[w] == pull) pulls_blocked = true;
            }
            if (!all_wait) return;
            if (pulls_blocked) {
                const auto before = shard_.version();
                shard_.flush();
                if (shard_.version() != before) continue;
                return;  // a staleness bound waits for a worker that is itself at a marker: that cannot be
            }
            act_on_markers();
            return;
        }
    }

    /// Every live worker sent the same marker: save, stage or commit a load.
    void act_on_markers() {
        std::uint32_t kind = 0;
        std::string path;
        for (std::size_t w = 0; w < waiting_.size(); ++w) {
            if (!shard_.live(w) || waiting_[w] == wait_none) continue;
            if (kind == 0) {
                kind = waiting_[w];
                path = markers_[w];
            } else if (waiting_[w] != kind || markers_[w] != path) {
                const bool decision = (kind | waiting_[w]) == (commit_load | abort_load);
                if (decision) {  // some worker could not read its part: nobody commits
                    staged_.clear();
                    return reply_markers(reply_status::other,
                                         who() +
                                             ": the load was abandoned: another worker could not read its part "
                                             "of the checkpoint");
                }
                return reply_markers(reply_status::config,
                                     who() +
                                         ": the workers reached different checkpoint calls (one saves or loads "
                                         "while another does something else, or with another path)");
            }
        }
        if (kind == abort_load) {
            staged_.clear();
            return reply_markers(reply_status::other, who() + ": the load was abandoned");
        }
        try {
            const std::filesystem::path file = shard_file(path, shard_.shard());
            if (kind == save) {
                std::vector<std::byte> blob;
                shard_.save(blob);
                write_file_atomically(file, blob);
            } else if (kind == stage_load) {
                staged_ = read_file(file, who());
                shard_.check_saved(staged_, hitch::detail::concat(who(), ": ", file.string()));
            } else if (kind == commit_load) {
                shard_.load(staged_, hitch::detail::concat(who(), ": ", file.string()));
                staged_.clear();
            }
        } catch (const mismatch_error& e) {
            return reply_markers(reply_status::mismatch, e.what());
        } catch (const corrupt_message_error& e) {
            return reply_markers(reply_status::corrupt, e.what());
        } catch (const error& e) {
            return reply_markers(reply_status::other, e.what());
        }
        reply_markers(reply_status::ok, {});
    }

    void reply_markers(reply_status status, std::string_view text) {
        for (std::size_t w = 0; w < waiting_.size(); ++w) {
            if (!shard_.live(w) || waiting_[w] == wait_none || waiting_[w] == pull) continue;
            waiting_[w] = wait_none;
            if (status == reply_status::ok) {
                reply_header h;
                h.version = shard_.version();
                send_reply(static_cast<int>(w), h, {});
            } else {
                send_error(static_cast<int>(w), status, text);
            }
        }
    }

    struct outgoing {
        std::vector<std::byte> bytes;
        typename C::request request;
    };

    C* comm_;
    server_shard<O, X, D> shard_;
    std::list<outgoing> outgoing_;         // a list: the bytes of a pending send never move
    std::vector<std::uint32_t> waiting_;   // per worker: wait_none, pull, or the marker it sent
    std::vector<std::size_t> answerable_;  // settle()'s pulls to answer now, in the order it answers them
    std::vector<std::string> markers_;
    std::vector<float> centre_;
    std::vector<std::byte> staged_;
    std::size_t turn_ = 0;
    bool deterministic_;
};

/// The runtime: this rank's client (a worker) and server role (a shard), the server on a thread of its own when
/// co-located.
template <optimizer O, compressor X, communicator C, device D>
class server_runtime {
public:
    server_runtime(C comm, D& dev, std::span<const hitch::layer> masters, const typename O::options_type& optimizer,
                   const X& codec, const server_options& options, const server_rule& rule, const parallel_options& exec)
        : comm_(std::make_unique<C>(std::move(comm))),
          roles_(comm_->rank(), comm_->size(), options),
          plan_(layer_sizes(masters), static_cast<int>(roles_.server_ranks.size()), options.sharding) {
        if (rule.gradients_per_update > static_cast<std::uint32_t>(roles_.workers))
            throw config_error(hitch::detail::concat("hitch::sync: gradients_per_update = ", rule.gradients_per_update,
                                                     " exceeds the ", roles_.workers,
                                                     " workers: an update would wait for gradients that never come"));
        if (roles_.my_shard >= 0)
            loop_.emplace(*comm_,
                          server_shard<O, X, D>(optimizer, codec, dev, masters, plan_,
                                                static_cast<std::size_t>(roles_.my_shard), roles_.workers, rule, exec),
                          roles_.workers, options.deterministic);
        if (roles_.worker) {
            client_.emplace(*comm_, codec, plan_, roles_.server_ranks, static_cast<std::size_t>(comm_->rank()), masters,
                            rule);
            if (loop_) server_thread_ = rank_threads<C>::start(*comm_, [this] { serve_catching(); });
        }
    }

    server_runtime(const server_runtime&) = delete;
    server_runtime& operator=(const server_runtime&) = delete;

    ~server_runtime() {
        try {
            finish();
        } catch (...) {  // a destructor does not throw; finish() is where errors are seen
        }
    }

    [[nodiscard]] bool serves_only() const noexcept { return !roles_.worker; }
    [[nodiscard]] int workers() const noexcept { return roles_.workers; }
    [[nodiscard]] const shard_plan& plan() const noexcept { return plan_; }
    [[nodiscard]] server_client<X, C>& client() { return *client_; }

    /// A dedicated server rank: serves until every worker has finished.
    void serve() {
        if (roles_.worker)
            throw config_error("hitch::sync: serve() is for dedicated server ranks; this rank is a worker");
        if (served_) return;
        served_ = true;
        loop_->run();
    }

    /// A worker leaves: every server stops counting it; a co-located server then serves the others until they
    /// leave too. A dedicated server rank that never called serve() serves now. Errors of the server surface here.
    void finish() {
        if (finished_) return;
        finished_ = true;
        if (!roles_.worker) return serve();
        std::exception_ptr first;
        try {
            client_->marker(done);
        } catch (...) {  // the servers may be gone; this rank's own still ends, by its deadline at the latest
            first = std::current_exception();
        }
        if (server_thread_.joinable()) server_thread_.join();
        if (first) std::rethrow_exception(first);
        if (server_error_) std::rethrow_exception(server_error_);
    }

    [[nodiscard]] bool finished() const noexcept { return finished_; }

private:
    static std::vector<std::size_t> layer_sizes(std::span<const hitch::layer> masters) {
        std::vector<std::size_t> sizes;
        for (const hitch::layer& l : masters) sizes.push_back(l.size());
        return sizes;
    }
    void serve_catching() {
        try {
            loop_->run();
        } catch (...) {
            server_error_ = std::current_exception();
        }
    }

    std::unique_ptr<C> comm_;  // stable address: the server thread and the client share it
    server_roles roles_;
    shard_plan plan_;
    std::optional<server_loop<O, X, C, D>> loop_;
    std::optional<server_client<X, C>> client_;
    typename rank_threads<C>::thread server_thread_;  // a co-located server: a thread of this rank
    std::exception_ptr server_error_;
    bool served_ = false;
    bool finished_ = false;
};

}  // namespace hitch::sync::detail
