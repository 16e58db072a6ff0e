// hitch::allreduce_schedule (as allreduce::schedule_for) against stand-in types: one that models it and variants
// that each miss one requirement; native is unavailable at compile time where the communicator has no all-reduce of
// its own; and a schedule written outside hitch (gather to rank 0, combine, send back) plugs into allreduce<S>() and
// is checked against the reference.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/comm/local.hpp"
#ifdef HITCH_TEST_HAVE_MPI
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#endif
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;

namespace stand_in {

/// The naive centralised all-reduce, written only against the transport: every rank sends its buffer to rank 0,
/// which combines them in rank order and sends the result back.
struct gather_scatter {
    struct options_type {
        void validate() const {}
    };
    static constexpr std::string_view name = "gather_scatter";
    gather_scatter() = default;
    explicit gather_scatter(const options_type& o) : options_(o) {}
    const options_type& options() const { return options_; }
    cost_estimate cost(int p, std::size_t n, const cost_constants&) const {
        cost_estimate c;
        c.latency_terms = 2.0 * (p - 1);
        c.bandwidth_bytes = 2.0 * (p - 1) * static_cast<double>(n);
        c.reduced_bytes = (p - 1.0) * static_cast<double>(n);
        return c;
    }
    template <class C, hitch::floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        const int p = t.size();
        if (p == 1) return;
        if (t.rank() == 0) {
            std::span<T> slot = t.template scratch<T>(data.size());
            for (int r = 1; r < p; ++r) {
                auto in = t.template receive<T>(r, 0, data.size(), slot);
                in.wait(t.limit());
                combine(data.data(), data.data(), in.data(), data.size(), op, r == p - 1 ? p : 1);
                in.release();
            }
            std::vector<typename transport<C>::outgoing> sends;
            for (int r = 1; r < p; ++r) sends.push_back(t.template send<T>(r, 1, std::span<const T>(data)));
            for (auto& s : sends) s.wait(t.limit());
        } else {
            t.template send<T>(0, 0, std::span<const T>(data)).wait(t.limit());
            t.template receive_into<T>(0, 1, data).wait(t.limit());
        }
    }
    options_type options_{};
};

struct no_name : gather_scatter {
    static constexpr int name = 0;
};
struct no_options {
    static constexpr std::string_view name = "x";
    cost_estimate cost(int, std::size_t, const cost_constants&) const { return {}; }
    template <class C, class T>
    void run(transport<C>&, std::span<T>, reduce_op) const {}
};
struct no_cost {
    struct options_type {
        void validate() const {}
    };
    static constexpr std::string_view name = "x";
    no_cost() = default;
    explicit no_cost(const options_type&) {}
    const options_type& options() const { return options_; }
    options_type options_{};
    template <class C, class T>
    void run(transport<C>&, std::span<T>, reduce_op) const {}
};
struct float_only : gather_scatter {
    template <class C>
    void run(transport<C>&, std::span<float>, reduce_op) const {}
};

}  // namespace stand_in

static_assert(schedule_for<stand_in::gather_scatter, local>);
static_assert(hitch::allreduce_schedule<stand_in::gather_scatter, transport<local>>);
static_assert(check_schedule<stand_in::gather_scatter, local>());
static_assert(!hitch::schedule_has_name<stand_in::no_name>);
static_assert(!schedule_for<stand_in::no_name, local>);
static_assert(!hitch::schedule_has_options<stand_in::no_options>);
static_assert(!schedule_for<stand_in::no_options, local>);
static_assert(!hitch::schedule_has_cost<stand_in::no_cost>);
static_assert(!schedule_for<stand_in::no_cost, local>);
static_assert(!hitch::schedule_runs_on<stand_in::float_only, transport<local>>, "half and bfloat16 are required too");
static_assert(!schedule_for<ring, int>, "an int is not a communicator");

// every schedule hitch ships models the concept on comm::local, and the rooted ones offer reduce/broadcast
static_assert(schedule_for<ring, local> && schedule_for<recursive_doubling, local> &&
              schedule_for<rabenseifner, local> && schedule_for<binary_tree, local> &&
              schedule_for<double_binary_tree, local> && schedule_for<hierarchical<>, local> &&
              schedule_for<parameter_server, local> && schedule_for<automatic, local>);
static_assert(rooted_schedule_for<ring, local> && rooted_schedule_for<binary_tree, local>);
static_assert(!rooted_schedule_for<recursive_doubling, local>);

#ifdef HITCH_TEST_HAVE_MPI
static_assert(schedule_for<native, hitch::comm::mpi>);
static_assert(!schedule_for<native, local>, "comm::local has no all-reduce of its own");
static_assert(has_native_allreduce<hitch::comm::mpi>::value && !has_native_allreduce<local>::value);
#endif

TEST_CASE("a schedule written outside hitch runs through allreduce<S>()", "[allreduce][concept]") {
    for (int p : {1, 2, 3, 6})
        for (reduce_op op : {reduce_op::sum, reduce_op::average, reduce_op::min}) {
            const auto value = [](int r, std::size_t i) { return hitch_test::exact_value<hitch::half>(r, i, 99); };
            const auto want = hitch_test::reference<hitch::half>(p, 500, op, value);
            const auto results = hitch::comm::run_local(p, [&](local& c) {
                group g(c);
                auto data = hitch_test::make_input<hitch::half>(c.rank(), 500, value);
                allreduce<stand_in::gather_scatter>(g, hitch::view(data), op);
                return data;
            });
            for (const auto& r : results)
                CHECK(hitch_test::first_difference(std::span<const hitch::half>(r),
                                                   std::span<const hitch::half>(want)) == -1);
        }
}

TEST_CASE("a call's transport holds the one path its communicator and options allow", "[allreduce][transport]") {
    hitch::comm::run_local(2, [](local& comm) {
        group<local> g(comm);
        call_options o;
        o.check = false;
        const auto describe = [] {
            call_descriptor d;
            d.operation = static_cast<std::uint8_t>(operation::allreduce);
            d.set_schedule("path-test");
            return d;
        };
        bool direct = false, staged = true, slots = true;
        g.run(o, describe, [&](transport<local>& t, const call_descriptor&) {
            direct = t.direct();
            staged = t.staged();
            slots = t.needs_slots();
        });
        if (!direct || staged || slots) throw std::logic_error("comm::local with shared memory: not the direct path");
        o.shared_memory = false;
        g.run(o, describe, [&](transport<local>& t, const call_descriptor&) {
            direct = t.direct();
            staged = t.staged();
            slots = t.needs_slots();
        });
        if (direct || staged || !slots) throw std::logic_error("comm::local without shared memory: not messages");
    });
}

TEST_CASE("receive_into an empty buffer completes and frees its sender, on every path", "[allreduce][transport]") {
    // On the direct path an empty destination (data() == nullptr) was once taken for a plain receive, which holds
    // the sender's buffer until released: the sender waited until its deadline and timed out.
    hitch::comm::run_local(2, [](local& comm) {
        group<local> g(comm);
        for (const bool shared : {true, false}) {
            call_options o;
            o.check = false;
            o.shared_memory = shared;
            o.timeout_s = 5.0;
            const auto describe = [] {
                call_descriptor d;
                d.operation = static_cast<std::uint8_t>(operation::allreduce);
                d.set_schedule("empty-test");
                return d;
            };
            g.run(o, describe, [&](transport<local>& t, const call_descriptor&) {
                std::vector<float> none, some{1.0f, 2.0f}, got(2);
                const int peer = 1 - t.rank();
                for (int round = 0; round < 3; ++round) {  // empty, then a message behind it, on the same channel
                    auto r = t.template receive_into<float>(peer, 0, std::span<float>(none));
                    auto s = t.template send<float>(peer, 0, std::span<const float>(none));
                    r.wait(t.limit());
                    s.wait(t.limit());
                    auto r2 = t.template receive_into<float>(peer, 0, std::span<float>(got));
                    auto s2 = t.template send<float>(peer, 0, std::span<const float>(some));
                    r2.wait(t.limit());
                    s2.wait(t.limit());
                    if (got != some) throw std::logic_error("the message behind an empty one arrived wrong");
                }
            });
        }
    });
}

TEST_CASE("slot_store: a key's type is part of it, and make() runs once", "[allreduce][transport]") {
    slot_store slots;
    int made = 0;
    const auto make = [&] {
        ++made;
        return std::make_shared<int>(7);
    };
    CHECK(*slots.get_or_make(slot_key<int>{"levels"}, make) == 7);
    CHECK(*slots.get_or_make(slot_key<int>{"levels"}, make) == 7);
    CHECK(made == 1);
    CHECK(slots.find(slot_key<long>{"levels"}) == nullptr);
    CHECK(slots.find(slot_key<int>{"other"}) == nullptr);
    slots.put(slot_key<long>{"levels"}, std::make_shared<long>(9));
    CHECK(*slots.find(slot_key<long>{"levels"}) == 9);
    CHECK(*slots.find(slot_key<int>{"levels"}) == 7);
    slots.erase(slot_key<int>{"levels"});
    CHECK(slots.find(slot_key<int>{"levels"}) == nullptr);
    CHECK(slots.find(slot_key<long>{"levels"}) != nullptr);
}
