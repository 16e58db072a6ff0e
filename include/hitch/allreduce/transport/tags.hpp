#pragma once
// Tags of one collective call: every message of a call uses tags derived from the call's sequence number inside
// hitch's reserved range (collective_tag_base(comm) .. comm.max_tag()), so a late message of one call can never
// match another call.

#include <cstdint>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce {

/// Channels a schedule may use in one call: tags call_base + [0, channels_per_call).
inline constexpr int channels_per_call = 64;
/// Offsets inside hitch's reserved tag range: 0 to 2 are comm::agree's gather and the roll calls (comm/agree.hpp),
/// [3, first_call_tag_offset) stay free.
inline constexpr int first_call_tag_offset = 16;

/// The first tag of call `sequence` on `comm`: sequence numbers wrap around a window that fits the reserved range.
template <communicator C>
[[nodiscard]] int call_tag_base(const C& comm, std::uint64_t sequence) {
    const long long base = static_cast<long long>(collective_tag_base(comm)) + first_call_tag_offset;
    const long long span = static_cast<long long>(comm.max_tag()) - base + 1;
    const long long window = span / channels_per_call;
    if (window < 1)
        throw config_error(
            hitch::detail::concat("hitch::allreduce: ", C::name, " offers tags up to ", comm.max_tag(),
                                  ", too few for hitch's collectives (need at least ",
                                  2 * (collective_tag_base(comm) + first_call_tag_offset + channels_per_call), ")"));
    return static_cast<int>(base +
                            static_cast<long long>(sequence % static_cast<std::uint64_t>(window)) * channels_per_call);
}

}  // namespace hitch::allreduce
