#pragma once
// The dissemination barrier (Hensgen, Finkel & Manber 1988): ceil(lg p) rounds; in round k each rank signals
// rank + 2^k and waits for rank - 2^k. Shared by communicators that build their barrier from point-to-point
// messages, so a timeout can name the ranks that did not arrive (after a roll call: detail/roll_call.hpp).

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/comm/detail/roll_call.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm::detail {

using hitch::detail::concat;  // the communicators' detail namespace shares hitch's message helper

/// Tags of the barrier channel: rounds use [0, 32), the roll call after a timeout 32 + the barrier's number modulo
/// 1024 (so a late answer to one barrier's roll call is not taken for another's).
inline constexpr int barrier_roll_call_tag = 32;
inline constexpr int barrier_tags = barrier_roll_call_tag + 1024;

/// post_send(to, tag) and post_recv(from, tag) start zero-byte messages on a channel reserved for barriers (tags
/// [0, barrier_tags)). The rounds end by `limit`; a timeout then takes a roll call (a short grace more) and names
/// the ranks that did not arrive.
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
            // Ranks rank-1 ... rank-(dist-1) are known to have arrived: the rounds before this one completed.
            std::vector<bool> present(static_cast<std::size_t>(size), false);
            for (int back = 1; back < dist; ++back)
                present[static_cast<std::size_t>((rank - back + size) % size)] = true;
            const int tag = barrier_roll_call_tag + static_cast<int>(number % 1024);
            const seconds_f timeout = limit.waited();
            const std::vector<int> absent = roll_call(
                rank, size, std::move(present), deadline_like(limit, roll_call_grace(timeout)),
                [&](int peer) { return post_send(peer, tag); }, [&](int peer) { return post_recv(peer, tag); });
            throw timeout_error(hitch::detail::concat(who, " barrier"),
                                hitch::detail::concat("barrier #", number, " on rank ", rank, " of ", size), timeout,
                                describe_absent(absent, from));
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
