#pragma once
// What hitch tells a user while it runs. The library never prints: where a user should hear of something that is
// not an error (a collective that has waited a long time for ranks that have not come, ...), it calls the observer
// the user supplied. None by default.
//
//   hitch::observer watch;
//   watch.stall = [](const hitch::stall_report& r) { std::fprintf(stderr, "%s\n", r.message().c_str()); };
//   hitch::allreduce::group g(comm, watch);          // or data_parallel_options::observer
//
// The stall inspector (Horovod's, from its coordinator): when a collective call has waited stall_options::warning_s
// on a reporting rank, that rank asks every other rank where it is, and reports the ranks that have not entered the
// call yet, and again at 2, 4, 8 ... times the threshold until the call ends or its deadline passes (the call then
// fails with timeout_error naming the ranks that did not arrive, as before).

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"

namespace hitch {

/// What a stall inspector found: one call that has waited past the warning threshold on `rank`, and the ranks
/// that had not entered it when they were asked.
struct stall_report {
    /// Where a rank that had not entered the call was.
    struct absentee {
        int rank = 0;
        /// False when it did not answer within the inspector's grace (its process hangs, died, or its group is gone).
        bool answered = false;
        /// Calls of the group it had finished (its last call's number is calls_done - 1).
        std::uint64_t calls_done = 0;
        /// It was inside an earlier call (`in_call`, named `in_operation`) when asked; else between calls.
        bool in_call = false;
        std::uint64_t in_call_sequence = 0;
        std::string in_operation;
    };

    std::string operation;       // "allreduce", "broadcast" ...
    std::string schedule;        // the call's schedule ("ring", "compressed_ring" ...)
    std::uint64_t sequence = 0;  // the call's number in its group (as in timeout_error: "allreduce #12")
    int rank = 0;                // the reporting rank, and the group's size
    int size = 0;
    std::chrono::duration<double> waited{};    // how long the call had waited on `rank` when it asked
    std::chrono::duration<double> deadline{};  // the call's timeout
    std::vector<absentee> absent;              // in rank order; never empty

    [[nodiscard]] std::vector<int> absent_ranks() const {
        std::vector<int> out;
        out.reserve(absent.size());
        for (const auto& a : absent) out.push_back(a.rank);
        return out;
    }

    /// One line: "hitch: stall: allreduce #12 (ring) on rank 0 of 4 has waited 5.0 s of its 300.0 s deadline:
    /// rank 3 has not arrived (its last call was #11)".
    [[nodiscard]] std::string message() const {
        std::ostringstream s;
        s.setf(std::ios::fixed);
        s.precision(1);
        s << "hitch: stall: " << operation << " #" << sequence;
        if (!schedule.empty()) s << " (" << schedule << ')';
        s << " on rank " << rank << " of " << size << " has waited " << waited.count() << " s of its "
          << deadline.count() << " s deadline: " << (absent.size() == 1 ? "rank " : "ranks ");
        for (std::size_t i = 0; i < absent.size(); ++i) {
            if (i > 0) s << (i + 1 == absent.size() ? " and " : ", ");
            s << absent[i].rank;
        }
        s << (absent.size() == 1 ? " has" : " have") << " not arrived (";
        for (std::size_t i = 0; i < absent.size(); ++i) {
            const absentee& a = absent[i];
            if (i > 0) s << "; ";
            if (absent.size() > 1) s << "rank " << a.rank << ": ";
            if (!a.answered)
                s << "no answer";
            else if (a.in_call)
                s << "still in " << a.in_operation << " #" << a.in_call_sequence;
            else if (a.calls_done == 0)
                s << "no call yet";
            else
                s << "its last call was #" << a.calls_done - 1;
        }
        s << ')';
        return s.str();
    }
};

/// The user's observer: each member, when set, is called when hitch has that to tell. Called on a thread of
/// hitch's (the stall inspector's), so it must be safe to call from there; it should return quickly, and what it
/// throws is dropped.
struct observer {
    std::function<void(const stall_report&)> stall;
    /// One line about something that works, but not as asked: "hitch: shared memory refused (...); this group's
    /// calls take messages". Said once, by the lowest rank of the node concerned.
    std::function<void(const std::string&)> notice;
};

/// The stall warning threshold from HITCH_STALL_WARNING_S (seconds, >= 0; 0 turns the inspector off), else 5 s.
[[nodiscard]] inline double stall_warning_from_environment() {
    const char* text = std::getenv("HITCH_STALL_WARNING_S");
    if (text == nullptr || *text == '\0') return 5.0;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    const option_validator check("hitch: environment variable");
    if (end == text || *end != '\0') check.fail("HITCH_STALL_WARNING_S", std::string(text), "[0, 1e9] seconds");
    if (!(value >= 0.0) || value > 1e9) check.fail("HITCH_STALL_WARNING_S", value, "[0, 1e9] seconds");
    return value;
}

/// Options of the stall inspector, per rank: the ranks need not agree (a rank that does not report still answers
/// those that do).
struct stall_options {
    /// Report a collective call that has waited this long, in seconds (and again at twice, four times ... this
    /// until its deadline). 0: this rank does not report. Default: HITCH_STALL_WARNING_S, else 5. Without an
    /// observer nothing is reported either way.
    double warning_s = stall_warning_from_environment();
    /// Which ranks report: rank 0 only (false, as Horovod's coordinator does) or every rank that waits.
    bool every_rank = false;

    void validate() const { option_validator("hitch::stall_options").closed("warning_s", warning_s, 0.0, 1e9); }
};

}  // namespace hitch
