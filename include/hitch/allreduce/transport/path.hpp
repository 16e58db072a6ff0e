#pragma once
// hitch::allreduce::transport_path<P>: what each way of moving a call's bytes offers the transport (message_path,
// direct_path, staged_path). The transport holds one path per call and forwards to it; the path's traits tell
// schedules and the transport's helpers whether receives need scratch slots and whether they read the sender's
// memory in place.
//
//   P::needs_slots, P::combine_needs_slot, P::reads_in_place          static constexpr bool
//   p.send(peer, channel, tag, std::span<const T>, writable)          -> P::outgoing
//   p.receive(peer, channel, tag, count, slot)                        -> P::incoming<T>   a view until release()
//   p.receive_into(peer, channel, tag, dst)                           -> P::incoming<T>   copied into dst
//   p.receive_combine(peer, channel, tag, dst, combine_spec, slot)    -> P::incoming<T>   combined into dst
//   outgoing: test(), wait(deadline), active();  incoming<T>: test(), wait(deadline), data(), size(), writable(),
//   write_back(const T*), release()

#include <concepts>
#include <cstddef>
#include <span>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/core/deadline.hpp"

namespace hitch::allreduce {

template <class P>
concept transport_path =
    requires(P& p, std::span<const float> out, std::span<float> in, std::size_t n, const combine_spec& spec,
             const deadline& limit, typename P::outgoing& o, typename P::template incoming<float>& i, const float* r) {
        { P::needs_slots } -> std::convertible_to<bool>;
        { P::combine_needs_slot } -> std::convertible_to<bool>;
        { P::reads_in_place } -> std::convertible_to<bool>;
        { p.send(0, 0, 0, out, false) } -> std::same_as<typename P::outgoing>;
        { p.receive(0, 0, 0, n, in) } -> std::same_as<typename P::template incoming<float>>;
        { p.receive_into(0, 0, 0, in) } -> std::same_as<typename P::template incoming<float>>;
        { p.receive_combine(0, 0, 0, in, spec, in) } -> std::same_as<typename P::template incoming<float>>;
        { o.test() } -> std::convertible_to<bool>;
        o.wait(limit);
        { o.active() } -> std::convertible_to<bool>;
        { i.test() } -> std::convertible_to<bool>;
        i.wait(limit);
        { i.data() } -> std::same_as<const float*>;
        { i.size() } -> std::convertible_to<std::size_t>;
        { i.writable() } -> std::convertible_to<bool>;
        i.write_back(r);
        i.release();
    };

}  // namespace hitch::allreduce
