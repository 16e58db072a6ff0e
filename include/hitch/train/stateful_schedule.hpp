#pragma once
// hitch::train::stateful_schedule<S>: an all-reduce schedule with a state of its own that a checkpoint keeps (e.g.
// automatic's decisions), so an exact resume makes the same choices. data_parallel saves it in the checkpoint
// section "hitch.schedule" and restores it on load; a schedule without state is simply not saved.
//
//   s.save_state(blob)     appends the state to `blob`
//   s.load_state(bytes)    replaces the state by what save_state wrote; throws and changes nothing when the
//                          bytes are not such a state
//
// Collectives run a copy of the schedule, so a state that runs change lives behind a pointer the copies share.
// data_parallel loads into a copy of its schedule and keeps the copy only once the whole checkpoint is valid:
// load_state must give its object a state of its own, not write through the shared one.

#include <cstddef>
#include <span>
#include <vector>

namespace hitch::train {

template <class S>
concept stateful_schedule =
    requires(const S& cs, S& s, std::vector<std::byte>& blob, std::span<const std::byte> bytes) {
        cs.save_state(blob);
        s.load_state(bytes);
    };

}  // namespace hitch::train
