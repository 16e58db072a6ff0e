#pragma once
// The dissemination barrier (Hensgen, Finkel & Manber 1988): ceil(lg p) rounds; in round k each rank signals
// rank + 2^k and waits for rank - 2^k. Shared by communicators that build their barrier from point-to-point
// messages, so a timeout can name the rank that did not arrive.

#include <cstdint>
#include <string_view>
#include <utility>

#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm::detail {

using hitch::detail::concat;  // the communicators' detail namespace shares hitch's message helper

/// post_send(to, round) and post_recv(from, round) start zero-byte messages on a channel reserved for barriers.
/// The whole barrier ends by `limit`.
template <class PostSend, class PostRecv>
void dissemination_barrier(int rank, int size, std::uint64_t number, const deadline& limit, std::string_view who,
                           PostSend&& post_send, PostRecv&& post_recv) {
    if (size <= 1) return;
    int round = 0;
    for (int dist = 1; dist < size; dist <<= 1, ++round) {
        const int to = (rank + dist) % size;
        const int from = (rank - dist + size) % size;
        auto s = post_send(to, round);
        auto r = post_recv(from, round);
        try {
            r.wait(limit);
            s.wait(limit);
        } catch (const timeout_error&) {
            throw timeout_error(hitch::detail::concat(who, " barrier"),
                                hitch::detail::concat("barrier #", number, " on rank ", rank, " of ", size, ": rank ",
                                                      from, " did not arrive"),
                                limit.waited());
        }
    }
}

/// As above, within `timeout` from now on the steady clock.
template <class PostSend, class PostRecv>
void dissemination_barrier(int rank, int size, std::uint64_t number, seconds_f timeout, std::string_view who,
                           PostSend&& post_send, PostRecv&& post_recv) {
    dissemination_barrier(rank, size, number, deadline(timeout), who, std::forward<PostSend>(post_send),
                          std::forward<PostRecv>(post_recv));
}

}  // namespace hitch::comm::detail
