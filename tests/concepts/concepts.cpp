// The device and communicator concepts against stand-in types: one that models each concept and variants that
// each miss exactly one requirement and must not.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "hitch/comm/local.hpp"
#ifdef HITCH_TEST_HAVE_MPI
#include "hitch/comm/mpi.hpp"
#endif
#include "hitch/concepts/communicator.hpp"
#include "hitch/concepts/device.hpp"
#include "hitch/concepts/sync_policy.hpp"
#include "hitch/core/clock.hpp"
#include "hitch/device/cpu.hpp"

namespace stand_in {

// ---- devices ----
struct good_device {
    static constexpr hitch::memory_space space = hitch::memory_space::host;
    void* allocate_bytes(std::size_t) { return nullptr; }
    void deallocate_bytes(void*, std::size_t) {}
    void copy_to_host(void*, const void*, std::size_t) {}
    void copy_from_host(void*, const void*, std::size_t) {}
    void copy(void*, const void*, std::size_t) {}
    void fill_zero(void*, std::size_t) {}
    void synchronize() {}
    static constexpr std::string_view name = "stand-in";
};
struct device_without_space : good_device {
    static constexpr int space = 0;  // not a memory_space: int does not convert to the enum class
};
struct device_without_allocate {
    static constexpr hitch::memory_space space = hitch::memory_space::host;
    void deallocate_bytes(void*, std::size_t) {}
    void copy_to_host(void*, const void*, std::size_t) {}
    void copy_from_host(void*, const void*, std::size_t) {}
    void copy(void*, const void*, std::size_t) {}
    void fill_zero(void*, std::size_t) {}
    void synchronize() {}
    static constexpr std::string_view name = "x";
};
struct device_without_copy_to_host {
    static constexpr hitch::memory_space space = hitch::memory_space::host;
    void* allocate_bytes(std::size_t) { return nullptr; }
    void deallocate_bytes(void*, std::size_t) {}
    void copy_from_host(void*, const void*, std::size_t) {}
    void copy(void*, const void*, std::size_t) {}
    void fill_zero(void*, std::size_t) {}
    void synchronize() {}
    static constexpr std::string_view name = "x";
};
struct device_without_synchronize {
    static constexpr hitch::memory_space space = hitch::memory_space::host;
    void* allocate_bytes(std::size_t) { return nullptr; }
    void deallocate_bytes(void*, std::size_t) {}
    void copy_to_host(void*, const void*, std::size_t) {}
    void copy_from_host(void*, const void*, std::size_t) {}
    void copy(void*, const void*, std::size_t) {}
    void fill_zero(void*, std::size_t) {}
    static constexpr std::string_view name = "x";
};

// ---- requests and communicators ----
struct good_request {
    bool test() { return true; }
    void wait() {}
    void wait(const hitch::deadline&) {}
    hitch::message_info status() const { return {}; }
    std::string describe() const { return {}; }
};
struct request_without_test {
    void wait() {}
    void wait(const hitch::deadline&) {}
    hitch::message_info status() const { return {}; }
    std::string describe() const { return {}; }
};

template <class Request>
struct comm_base {
    using request = Request;
    int rank() const { return 0; }
    int size() const { return 1; }
    template <class T>
    request isend(std::span<const T>, int, int) {
        return {};
    }
    template <class T>
    request irecv(std::span<T>, int, int) {
        return {};
    }
    hitch::message_info probe(int, int) { return {}; }
    int max_tag() const { return 100; }
    hitch::seconds_f timeout() const { return hitch::seconds_f(1); }
    void set_timeout(hitch::seconds_f) {}
    static constexpr std::string_view name = "stand-in";
};

struct good_comm : comm_base<good_request> {
    void barrier() {}
    good_comm split(int, int) { return {}; }
};
struct comm_with_bad_request : comm_base<request_without_test> {
    void barrier() {}
    comm_with_bad_request split(int, int) { return {}; }
};
struct comm_without_barrier : comm_base<good_request> {
    comm_without_barrier split(int, int) { return {}; }
};
struct comm_without_split : comm_base<good_request> {
    void barrier() {}
};
struct comm_split_returns_other_type : comm_base<good_request> {
    void barrier() {}
    good_comm split(int, int) { return {}; }
};
struct comm_without_deadline {
    using request = good_request;
    int rank() const { return 0; }
    int size() const { return 1; }
    template <class T>
    request isend(std::span<const T>, int, int) {
        return {};
    }
    template <class T>
    request irecv(std::span<T>, int, int) {
        return {};
    }
    hitch::message_info probe(int, int) { return {}; }
    int max_tag() const { return 100; }
    static constexpr std::string_view name = "x";
    void barrier() {}
    comm_without_deadline split(int, int) { return {}; }
};
struct comm_without_rank {
    using request = good_request;
    int size() const { return 1; }
};

/// A clock that stands still until told to move: what a simulated cluster's virtual time looks like.
struct manual_clock final : hitch::clock_source {
    time_point now() const noexcept override { return at; }
    time_point at{};
};
struct comm_with_clock : good_comm {
    const hitch::clock_source& clock() const { return *source; }
    const manual_clock* source = nullptr;
};

struct good_context : hitch::step_context_archetype {};
struct context_without_rank {
    bool finish_gradient_exchange() { return true; }
    bool check_local_gradients() { return true; }
    void apply_optimizer() {}
    void average_parameters(bool) {}
    std::uint64_t step_index() const { return 0; }
    int size() const { return 1; }
};
}  // namespace stand_in

TEST_CASE("device concept: models and near-misses", "[concepts]") {
    STATIC_REQUIRE(hitch::device<hitch::cpu>);
    STATIC_REQUIRE(hitch::device<stand_in::good_device>);
    STATIC_REQUIRE(hitch::check_device<stand_in::good_device>());
    STATIC_REQUIRE(hitch::device<hitch::host_device_archetype>);
    STATIC_REQUIRE(hitch::host_device<hitch::cpu>);
    STATIC_REQUIRE(hitch::cpu::name == "cpu");
    STATIC_REQUIRE_FALSE(hitch::device_has_memory_space<stand_in::device_without_space>);
    STATIC_REQUIRE_FALSE(hitch::device<stand_in::device_without_space>);
    STATIC_REQUIRE_FALSE(hitch::device_has_allocation<stand_in::device_without_allocate>);
    STATIC_REQUIRE_FALSE(hitch::device<stand_in::device_without_allocate>);
    STATIC_REQUIRE_FALSE(hitch::device_has_copies<stand_in::device_without_copy_to_host>);
    STATIC_REQUIRE_FALSE(hitch::device<stand_in::device_without_copy_to_host>);
    STATIC_REQUIRE_FALSE(hitch::device_has_synchronize<stand_in::device_without_synchronize>);
    STATIC_REQUIRE_FALSE(hitch::device<stand_in::device_without_synchronize>);
    STATIC_REQUIRE_FALSE(hitch::device<int>);
}

TEST_CASE("communicator concept: models and near-misses", "[concepts]") {
    STATIC_REQUIRE(hitch::communicator<hitch::comm::local>);
#ifdef HITCH_TEST_HAVE_MPI
    STATIC_REQUIRE(hitch::communicator<hitch::comm::mpi>);
#endif
    STATIC_REQUIRE(hitch::request<hitch::comm::local::request>);
    STATIC_REQUIRE(hitch::communicator<stand_in::good_comm>);
    STATIC_REQUIRE(hitch::check_communicator<stand_in::good_comm>());
    STATIC_REQUIRE(hitch::request<stand_in::good_request>);
    STATIC_REQUIRE_FALSE(hitch::request<stand_in::request_without_test>);
    STATIC_REQUIRE_FALSE(hitch::communicator_has_point_to_point<stand_in::comm_with_bad_request>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_with_bad_request>);
    STATIC_REQUIRE_FALSE(hitch::communicator_has_barrier<stand_in::comm_without_barrier>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_without_barrier>);
    STATIC_REQUIRE_FALSE(hitch::communicator_has_split<stand_in::comm_without_split>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_without_split>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_split_returns_other_type>);
    STATIC_REQUIRE_FALSE(hitch::communicator_has_deadline<stand_in::comm_without_deadline>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_without_deadline>);
    STATIC_REQUIRE_FALSE(hitch::communicator_has_rank_and_size<stand_in::comm_without_rank>);
    STATIC_REQUIRE_FALSE(hitch::communicator<stand_in::comm_without_rank>);
    STATIC_REQUIRE_FALSE(hitch::communicator<int>);
}

TEST_CASE("deadline_for: a communicator's own clock, else the steady clock", "[concepts]") {
    STATIC_REQUIRE_FALSE(hitch::has_clock<stand_in::good_comm>);
    STATIC_REQUIRE(hitch::has_clock<stand_in::comm_with_clock>);
    stand_in::manual_clock virtual_time;
    stand_in::comm_with_clock c;
    c.source = &virtual_time;
    const hitch::deadline limit = hitch::deadline_for(c, hitch::seconds_f(1.0));
    CHECK_FALSE(limit.expired());
    virtual_time.at += std::chrono::seconds(2);  // only virtual time passes
    CHECK(limit.expired());
    const hitch::deadline steady = hitch::deadline_for(stand_in::good_comm{}, hitch::seconds_f(60.0));
    CHECK_FALSE(steady.expired());
    CHECK(hitch::default_clock().now() <= steady.when());
}

TEST_CASE("step_context: what a sync policy may use", "[concepts]") {
    STATIC_REQUIRE(hitch::step_context<hitch::step_context_archetype>);
    STATIC_REQUIRE(hitch::step_context<stand_in::good_context>);
    STATIC_REQUIRE_FALSE(hitch::step_context<stand_in::context_without_rank>);
}
