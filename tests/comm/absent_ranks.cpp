// A rank that never comes to a barrier or to an agreement gather is named in every other rank's message: for
// p = 2 ... 8, one rank or two ranks absent (the last, a middle one, rank 0), over comm::simulated (virtual time)
// and comm::local (threads, wall time: the last rank, and two ranks). Without the roll call the message named the peer
// of the round that stalled instead, e.g. "rank 0 did not arrive" on rank 2 of 4 with rank 3 absent.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "../time_scale.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"

namespace {

using hitch::comm::local;
using hitch::comm::simulated;

/// The part of the message every rank must show when `absent` stayed away.
std::string expected_text(const std::set<int>& absent) {
    std::vector<int> a(absent.begin(), absent.end());
    if (a.size() == 1) return "rank " + std::to_string(a[0]) + " did not arrive";
    return "ranks " + std::to_string(a[0]) + " and " + std::to_string(a[1]) + " did not arrive";
}

/// What each present rank's call threw ("" for an absent rank, "no error" when the call returned).
template <class Comm>
std::string attempt(Comm& comm, const std::set<int>& absent, bool gather) {
    if (absent.contains(comm.rank())) return "";
    try {
        if (gather)
            (void)hitch::comm::allgather_value(comm, comm.rank());
        else
            comm.barrier();
    } catch (const hitch::timeout_error& e) {
        return e.what();
    }
    return "no error";
}

/// Which ranks stay away: the last, rank 0, a middle one, two; over threads (wall time) fewer of them.
std::vector<std::set<int>> absences(int p, bool all) {
    std::vector<std::set<int>> out{{p - 1}};
    if (all) out.push_back({0});
    if (all && p >= 4) out.push_back({p / 2});
    if (p >= 5) out.push_back({1, p - 2});
    return out;
}

void check_messages(const std::vector<std::string>& messages, const std::set<int>& absent, bool gather) {
    const std::string want = expected_text(absent);
    for (std::size_t r = 0; r < messages.size(); ++r) {
        if (absent.contains(static_cast<int>(r))) continue;
        INFO("rank " << r << (gather ? " (gather)" : " (barrier)") << ": " << messages[r]);
        CHECK(messages[r].find(want) != std::string::npos);
        CHECK(messages[r].find(gather ? "allgather on rank " : "barrier #0 on rank ") != std::string::npos);
    }
}

}  // namespace

TEST_CASE("comm::local: every rank names the ranks that did not come to a barrier or a gather",
          "[comm][local][faults]") {
    hitch::comm::local_options options;
    // The roll call then listens 0.15 s: room for 8 threads on 2 busy cores (more under a sanitizer).
    options.timeout_s = hitch_test::scaled_seconds(0.6);
    for (int p = 2; p <= 8; ++p)
        for (const auto& absent : absences(p, false))
            for (const bool gather : {false, true}) {
                const auto messages =
                    hitch::comm::run_local(p, [&](local& comm) { return attempt(comm, absent, gather); }, options);
                check_messages(messages, absent, gather);
            }
}

TEST_CASE("comm::simulated: every rank names the ranks that did not come to a barrier or a gather",
          "[comm][simulated][faults]") {
    hitch::comm::simulated_options options;
    options.timeout_s = 1.0;
    const auto net = hitch::comm::simulated_network::single_switch({5e-6, 12.5e9});
    for (int p = 2; p <= 8; ++p)
        for (const auto& absent : absences(p, true))
            for (const bool gather : {false, true}) {
                const auto messages = hitch::comm::run_simulated(
                    p, net, [&](simulated& comm) { return attempt(comm, absent, gather); }, options);
                check_messages(messages, absent, gather);
            }
}
