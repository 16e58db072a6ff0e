// A schedule with a state of its own (train::stateful_schedule) is saved in a checkpoint and restored by load, so a
// resumed run continues where the saved one stopped; a checkpoint without that section keeps the current state.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "../comm/suite.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/train/data_parallel.hpp"
#include "hitch/train/stateful_schedule.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

/// allreduce::ring that counts its runs; the count is its state, and each run reports it to `probe`. Collectives
/// run a copy of the schedule, so the count lives behind a pointer that copies share; load_state gives the
/// schedule a new one, leaving other copies alone (data_parallel loads into a copy and keeps it only once the whole
/// checkpoint is valid).
class counting_ring : public hitch::allreduce::ring {
public:
    static constexpr std::string_view name = "counting_ring";
    using ring::ring;

    template <class Transport, class T>
    void run(Transport& t, std::span<T> data, hitch::allreduce::reduce_op op) const {
        const std::uint64_t n = ++*runs_;
        if (probe != nullptr) probe->store(n);
        ring::run(t, data, op);
    }

    void save_state(std::vector<std::byte>& blob) const {
        const std::uint64_t n = runs_->load();
        const auto* p = reinterpret_cast<const std::byte*>(&n);
        blob.insert(blob.end(), p, p + sizeof(n));
    }
    void load_state(std::span<const std::byte> bytes) {
        std::uint64_t n = 0;
        if (bytes.size() != sizeof(n)) throw hitch::corrupt_message_error("counting_ring: bad state");
        std::memcpy(&n, bytes.data(), sizeof(n));
        runs_ = std::make_shared<std::atomic<std::uint64_t>>(n);
    }

    std::atomic<std::uint64_t>* probe = nullptr;
    std::shared_ptr<std::atomic<std::uint64_t>> runs_ = std::make_shared<std::atomic<std::uint64_t>>(0);
};

static_assert(hitch::train::stateful_schedule<counting_ring>);
static_assert(!hitch::train::stateful_schedule<hitch::allreduce::ring>);

std::filesystem::path scratch_dir() {
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-schedule-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir;
}

template <class Schedule>
using dp_t = hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::hard, Schedule>;

/// Runs steps [from, to) of a one-layer model (one bucket: one schedule run per step), loading `load` first and
/// saving to `save` at the end when given; returns the last count the schedule reported on this rank.
template <class Schedule>
std::uint64_t train(local& comm, Schedule schedule, int from, int to, const std::filesystem::path& load,
                    const std::filesystem::path& save) {
    std::vector<float> w(64, 1.0f), g(64, 0.0f);
    hitch::cpu dev;
    std::atomic<std::uint64_t> probe{0};
    if constexpr (std::is_same_v<Schedule, counting_ring>) schedule.probe = &probe;
    typename dp_t<Schedule>::options o;
    o.schedule = schedule;
    dp_t<Schedule> dp(comm, dev, {{"w", hitch::view(w), hitch::view(g)}}, o);
    if (!load.empty()) (void)dp.load(load);
    for (int s = from; s < to; ++s) {
        for (std::size_t i = 0; i < g.size(); ++i)
            g[i] = static_cast<float>((comm.rank() + s + static_cast<int>(i)) % 5);
        dp.step();
    }
    if (!save.empty()) dp.save(save);
    return probe.load();
}

}  // namespace

TEST_CASE("a stateful schedule's state is saved in the checkpoint and restored by load",
          "[train][data_parallel][checkpoint]") {
    const auto dir = scratch_dir();
    const int n = 3;
    const auto straight = run_local(2, [&](local& comm) { return train(comm, counting_ring{}, 0, 2 * n, {}, {}); });
    (void)run_local(2, [&](local& comm) { return train(comm, counting_ring{}, 0, n, {}, dir / "ckpt"); });
    const auto resumed =
        run_local(2, [&](local& comm) { return train(comm, counting_ring{}, n, 2 * n, dir / "ckpt", {}); });
    CHECK(straight == std::vector<std::uint64_t>{2 * n, 2 * n});
    CHECK(resumed == straight);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a checkpoint without the schedule's section keeps the schedule's current state",
          "[train][data_parallel][checkpoint]") {
    const auto dir = scratch_dir();
    (void)run_local(2, [&](local& comm) { return train(comm, hitch::allreduce::ring{}, 0, 2, {}, dir / "old"); });
    const auto counts = run_local(2, [&](local& comm) {
        counting_ring s;
        s.runs_->store(100);
        const auto count = train(comm, s, 2, 3, dir / "old", {});
        expect(count == 101, "the state from before load kept");
        return count;
    });
    CHECK(counts == std::vector<std::uint64_t>{101, 101});
    std::filesystem::remove_all(dir);
}
