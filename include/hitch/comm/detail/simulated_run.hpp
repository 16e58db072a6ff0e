#pragma once
// Running a simulated world: one fiber per simulated thread, taking turns in virtual-time order (simulated_engine.hpp),
// and what the run records per rank and per link (bytes, messages, busy and idle virtual time, the error a rank ended
// with), so a run can be checked against a model or drawn as a timeline.

#include <exception>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/detail/simulated_engine.hpp"
#include "hitch/comm/detail/simulated_network.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

/// What one rank did, in virtual time.
struct simulated_rank_report {
    double finish_s = 0;  // its clock when its function returned or threw
    double busy_s = 0;    // spent in compute()
    double idle_s = 0;    // spent blocked on messages, barriers and probes
    std::uint64_t bytes_sent = 0, messages_sent = 0, bytes_received = 0, messages_received = 0;
    std::exception_ptr error;  // what the rank's function threw, if anything
    std::string error_text;
    double error_s = 0;                     // its clock when it threw
    bool died = false;                      // ended by simulated_faults::deaths
    std::vector<simulated_event> timeline;  // with simulated_options::record_timeline
};

/// What one direction of one link carried.
struct simulated_link_report {
    std::string name;
    double busy_s = 0;
    std::uint64_t bytes = 0, messages = 0;
};

struct simulation_report {
    std::vector<simulated_rank_report> ranks;
    std::vector<simulated_link_report> links;

    /// The virtual time the last rank finished.
    [[nodiscard]] double makespan_s() const {
        double t = 0;
        for (const auto& r : ranks) t = std::max(t, r.finish_s);
        return t;
    }
    /// The error that happened first in virtual time (ties: the lowest rank), or null.
    [[nodiscard]] std::exception_ptr first_error() const {
        const simulated_rank_report* first = nullptr;
        for (const auto& r : ranks)
            if (r.error && (first == nullptr || r.error_s < first->error_s)) first = &r;
        return first != nullptr ? first->error : nullptr;
    }
};

namespace detail {

struct simulated_access {
    static simulated world_communicator(const std::shared_ptr<sim_world>& world,
                                        const std::shared_ptr<const std::vector<int>>& members, int rank) {
        return simulated(world, members, 0, rank, seconds_f(world->options.timeout_s));
    }
};

/// Runs body(rank, comm) for every rank, each on a fiber of the calling thread, in virtual-time order; returns what
/// the run recorded.
template <class Body>
simulation_report run_simulated_world(int ranks, const simulated_network& network, const simulated_options& options,
                                      Body&& body) {
    option_validator("hitch::comm::simulate").closed("ranks", ranks, 1, 1 << 16);
    network.validate();
    options.validate(ranks);
    auto world = std::make_shared<sim_world>(ranks, network, options);
    auto members = std::make_shared<std::vector<int>>(static_cast<std::size_t>(ranks));
    std::iota(members->begin(), members->end(), 0);
    std::shared_ptr<const std::vector<int>> shared_members = members;
    for (int r = 0; r < ranks; ++r) {
        world->add_thread(r, 0, [&world, r, &body, &shared_members] {
            sim_rank& me = world->rank(r);
            const sim_process& self = *me.threads.front();
            try {
                simulated comm = simulated_access::world_communicator(world, shared_members, r);
                body(r, comm);
            } catch (const std::exception& e) {
                me.error = std::current_exception();
                me.error_text = e.what();
                me.error_at = self.now;
            } catch (...) {
                me.error = std::current_exception();
                me.error_text = "a non-standard exception";
                me.error_at = self.now;
            }
            me.finished_at = self.now;
        });
    }
    world->run();
    simulation_report report;
    for (int r = 0; r < ranks; ++r) {
        const sim_rank& s = world->rank(r);
        simulated_rank_report out;
        out.finish_s = to_seconds(s.finished_at);
        out.busy_s = to_seconds(s.busy);
        out.idle_s = to_seconds(s.idle);
        out.bytes_sent = s.bytes_sent;
        out.messages_sent = s.messages_sent;
        out.bytes_received = s.bytes_received;
        out.messages_received = s.messages_received;
        out.error = s.error;
        out.error_text = s.error_text;
        out.error_s = to_seconds(s.error_at);
        out.died = s.died;
        out.timeline = s.timeline;
        report.ranks.push_back(std::move(out));
    }
    for (const auto& l : world->links.links())
        report.links.push_back({l.name, to_seconds(l.busy), l.bytes, l.messages});
    return report;
}

}  // namespace detail

/// Writes the ranks' timelines (simulated_options::record_timeline) in Chrome's trace-event format, as
/// train::timeline does for real runs: rank r is process r, one complete event per compute or wait span, in virtual
/// microseconds. Load it in chrome://tracing or https://ui.perfetto.dev.
inline void write_chrome_trace(const simulation_report& report, std::ostream& out) {
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
    bool first = true;
    const auto sep = [&] {
        if (!first) out << ',';
        first = false;
        out << '\n';
    };
    out.precision(15);
    for (std::size_t r = 0; r < report.ranks.size(); ++r) {
        sep();
        out << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r << ",\"args\":{\"name\":\"rank " << r << "\"}}";
        for (const simulated_event& e : report.ranks[r].timeline) {
            sep();
            out << "{\"name\":\"" << e.name << "\",\"cat\":\""
                << (e.name == std::string_view("compute") || e.name == std::string_view("host") ? "compute" : "comm")
                << "\",\"ph\":\"X\",\"ts\":" << e.begin_s * 1e6 << ",\"dur\":" << (e.end_s - e.begin_s) * 1e6
                << ",\"pid\":" << r << ",\"tid\":" << e.thread << ",\"args\":{";
            if (e.peer >= 0) out << "\"peer\":" << e.peer;
            out << "}}";
        }
    }
    out << "\n]}\n";
}

/// Runs fn(comm) on a simulated cluster of `ranks` ranks and returns what happened on each rank and link. A rank
/// that throws ends there (as a crashed process would): the others go on and time out, in virtual time, where they
/// wait for it. Nothing is rethrown; see simulation_report::first_error.
template <class F>
simulation_report simulate(int ranks, const simulated_network& network, F&& fn, const simulated_options& options = {}) {
    return detail::run_simulated_world(ranks, network, options, [&](int, simulated& comm) { (void)fn(comm); });
}

/// As comm::run_local, on a simulated cluster: runs fn(comm) on every rank, rethrows the error that happened first
/// in virtual time, and returns each rank's result in rank order when fn returns one.
template <class F>
auto run_simulated(int ranks, const simulated_network& network, F&& fn, const simulated_options& options = {}) {
    using result = std::invoke_result_t<F&, simulated&>;
    constexpr bool returns_value = !std::is_void_v<result>;
    using slot = std::optional<std::conditional_t<returns_value, result, int>>;
    std::vector<slot> results(static_cast<std::size_t>(ranks));
    const simulation_report report = detail::run_simulated_world(ranks, network, options, [&](int r, simulated& comm) {
        if constexpr (returns_value)
            results[static_cast<std::size_t>(r)].emplace(fn(comm));
        else
            fn(comm);
    });
    if (auto e = report.first_error()) std::rethrow_exception(e);
    if constexpr (returns_value) {
        std::vector<result> out;
        out.reserve(results.size());
        for (auto& r : results) out.push_back(std::move(*r));
        return out;
    }
}

}  // namespace hitch::comm
