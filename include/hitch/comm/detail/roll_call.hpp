#pragma once
// Which ranks never came to a collective that timed out. The rank a collective was waiting on when its deadline
// passed is only the peer of the round that stalled: with 4 ranks and rank 3 absent, rank 2 of a dissemination
// barrier waits on rank 0, which itself waits (transitively) on rank 3. So after a timeout each rank takes a roll
// call: it tells every rank it does not already know to be present "I am here" (a zero-byte message on a tag of the
// collective's own) and listens for theirs for a short grace period. The ranks that were present time out at about
// the same moment (they all wait on the absent one) and answer each other; the ranks not heard from, and not known
// from the rounds that completed, are the ones that did not arrive.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm::detail {

/// How long a roll call listens after a deadline of `timeout`: long enough for ranks that timed out a little later
/// (they entered a little later) to answer, short beside the deadline itself.
[[nodiscard]] inline seconds_f roll_call_grace(seconds_f timeout) {
    return std::clamp(timeout / 4, seconds_f(0.05), seconds_f(5.0));
}

/// A deadline `length` from now on the clock `on` is measured on (a communicator's virtual clock, or steady).
[[nodiscard]] inline deadline deadline_like(const deadline& on, seconds_f length) {
    return on.source() != nullptr ? deadline(length, *on.source()) : deadline(length);
}

/// The ranks of [0, size) other than `rank` that neither `present` marks nor answer the roll call within `grace`.
/// post_send(to) and post_recv(from) start zero-byte messages on the roll call's tag; their requests are dropped
/// (cancelled where still pending) on return, so an absent rank costs nothing but the message left for it.
template <class PostSend, class PostRecv>
[[nodiscard]] std::vector<int> roll_call(int rank, int size, std::vector<bool> present, const deadline& grace,
                                         PostSend&& post_send, PostRecv&& post_recv) {
    present.resize(static_cast<std::size_t>(size), false);
    present[static_cast<std::size_t>(rank)] = true;
    using send_request = decltype(post_send(0));
    using recv_request = decltype(post_recv(0));
    std::vector<send_request> sends;
    std::vector<std::pair<int, recv_request>> receives;
    for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        try {
            sends.push_back(post_send(r));  // everyone: a rank we know of may be missing others
            if (!present[static_cast<std::size_t>(r)]) receives.emplace_back(r, post_recv(r));
        } catch (const error&) {  // a transport that refuses now answers nothing: that rank stays unheard
        }
    }
    for (auto& [from, request] : receives) {
        try {
            request.wait(grace);
            present[static_cast<std::size_t>(from)] = true;
        } catch (const error&) {}
    }
    std::vector<int> absent;
    for (int r = 0; r < size; ++r)
        if (!present[static_cast<std::size_t>(r)]) absent.push_back(r);
    return absent;
}

/// "rank 3 did not arrive", "ranks 2 and 3 did not arrive", "ranks 1, 2 and 5 did not arrive"; when every rank
/// answered the roll call (all came, but too late for this rank's deadline), the peer it was waiting on.
[[nodiscard]] inline std::string describe_absent(const std::vector<int>& absent, int waited_on) {
    if (absent.empty())
        return hitch::detail::concat("rank ", waited_on, " came too late (every rank answered the roll call after)");
    std::string out = absent.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < absent.size(); ++i) {
        if (i > 0) out += i + 1 == absent.size() ? " and " : ", ";
        out += std::to_string(absent[i]);
    }
    return out + " did not arrive";
}

}  // namespace hitch::comm::detail
