#pragma once
// The one text for a receive that meets a message of another size or element type, so the paths that check it
// themselves (direct, staged) report it as MPI's truncation would be reported.

#include <cstddef>
#include <string>

#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce::detail {

/// What a receive that meets a message of another size or element type reports (the direct and staged paths).
[[nodiscard]] inline std::string message_mismatch(int rank, int peer, std::size_t want_bytes, dtype want,
                                                  std::size_t have_bytes, dtype have) {
    const std::size_t mine = size_of(want), theirs = size_of(have);
    return hitch::detail::concat("hitch::allreduce: message mismatch on rank ", rank, ": recv from rank ", peer,
                                 " expected ", mine != 0 ? want_bytes / mine : want_bytes, " x ", name(want),
                                 " but the message has ", theirs != 0 ? have_bytes / theirs : have_bytes, " x ",
                                 name(have));
}

}  // namespace hitch::allreduce::detail
