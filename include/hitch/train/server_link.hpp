#pragma once
// data_parallel's side of a parameter-server policy: it builds the runtime (hitch/sync/server/runtime.hpp) when the
// policy needs one, pulls the servers' parameters before the first step so every worker starts from the same
// ones, and carries the server's part of save and load. For other policies it is empty and every call is a no-op.
//
// Checkpoints: each server writes its shard to "<prefix>.shard<s>" once every worker still training has asked it
// to; a worker's own part (versions, accumulated gradients, codec states) is the section "hitch.server.client" of
// its own file. A load is staged on every server first and committed only when every worker and every server
// could read its part, so a missing or damaged file changes nothing anywhere.

#include <cstddef>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/optimizer.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/sync/server/runtime.hpp"
#include "hitch/train/checkpoint.hpp"

namespace hitch::train::detail {

template <sync_policy P, optimizer O, compressor X, communicator C, device D>
class server_link {
public:
    static constexpr bool possible = sync::server_policy<P>;

    /// Collective over `comm`: builds the runtime when the policy needs it; workers pull the initial parameters.
    void start(C& comm, D& dev, std::span<const hitch::layer> masters, const typename O::options_type& optimizer,
               const X& codec, const P& policy, const parallel_options& exec) {
        if constexpr (possible) {
            if (!policy.needs_server()) return;
            const sync::server_options& o = policy.server();
            const int workers = sync::detail::server_roles(comm.rank(), comm.size(), o).workers;
            const bool worker = comm.rank() < workers;
            C worker_group = comm.split(worker ? 0 : 1, comm.rank());
            runtime_ = std::make_unique<runtime>(comm.split(0, comm.rank()), dev, masters, optimizer, codec, o,
                                                 policy.server_rule(workers), exec);
            if (!worker) return;
            // Every worker has the initial parameters before any pushes: otherwise a fast worker's first update
            // could reach a slow worker's initial pull.
            (void)runtime_->client().exchange({false, false, true}, 0.0);
            worker_group.barrier();
        }
    }

    [[nodiscard]] bool active() const noexcept { return static_cast<bool>(runtime_); }
    [[nodiscard]] bool serves_only() const noexcept { return runtime_ && runtime_->serves_only(); }
    [[nodiscard]] int workers(int ranks) const noexcept { return runtime_ ? runtime_->workers() : ranks; }

    void serve() {
        if (!runtime_) throw config_error("hitch::data_parallel::serve: this sync policy runs no parameter server");
        runtime_->serve();
    }
    void finish() {
        if (runtime_) runtime_->finish();
    }
    [[nodiscard]] bool finished() const noexcept { return runtime_ && runtime_->finished(); }

    sync::server_reply exchange(const sync::server_request& q, double learning_rate) {
        require_worker("a step");
        return runtime_->client().exchange(q, learning_rate);
    }

    void save(checkpoint_writer& w, const std::filesystem::path& prefix) {
        if (!runtime_) return;
        require_worker("save");
        std::vector<std::byte> blob;
        runtime_->client().save(blob);
        w.add("hitch.server.client", std::move(blob));
        runtime_->client().marker(sync::detail::save, prefix.string());
    }

    /// Stages every server's part of the checkpoint and checks this worker's (`client_section`, the file's
    /// "hitch.server.client"); `own` is what went wrong reading this worker's own file (null: nothing). Then
    /// commits everywhere (commit_own() commits this worker's file), or throws and nothing changes.
    template <class Commit>
    void load(const std::filesystem::path& prefix, std::exception_ptr own, std::span<const std::byte> client_section,
              Commit&& commit_own) {
        if (!runtime_) {
            if (own) std::rethrow_exception(own);
            commit_own();
            return;
        }
        require_worker("load");
        auto& client = runtime_->client();
        const std::string who = "hitch::data_parallel::load: section hitch.server.client";
        if (!own) {
            try {
                client.load(client_section, who, /*commit=*/false);
            } catch (...) {
                own = std::current_exception();
            }
        }
        std::exception_ptr staged;
        try {
            client.marker(sync::detail::stage_load, prefix.string());
        } catch (...) {
            staged = std::current_exception();
        }
        std::exception_ptr decided;
        try {
            client.marker(!own && !staged ? sync::detail::commit_load : sync::detail::abort_load, prefix.string());
        } catch (...) {
            decided = std::current_exception();
        }
        if (own) std::rethrow_exception(own);
        if (staged) std::rethrow_exception(staged);
        if (decided) std::rethrow_exception(decided);
        client.load(client_section, who, /*commit=*/true);
        commit_own();
    }

private:
    using runtime = sync::detail::server_runtime<O, X, C, D>;

    void require_worker(std::string_view what) const {
        if (runtime_->serves_only())
            throw config_error(hitch::detail::concat("hitch::data_parallel: ", what,
                                                     " on a dedicated server rank; call serve() there instead"));
    }

    std::unique_ptr<runtime> runtime_;
};

/// server_link's stand-in where no parameter server can run (on a device the host cannot read, where data_parallel
/// refuses the server policies at construction): no runtime, and every call what server_link does without one.
class no_server_link {
public:
    static constexpr bool possible = false;
    [[nodiscard]] bool active() const noexcept { return false; }
    [[nodiscard]] bool serves_only() const noexcept { return false; }
    [[nodiscard]] int workers(int ranks) const noexcept { return ranks; }
    [[nodiscard]] bool finished() const noexcept { return false; }
    void serve() { throw config_error("hitch::data_parallel::serve: this sync policy runs no parameter server"); }
    void finish() {}
    void save(checkpoint_writer& /*w*/, const std::filesystem::path& /*prefix*/) {}
    template <class Commit>
    void load(const std::filesystem::path& /*prefix*/, std::exception_ptr own,
              std::span<const std::byte> /*client_section*/, Commit&& commit_own) {
        if (own) std::rethrow_exception(own);
        commit_own();
    }
};

}  // namespace hitch::train::detail
