#pragma once
// hitch's collectives, as free functions on a group (hitch/allreduce/group.hpp), in the style of Aluminum:
//
//   allreduce<Schedule = automatic>(g, data, op, schedule, options)         every rank gets op over all ranks
//   reduce_scatter(g, data, op, options) -> this rank's block               block r = partition(n, p, r)
//   allgather(g, data, options)                                              in place: block r comes from rank r
//   allgather(g, mine, all, options)                                         all = p blocks of mine.size()
//   allgather_bytes(g, mine, options) -> byte_blocks                         blobs of different sizes per rank
//   broadcast<Schedule = binary_tree>(g, data, root, schedule, options)
//   reduce<Schedule = binary_tree>(g, data, op, root, schedule, options)    result on root; others' data kept
//
// and a non-blocking form of each (allreduce_async, ...) that returns a handle at once; the call runs on the
// group's progress thread, in issue order, while the caller computes. Buffers must stay alive and untouched until
// the handle completes. Every call is collective: all ranks of the group make the same calls in the same order
// (checked unless call_options::check is off). Buffers are host memory, or memory of a space whose backend is
// installed (space.hpp: hitch/cuda/allreduce/collectives.hpp for GPU buffers); reduce ops take float, double, half
// and bfloat16; the data-movement collectives take any element type.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/space.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/tensor.hpp"

namespace hitch::allreduce {

class byte_blocks;
namespace detail {
template <communicator C>
void fill_blocks(byte_blocks& out, transport<C>& t, std::span<const std::byte> mine,
                 std::span<const std::uint64_t> sizes);
}  // namespace detail

/// The result of allgather_bytes: rank r's blob is blob(r); all blobs lie back to back in bytes().
class byte_blocks {
public:
    byte_blocks() = default;
    [[nodiscard]] int ranks() const noexcept { return offsets_.empty() ? 0 : static_cast<int>(offsets_.size()) - 1; }
    [[nodiscard]] std::span<const std::byte> blob(int rank) const {
        option_validator("hitch::allreduce::byte_blocks::blob").half_open("rank", rank, 0, ranks());
        const auto r = static_cast<std::size_t>(rank);
        return std::span<const std::byte>(data_).subspan(offsets_[r], offsets_[r + 1] - offsets_[r]);
    }
    [[nodiscard]] std::span<const std::byte> operator[](int rank) const { return blob(rank); }
    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return data_; }
    [[nodiscard]] std::size_t offset(int rank) const { return offsets_.at(static_cast<std::size_t>(rank)); }

private:
    template <communicator C>
    friend void detail::fill_blocks(byte_blocks&, transport<C>&, std::span<const std::byte>,
                                    std::span<const std::uint64_t>);
    std::vector<std::byte> data_;
    std::vector<std::size_t> offsets_;
};

namespace detail {

inline void require_op(reduce_op op, std::string_view who) {
    if (!is_valid(op))
        throw config_error(concat("hitch::allreduce::", who, ": option op = ", static_cast<int>(op),
                                  " is outside the allowed range {sum, average, min, max}"));
}

template <communicator C>
void require_root(const group<C>& g, int root, std::string_view who) {
    option_validator(concat("hitch::allreduce::", who)).half_open("root", root, 0, g.size());
}

/// The element fields of a call on a buffer outside host memory.
template <element_type T>
void fill_element(space_call& call, reduce_op op, int root) {
    call.element_bytes = sizeof(T);
    call.type = dtype_of<T>();
    call.op = op;
    call.root = root;
}

template <element_type T>
[[nodiscard]] call_descriptor describe(operation o, std::size_t count, reduce_op op, int root,
                                       std::string_view schedule, const call_options& options) {
    call_descriptor d;
    d.operation = static_cast<std::uint8_t>(o);
    d.count = count;
    d.type = static_cast<std::uint8_t>(dtype_of<T>());
    d.op = static_cast<std::uint8_t>(op);
    d.root = root;
    d.fingerprint = options.fingerprint;
    d.set_schedule(schedule);
    return d;
}

/// Runs now (blocking) or queues (non-blocking) one call on the group.
template <bool Async, communicator C, class Describe, class Body>
auto issue(group<C>& g, const call_options& options, Describe&& describe, Body&& body) {
    if constexpr (Async)
        return g.submit(options, std::forward<Describe>(describe), std::forward<Body>(body));
    else
        g.run(options, std::forward<Describe>(describe), std::forward<Body>(body));
}

template <class S, class C, class T>
concept broadcasts = requires(const S& s, transport<C>& t, std::span<T> d, int root) { s.broadcast(t, d, root); };

template <class S, class C, class T>
concept reduces_to_root = requires(const S& s, transport<C>& t, std::span<const T> in, std::span<T> out, reduce_op op,
                                   int root) { s.reduce(t, in, out, op, root); };

// ---- the calls, shared by the blocking and non-blocking forms ----

template <bool Async, class Schedule, communicator C, floating_element T>
auto allreduce_call(group<C>& g, tensor_view<T> data, reduce_op op, const Schedule& schedule,
                    const call_options& options) {
    static_assert(check_schedule<Schedule, C>());
    require_op(op, "allreduce");
    const auto what = [=] { return describe<T>(operation::allreduce, data.size(), op, -1, Schedule::name, options); };
    if (!data.on_host()) {
        space_call call = space_call_for(g, operation::allreduce, Schedule::name);
        call.buffer = {data.data(), data.size_bytes(), data.space()};
        call.reads = call.writes = {0, data.size_bytes()};
        call.piecewise = true;  // an all-reduce of each piece is the all-reduce of the whole
        fill_element<T>(call, op, -1);
        const auto run = [op](const Schedule& s, transport<C>& t, std::byte* host, std::size_t, std::size_t bytes) {
            s.run(t, std::span<T>(reinterpret_cast<T*>(host), bytes / sizeof(T)), op);
        };
        if constexpr (Async)
            return issue_in_space<true>(
                g, options, call, "allreduce", what,
                [=](transport<C>& t, std::byte* h, std::size_t o, std::size_t b) { run(schedule, t, h, o, b); });
        else
            return issue_in_space<false>(
                g, options, call, "allreduce", what,
                [&](transport<C>& t, std::byte* h, std::size_t o, std::size_t b) { run(schedule, t, h, o, b); });
    }
    if constexpr (Async) {
        // The call may outlive the caller's schedule object: it keeps a copy.
        return issue<true>(g, options, what, [=](transport<C>& t, const call_descriptor&) {
            schedule.run(t, std::span<T>(data.data(), data.size()), op);
        });
    } else {
        // Runs before this returns: the caller's schedule is used as it is (automatic's copy is not free).
        issue<false>(g, options, what, [&schedule, data, op](transport<C>& t, const call_descriptor&) {
            schedule.run(t, std::span<T>(data.data(), data.size()), op);
        });
    }
}

template <bool Async, communicator C, floating_element T>
auto reduce_scatter_call(group<C>& g, tensor_view<T> data, reduce_op op, const call_options& options) {
    require_op(op, "reduce_scatter");
    const auto what = [=] { return describe<T>(operation::reduce_scatter, data.size(), op, -1, ring::name, options); };
    const auto run = [op](transport<C>& t, T* d, std::size_t n) {
        const std::vector<block> blocks = ring::even_blocks(n, t.size());
        ring{}.reduce_scatter(t, std::span<T>(d, n), op, std::span<const block>(blocks));
    };
    if (!data.on_host()) {
        space_call call = space_call_for(g, operation::reduce_scatter, ring::name);
        call.buffer = {data.data(), data.size_bytes(), data.space()};
        call.reads = call.writes = {0, data.size_bytes()};  // the other blocks keep partial results, as on the host
        fill_element<T>(call, op, -1);
        return issue_in_space<Async>(g, options, call, "reduce_scatter", what,
                                     [=](transport<C>& t, std::byte* h, std::size_t, std::size_t b) {
                                         run(t, reinterpret_cast<T*>(h), b / sizeof(T));
                                     });
    }
    return issue<Async>(g, options, what,
                        [=](transport<C>& t, const call_descriptor&) { run(t, data.data(), data.size()); });
}

template <bool Async, communicator C, element_type T>
auto allgather_call(group<C>& g, tensor_view<T> data, const call_options& options) {
    const auto what = [=] {
        return describe<T>(operation::allgather, data.size(), reduce_op::sum, -1, ring::name, options);
    };
    const auto run = [](transport<C>& t, T* d, std::size_t n) {
        const std::vector<block> blocks = ring::even_blocks(n, t.size());
        ring{}.allgather(t, std::span<T>(d, n), std::span<const block>(blocks));
    };
    if (!data.on_host()) {
        space_call call = space_call_for(g, operation::allgather, ring::name);
        call.buffer = {data.data(), data.size_bytes(), data.space()};
        const block own = partition(data.size(), g.size(), g.rank());
        call.reads = {own.offset * sizeof(T), own.count * sizeof(T)};
        call.writes = {0, data.size_bytes()};
        fill_element<T>(call, reduce_op::sum, -1);
        return issue_in_space<Async>(g, options, call, "allgather", what,
                                     [=](transport<C>& t, std::byte* h, std::size_t, std::size_t b) {
                                         run(t, reinterpret_cast<T*>(h), b / sizeof(T));
                                     });
    }
    return issue<Async>(g, options, what,
                        [=](transport<C>& t, const call_descriptor&) { run(t, data.data(), data.size()); });
}

template <bool Async, communicator C, element_type T>
auto allgather_into_call(group<C>& g, tensor_view<const T> mine, tensor_view<T> all, const call_options& options) {
    if (all.size() != mine.size() * static_cast<std::size_t>(g.size()))
        throw config_error(concat("hitch::allreduce::allgather: the output holds ", all.size(), " elements; it needs ",
                                  g.size(), " x ", mine.size(), " = ",
                                  mine.size() * static_cast<std::size_t>(g.size())));
    const auto what = [=] {
        return describe<T>(operation::allgather, mine.size(), reduce_op::sum, -1, ring::name, options);
    };
    if (!mine.on_host() || !all.on_host()) {
        space_call call = space_call_for(g, operation::allgather, ring::name);
        call.buffer = {all.data(), all.size_bytes(), all.space()};
        call.input = {const_cast<std::remove_const_t<T>*>(mine.data()), mine.size_bytes(), mine.space()};
        call.input_offset = static_cast<std::size_t>(g.rank()) * mine.size_bytes();
        call.writes = {0, all.size_bytes()};
        fill_element<T>(call, reduce_op::sum, -1);
        return issue_in_space<Async>(
            g, options, call, "allgather", what, [](transport<C>& t, std::byte* h, std::size_t, std::size_t b) {
                const std::size_t n = b / sizeof(T);
                const std::vector<block> blocks = ring::even_blocks(n, t.size());
                ring{}.allgather(t, std::span<T>(reinterpret_cast<T*>(h), n), std::span<const block>(blocks));
            });
    }
    return issue<Async>(g, options, what, [=](transport<C>& t, const call_descriptor&) {
        const std::size_t m = mine.size();
        T* own = all.data() + static_cast<std::size_t>(t.rank()) * m;
        if (m != 0 && own != mine.data()) std::memmove(own, mine.data(), m * sizeof(T));
        const std::vector<block> blocks = ring::even_blocks(all.size(), t.size());
        ring{}.allgather(t, std::span<T>(all.data(), all.size()), std::span<const block>(blocks));
    });
}

template <bool Async, class Schedule, communicator C, element_type T>
auto broadcast_call(group<C>& g, tensor_view<T> data, int root, const Schedule& schedule, const call_options& options) {
    static_assert(broadcasts<Schedule, C, T>,
                  "hitch::allreduce::broadcast<Schedule>: the schedule needs `broadcast(transport<C>&, std::span<T>, "
                  "int root) const` (binary_tree and ring have one)");
    require_root(g, root, "broadcast");
    const auto what = [=] {
        return describe<T>(operation::broadcast, data.size(), reduce_op::sum, root, Schedule::name, options);
    };
    if (!data.on_host()) {
        space_call call = space_call_for(g, operation::broadcast, Schedule::name);
        call.buffer = {data.data(), data.size_bytes(), data.space()};
        const bool am_root = g.rank() == root;
        call.reads = {0, am_root ? data.size_bytes() : 0};
        call.writes = {0, am_root ? 0 : data.size_bytes()};
        call.piecewise = true;  // copies: a broadcast of each piece is the broadcast of the whole
        fill_element<T>(call, reduce_op::sum, root);
        return issue_in_space<Async>(
            g, options, call, "broadcast", what, [=](transport<C>& t, std::byte* h, std::size_t, std::size_t b) {
                schedule.broadcast(t, std::span<T>(reinterpret_cast<T*>(h), b / sizeof(T)), root);
            });
    }
    return issue<Async>(g, options, what, [=](transport<C>& t, const call_descriptor&) {
        schedule.broadcast(t, std::span<T>(data.data(), data.size()), root);
    });
}

template <bool Async, class Schedule, communicator C, floating_element T>
auto reduce_call(group<C>& g, tensor_view<T> data, reduce_op op, int root, const Schedule& schedule,
                 const call_options& options) {
    static_assert(reduces_to_root<Schedule, C, T>,
                  "hitch::allreduce::reduce<Schedule>: the schedule needs `reduce(transport<C>&, std::span<const T>, "
                  "std::span<T>, reduce_op, int root) const` (binary_tree and ring have one)");
    require_op(op, "reduce");
    require_root(g, root, "reduce");
    const auto what = [=] { return describe<T>(operation::reduce, data.size(), op, root, Schedule::name, options); };
    const auto run = [=](transport<C>& t, T* d, std::size_t n) {
        const std::span<T> all(d, n);
        schedule.reduce(t, std::span<const T>(all), t.rank() == root ? all : std::span<T>(), op, root);
    };
    if (!data.on_host()) {
        space_call call = space_call_for(g, operation::reduce, Schedule::name);
        call.buffer = {data.data(), data.size_bytes(), data.space()};
        call.reads = {0, data.size_bytes()};
        call.writes = {0, g.rank() == root ? data.size_bytes() : 0};
        fill_element<T>(call, op, root);
        return issue_in_space<Async>(g, options, call, "reduce", what,
                                     [=](transport<C>& t, std::byte* h, std::size_t, std::size_t b) {
                                         run(t, reinterpret_cast<T*>(h), b / sizeof(T));
                                     });
    }
    return issue<Async>(g, options, what,
                        [=](transport<C>& t, const call_descriptor&) { run(t, data.data(), data.size()); });
}

template <bool Async, communicator C>
auto allgather_bytes_call(group<C>& g, std::span<const std::byte> mine, byte_blocks* out, const call_options& options) {
    return issue<Async>(
        g, options,
        [=] { return describe<std::byte>(operation::allgather_bytes, 0, reduce_op::sum, -1, ring::name, options); },
        [=](transport<C>& t, const call_descriptor&) {
            const std::uint64_t size = mine.size();
            const std::vector<std::uint64_t> sizes = comm::allgather_value(t.comm(), size);
            fill_blocks(*out, t, mine, std::span<const std::uint64_t>(sizes));
        });
}

}  // namespace detail

template <communicator C>
void detail::fill_blocks(byte_blocks& out, transport<C>& t, std::span<const std::byte> mine,
                         std::span<const std::uint64_t> sizes) {
    const auto p = static_cast<std::size_t>(t.size());
    out.offsets_.assign(p + 1, 0);
    for (std::size_t r = 0; r < p; ++r) out.offsets_[r + 1] = out.offsets_[r] + static_cast<std::size_t>(sizes[r]);
    out.data_.resize(out.offsets_[p]);
    const auto me = static_cast<std::size_t>(t.rank());
    if (!mine.empty()) std::memcpy(out.data_.data() + out.offsets_[me], mine.data(), mine.size());
    std::vector<block> blocks(p);
    for (std::size_t r = 0; r < p; ++r) blocks[r] = block{out.offsets_[r], out.offsets_[r + 1] - out.offsets_[r]};
    ring{}.allgather(t, std::span<std::byte>(out.data_), std::span<const block>(blocks));
}

// ---- all-reduce ----

/// Combines `data` over all ranks with `op`, in place; every rank ends with the same bytes.
template <class Schedule = automatic, communicator C, floating_element T>
void allreduce(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum, const Schedule& schedule = Schedule{},
               const call_options& options = {}) {
    detail::allreduce_call<false>(g, data, op, schedule, options);
}

/// Non-blocking allreduce: returns at once; the result is in `data` when the handle completes.
template <class Schedule = automatic, communicator C, floating_element T>
[[nodiscard]] handle allreduce_async(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum,
                                     const Schedule& schedule = Schedule{}, const call_options& options = {}) {
    return detail::allreduce_call<true>(g, data, op, schedule, options);
}

// ---- reduce-scatter and all-gather (ring, pipelined) ----

/// Combines `data` over all ranks so that this rank's block (partition(n, p, rank)) holds the result; returns that
/// block. The rest of `data` is left holding partial results.
template <communicator C, floating_element T>
tensor_view<T> reduce_scatter(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum,
                              const call_options& options = {}) {
    detail::reduce_scatter_call<false>(g, data, op, options);
    const block b = partition(data.size(), g.size(), g.rank());
    return data.subview(b.offset, b.count);
}

template <communicator C, floating_element T>
[[nodiscard]] handle reduce_scatter_async(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum,
                                          const call_options& options = {}) {
    return detail::reduce_scatter_call<true>(g, data, op, options);
}

/// In place: block r of `data` (partition(n, p, r)) is rank r's contribution; afterwards every rank has all blocks.
template <communicator C, element_type T>
void allgather(group<C>& g, tensor_view<T> data, const call_options& options = {}) {
    detail::allgather_call<false>(g, data, options);
}

template <communicator C, element_type T>
[[nodiscard]] handle allgather_async(group<C>& g, tensor_view<T> data, const call_options& options = {}) {
    return detail::allgather_call<true>(g, data, options);
}

/// `all` (p x mine.size() elements) receives every rank's `mine`, rank r's at [r m, (r+1) m).
template <communicator C, element_type T>
void allgather(group<C>& g, tensor_view<const T> mine, tensor_view<T> all, const call_options& options = {}) {
    detail::allgather_into_call<false>(g, mine, all, options);
}

template <communicator C, element_type T>
[[nodiscard]] handle allgather_async(group<C>& g, tensor_view<const T> mine, tensor_view<T> all,
                                     const call_options& options = {}) {
    return detail::allgather_into_call<true>(g, mine, all, options);
}

/// Every rank contributes a blob of any size (0 included); every rank receives all of them, in rank order.
template <communicator C>
[[nodiscard]] byte_blocks allgather_bytes(group<C>& g, std::span<const std::byte> mine,
                                          const call_options& options = {}) {
    byte_blocks out;
    detail::allgather_bytes_call<false>(g, mine, &out, options);
    return out;
}

/// Non-blocking allgather_bytes: `out` is filled when the handle completes.
template <communicator C>
[[nodiscard]] handle allgather_bytes_async(group<C>& g, std::span<const std::byte> mine, byte_blocks& out,
                                           const call_options& options = {}) {
    return detail::allgather_bytes_call<true>(g, mine, &out, options);
}

// ---- broadcast and reduce ----

/// Copies `data` on `root` to every rank.
template <class Schedule = binary_tree, communicator C, element_type T>
void broadcast(group<C>& g, tensor_view<T> data, int root = 0, const Schedule& schedule = Schedule{},
               const call_options& options = {}) {
    detail::broadcast_call<false>(g, data, root, schedule, options);
}

template <class Schedule = binary_tree, communicator C, element_type T>
[[nodiscard]] handle broadcast_async(group<C>& g, tensor_view<T> data, int root = 0,
                                     const Schedule& schedule = Schedule{}, const call_options& options = {}) {
    return detail::broadcast_call<true>(g, data, root, schedule, options);
}

/// Combines `data` over all ranks into `data` on `root`; the other ranks' `data` is left as it was.
template <class Schedule = binary_tree, communicator C, floating_element T>
void reduce(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum, int root = 0,
            const Schedule& schedule = Schedule{}, const call_options& options = {}) {
    detail::reduce_call<false>(g, data, op, root, schedule, options);
}

template <class Schedule = binary_tree, communicator C, floating_element T>
[[nodiscard]] handle reduce_async(group<C>& g, tensor_view<T> data, reduce_op op = reduce_op::sum, int root = 0,
                                  const Schedule& schedule = Schedule{}, const call_options& options = {}) {
    return detail::reduce_call<true>(g, data, op, root, schedule, options);
}

}  // namespace hitch::allreduce
