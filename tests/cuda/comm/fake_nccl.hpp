#pragma once
// A stand-in for NCCL with NCCL's semantics, in one process, for thread ranks: cuda::nccl's engine runs over it on a
// host without a GPU. What it keeps of NCCL (cuda/nccl/backend.hpp lists what the engine relies on):
//   - one stream per rank: queued work runs in order on a worker thread, one group or collective at a time;
//   - a group's sends and receives progress together and the group ends when all of them have; a send completes
//     only once the peer's matching receive runs (the strictest case: real NCCL may buffer a small message, so a
//     protocol that deadlocks here can deadlock there);
//   - sends and receives are matched in issue order per (sender, receiver); a matched pair of different sizes is
//     recorded as a protocol error (NCCL would corrupt or hang) and fails both ranks' communicators;
//   - collectives are matched by their number on each rank, and must agree on count, type and op; min and max drop
//     NaN as NCCL's fminf/fmaxf do; average is a sum divided by the ranks;
//   - creation and splits complete only when every rank has called them (state() is in_progress until then);
//   - errors are asynchronous (state() fails) and leave work incomplete; abort() releases this rank's work and
//     withdraws its half of any unmatched transfer, so its peers wait (until their deadline) as with a dead NCCL rank.
// Faults to inject per rank: a stream that stalls before its k-th group (a GPU that never arrives), an error at its
// k-th group, and jitter before each command (to shake the interleavings).
//
// "Device memory" is host memory: in all_device mode every pointer is carried (so hitch's schedules over the fake
// move their bytes as NCCL transfers); otherwise only memory from allocate() and fake_nccl_world::device_buffer.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/cuda/nccl/backend.hpp"

namespace hitch_test {

using hitch::dtype;
using hitch::reduce_op;
using hitch::cuda::nccl_backend;
using hitch::cuda::nccl_p2p;
using hitch::cuda::nccl_state;
using hitch::cuda::nccl_ticket;

class fake_nccl_world;

namespace fake_detail {

/// One transfer's half waiting in a channel.
struct endpoint {
    const std::byte* send = nullptr;
    std::byte* recv = nullptr;
    std::size_t bytes = 0;
    int owner = 0;                            // comm rank that issued it
    std::shared_ptr<std::atomic<int>> state;  // 0 pending, 1 done, 2 failed
};

struct collective_arrival {
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t count = 0;
    dtype type = dtype::f32;
    reduce_op op = reduce_op::sum;
};

/// One NCCL communicator shared by its ranks' backends.
struct comm {
    comm(int n, std::vector<int> world) : size(n), world_ranks(std::move(world)) {
        sends.resize(static_cast<std::size_t>(n * n));
        recvs.resize(static_cast<std::size_t>(n * n));
    }
    int size;
    std::vector<int> world_ranks;  // comm rank -> world rank
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    std::vector<std::deque<endpoint>> sends;  // channel src * size + dst
    std::vector<std::deque<endpoint>> recvs;
    std::map<std::uint64_t, std::vector<std::optional<collective_arrival>>> collectives;
    std::map<std::uint64_t, int> collective_state;  // 1 done, 2 failed
    std::map<std::uint64_t, std::vector<std::optional<std::pair<int, int>>>> splits;
    std::map<std::uint64_t, std::map<int, std::shared_ptr<comm>>> split_results;
    std::string protocol_error;

    /// Matches the fronts of every channel (lock held).
    void match_locked() {
        for (std::size_t c = 0; c < sends.size(); ++c) {
            while (!sends[c].empty() && !recvs[c].empty()) {
                endpoint s = sends[c].front();
                endpoint r = recvs[c].front();
                sends[c].pop_front();
                recvs[c].pop_front();
                if (s.bytes != r.bytes) {
                    if (protocol_error.empty())
                        protocol_error = hitch::detail::concat("fake NCCL: a send of ", s.bytes, " bytes from rank ",
                                                               s.owner, " met a receive of ", r.bytes,
                                                               " bytes on rank ", r.owner, " (NCCL would corrupt)");
                    s.state->store(2);
                    r.state->store(2);
                    continue;
                }
                if (s.bytes != 0) std::memcpy(r.recv, s.send, s.bytes);
                s.state->store(1);
                r.state->store(1);
            }
        }
    }

    /// Removes every endpoint `rank` left in the channels (its backend aborted).
    void withdraw_locked(int rank) {
        for (auto* queues : {&sends, &recvs})
            for (auto& q : *queues)
                q.erase(std::remove_if(q.begin(), q.end(), [&](const endpoint& e) { return e.owner == rank; }),
                        q.end());
    }
};

template <class T>
[[nodiscard]] float to_float(T v) {
    return static_cast<float>(v);
}

/// NCCL's reduction of one element pair: min/max drop NaN (fminf/fmaxf), sums in the accumulation type.
template <class A>
[[nodiscard]] A apply_nccl(reduce_op op, A a, A b) {
    switch (op) {
        case reduce_op::sum:
        case reduce_op::average:
            return a + b;
        case reduce_op::min:
            return std::fmin(a, b);
        case reduce_op::max:
            return std::fmax(a, b);
    }
    return a;
}

template <class T>
void reduce_typed(const std::vector<collective_arrival>& all, reduce_op op, std::size_t count) {
    using A = std::conditional_t<std::is_same_v<T, double>, double,
                                 std::conditional_t<std::is_same_v<T, std::uint8_t>, unsigned, float>>;
    std::vector<T> out(count);
    const auto n = static_cast<A>(all.size());
    for (std::size_t i = 0; i < count; ++i) {
        A acc = static_cast<A>(static_cast<const T*>(all[0].send)[i]);
        for (std::size_t r = 1; r < all.size(); ++r) {
            const A v = static_cast<A>(static_cast<const T*>(all[r].send)[i]);
            if constexpr (std::is_same_v<T, std::uint8_t>)
                acc = op == reduce_op::max ? std::max(acc, v) : op == reduce_op::min ? std::min(acc, v) : acc + v;
            else
                acc = apply_nccl(op, acc, v);
        }
        if constexpr (!std::is_same_v<T, std::uint8_t>)
            if (op == reduce_op::average) acc = acc / n;
        out[i] = T(acc);
    }
    for (const auto& a : all)
        if (count != 0) std::memcpy(a.recv, out.data(), count * sizeof(T));
}

}  // namespace fake_detail

/// Faults and modes of a fake world; see the file comment.
struct fake_nccl_options {
    bool all_device = true;
    /// Per world rank: jitter (a random sleep of up to this many microseconds) before each command.
    int jitter_us = 0;
};

/// The ranks' shared state: the root communicator, faults, and which memory counts as device memory.
class fake_nccl_world : public std::enable_shared_from_this<fake_nccl_world> {
public:
    static std::shared_ptr<fake_nccl_world> make(int size, fake_nccl_options options = {}) {
        return std::shared_ptr<fake_nccl_world>(new fake_nccl_world(size, options));
    }

    /// The backend of world rank `rank` on the root communicator (its state is in_progress until every rank has
    /// made its own).
    std::unique_ptr<nccl_backend> connect(int rank);

    /// Rank `rank`'s stream stops before its `group`-th group (0-based, counted over all its communicators).
    void stall_at_group(int rank, int group) {
        std::lock_guard lock(m_);
        faults_[rank].stall_at = group;
    }
    /// Rank `rank`'s communicator fails with `text` at its `group`-th group (an asynchronous NCCL error).
    void fail_at_group(int rank, int group, std::string text) {
        std::lock_guard lock(m_);
        faults_[rank].fail_at = group;
        faults_[rank].fail_text = std::move(text);
    }
    /// Groups rank `rank` has started so far.
    [[nodiscard]] int groups_started(int rank) {
        std::lock_guard lock(m_);
        return faults_[rank].groups;
    }
    /// Collectives (all-reduces) rank `rank` has run so far.
    [[nodiscard]] int collectives_run(int rank) {
        std::lock_guard lock(m_);
        return faults_[rank].collectives;
    }
    /// Bytes rank `rank` has sent in NCCL transfers.
    [[nodiscard]] std::size_t bytes_sent(int rank) {
        std::lock_guard lock(m_);
        return faults_[rank].bytes_sent;
    }

    /// Staging allocations not yet released, over every rank.
    [[nodiscard]] long live_allocations() const noexcept { return live_.load(); }
    void count_allocation(long delta) noexcept { live_ += delta; }

    /// Host memory that counts as device memory (outside all_device mode).
    template <class T>
    std::shared_ptr<T[]> device_buffer(std::size_t n) {
        std::shared_ptr<T[]> p(new T[n == 0 ? 1 : n]());
        add_device(p.get(), (n == 0 ? 1 : n) * sizeof(T));
        return std::shared_ptr<T[]>(p.get(), [self = shared_from_this(), p](T* q) { self->remove_device(q); });
    }

    // ---- used by the backends ----
    struct fault {
        int stall_at = -1;
        int fail_at = -1;
        std::string fail_text;
        int groups = 0;
        int collectives = 0;
        std::size_t bytes_sent = 0;
    };
    [[nodiscard]] bool is_device(const void* p) {
        if (options_.all_device) return p != nullptr;
        std::lock_guard lock(m_);
        const auto x = reinterpret_cast<std::uintptr_t>(p);
        auto it = device_.upper_bound(x);
        if (it == device_.begin()) return false;
        --it;
        return x >= it->first && x < it->first + it->second;
    }
    void add_device(const void* p, std::size_t bytes) {
        std::lock_guard lock(m_);
        device_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
    }
    void remove_device(const void* p) {
        std::lock_guard lock(m_);
        device_.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    /// Called by rank `rank`'s worker before a group: counts it; returns the fault to apply ("" none, "stall",
    /// or the error text).
    [[nodiscard]] std::string next_group(int rank) {
        std::lock_guard lock(m_);
        fault& f = faults_[rank];
        const int k = f.groups++;
        if (k == f.stall_at) return "stall";
        if (k == f.fail_at) return f.fail_text;
        return "";
    }
    void count_collective(int rank) {
        std::lock_guard lock(m_);
        ++faults_[rank].collectives;
    }
    void count_sent(int rank, std::size_t bytes) {
        std::lock_guard lock(m_);
        faults_[rank].bytes_sent += bytes;
    }
    [[nodiscard]] int jitter_us() const noexcept { return options_.jitter_us; }

private:
    fake_nccl_world(int size, fake_nccl_options options) : options_(options) {
        std::vector<int> world(static_cast<std::size_t>(size));
        for (int r = 0; r < size; ++r) world[static_cast<std::size_t>(r)] = r;
        root_ = std::make_shared<fake_detail::comm>(size, std::move(world));
    }

    fake_nccl_options options_;
    std::shared_ptr<fake_detail::comm> root_;
    std::mutex m_;
    std::map<int, fault> faults_;
    std::map<std::uintptr_t, std::size_t> device_;
    std::atomic<long> live_{0};
};

/// One rank's fake NCCL communicator and stream.
class fake_nccl_backend final : public nccl_backend {
public:
    /// Joins `c` as rank `rank` (counted as arrived at once) or, for a split, waits for `pending` to resolve.
    fake_nccl_backend(std::shared_ptr<fake_nccl_world> world, std::shared_ptr<fake_detail::comm> c, int rank,
                      int world_rank)
        : world_(std::move(world)), comm_(std::move(c)), rank_(rank), world_rank_(world_rank) {
        {
            std::lock_guard lock(comm_->m);
            ++comm_->arrived;
        }
        comm_->cv.notify_all();
        start();
    }
    /// A split not resolved yet: the parent comm, the split's number, this rank's color.
    fake_nccl_backend(std::shared_ptr<fake_nccl_world> world, std::shared_ptr<fake_detail::comm> parent,
                      std::uint64_t split, int color, int parent_rank, int world_rank)
        : world_(std::move(world)),
          parent_(std::move(parent)),
          split_(split),
          color_(color),
          parent_rank_(parent_rank),
          world_rank_(world_rank) {
        start();
    }
    ~fake_nccl_backend() override {
        abort();
        if (worker_.joinable()) worker_.join();
    }

    [[nodiscard]] int rank() const override { return rank_; }
    [[nodiscard]] int size() const override { return comm_ ? comm_->size : 0; }
    [[nodiscard]] std::string describe() const override {
        return hitch::detail::concat("fake NCCL, world rank ", world_rank_);
    }
    [[nodiscard]] bool carries(const void* p) const override { return world_->is_device(p); }

    [[nodiscard]] nccl_state state() override {
        if (!resolve()) return {nccl_state::in_progress, {}};
        std::lock_guard lock(m_);
        if (!failed_.empty()) return {nccl_state::failed, failed_};
        {
            std::lock_guard c(comm_->m);
            if (!comm_->protocol_error.empty()) return {nccl_state::failed, comm_->protocol_error};
            if (comm_->arrived < comm_->size) return {nccl_state::in_progress, {}};
        }
        return {nccl_state::ready, {}};
    }

    [[nodiscard]] void* allocate(std::size_t bytes) override {
        void* p = std::malloc(bytes == 0 ? 1 : bytes);
        if (p == nullptr) throw hitch::cuda_error("fake NCCL: out of memory");
        world_->add_device(p, bytes == 0 ? 1 : bytes);
        world_->count_allocation(1);
        return p;
    }
    void release(void* p) override { push(release_cmd{p}); }
    void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) override {
        const auto* b = static_cast<const std::byte*>(host_src);
        push(copy_in_cmd{device_dst, std::vector<std::byte>(b, b + bytes)});
    }
    void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) override {
        push(copy_out_cmd{host_dst, device_src, bytes});
    }
    void group(std::span<const nccl_p2p> ops) override {
        for (const nccl_p2p& op : ops) {
            if (op.bytes == 0) continue;
            if (op.kind == nccl_p2p::send && !world_->is_device(op.send_data))
                throw hitch::comm_error("fake NCCL: ncclSend from memory that is not device memory");
            if (op.kind == nccl_p2p::recv && !world_->is_device(op.recv_data))
                throw hitch::comm_error("fake NCCL: ncclRecv into memory that is not device memory");
        }
        push(group_cmd{std::vector<nccl_p2p>(ops.begin(), ops.end())});
    }
    void allreduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op) override {
        push(fake_detail::collective_arrival{send, recv, count, type, op});
    }
    [[nodiscard]] nccl_ticket record() override {
        const nccl_ticket t = ++last_ticket_;
        push(record_cmd{t});
        return t;
    }
    [[nodiscard]] bool done(nccl_ticket ticket) override { return completed_.load() >= ticket; }

    void abort() noexcept override {
        {
            std::lock_guard lock(m_);
            if (aborted_.load()) return;
            aborted_.store(true);
        }
        cv_.notify_all();
        for (auto* c : {comm_.get(), parent_.get()}) {
            if (c == nullptr) continue;
            {
                std::lock_guard lock(c->m);
                if (c == comm_.get()) c->withdraw_locked(rank_);
            }
            c->cv.notify_all();
        }
    }
    [[nodiscard]] bool close() override {
        std::lock_guard lock(m_);
        if (!queue_.empty() || busy_) return false;
        closed_ = true;
        return true;
    }

    [[nodiscard]] std::unique_ptr<nccl_backend> split(int color, int key) override {
        if (!comm_) throw hitch::comm_error("fake NCCL: split of a communicator not created yet");
        const std::uint64_t number = splits_++;
        {
            std::lock_guard lock(comm_->m);
            auto& entry = comm_->splits[number];
            entry.resize(static_cast<std::size_t>(comm_->size));
            entry[static_cast<std::size_t>(rank_)] = std::pair<int, int>{color, key};
            if (std::all_of(entry.begin(), entry.end(), [](const auto& e) { return e.has_value(); })) {
                std::map<int, std::vector<int>> groups;
                for (int r = 0; r < comm_->size; ++r) groups[entry[static_cast<std::size_t>(r)]->first].push_back(r);
                for (auto& [c, members] : groups) {
                    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
                        return entry[static_cast<std::size_t>(a)]->second < entry[static_cast<std::size_t>(b)]->second;
                    });
                    std::vector<int> world;
                    for (int m : members) world.push_back(comm_->world_ranks[static_cast<std::size_t>(m)]);
                    auto made = std::make_shared<fake_detail::comm>(static_cast<int>(members.size()), world);
                    made->arrived = made->size;
                    comm_->split_results[number][c] = made;
                }
            }
        }
        comm_->cv.notify_all();
        return std::make_unique<fake_nccl_backend>(world_, comm_, number, color, rank_, world_rank_);
    }

private:
    struct release_cmd {
        void* p;
    };
    struct copy_in_cmd {
        void* dst;
        std::vector<std::byte> bytes;
    };
    struct copy_out_cmd {
        void* dst;
        const void* src;
        std::size_t bytes;
    };
    struct group_cmd {
        std::vector<nccl_p2p> ops;
    };
    struct record_cmd {
        nccl_ticket ticket;
    };
    using command =
        std::variant<release_cmd, copy_in_cmd, copy_out_cmd, group_cmd, fake_detail::collective_arrival, record_cmd>;

    void start() {
        worker_ = std::thread([this] { run(); });
    }

    /// A split's comm once every parent rank has called the split; false while pending.
    bool resolve() {
        if (comm_) return true;
        std::lock_guard lock(parent_->m);
        auto it = parent_->split_results.find(split_);
        if (it == parent_->split_results.end()) return false;
        std::shared_ptr<fake_detail::comm> made = it->second.at(color_);
        const int world_rank = world_rank_;
        const auto pos = std::find(made->world_ranks.begin(), made->world_ranks.end(), world_rank);
        {
            std::lock_guard mine(m_);
            rank_ = static_cast<int>(pos - made->world_ranks.begin());
            comm_ = std::move(made);
        }
        cv_.notify_all();
        return true;
    }

    void push(command c) {
        {
            std::lock_guard lock(m_);
            if (closed_) throw hitch::comm_error("fake NCCL: work queued on a closed communicator");
            queue_.push_back(std::move(c));
        }
        cv_.notify_all();
    }

    void run() {
        std::mt19937 random(static_cast<std::uint32_t>(world_rank_ * 7919 + 17));
        for (;;) {
            command c;
            {
                std::unique_lock lock(m_);
                cv_.wait(lock,
                         [&] { return aborted_.load() || (!queue_.empty() && comm_ != nullptr && failed_.empty()); });
                if (aborted_.load()) return;
                c = std::move(queue_.front());
                queue_.pop_front();
                busy_ = true;
            }
            if (world_->jitter_us() > 0)
                std::this_thread::sleep_for(std::chrono::microseconds(random() % world_->jitter_us()));
            if (!execute(c)) return;
            {
                std::lock_guard lock(m_);
                busy_ = false;
            }
        }
    }

    /// Runs one command; false when the worker must stop (aborted, stalled or failed).
    bool execute(command& c) {
        if (auto* g = std::get_if<group_cmd>(&c)) return run_group(*g);
        if (auto* a = std::get_if<fake_detail::collective_arrival>(&c)) return run_collective(*a);
        if (auto* r = std::get_if<release_cmd>(&c)) {
            world_->remove_device(r->p);
            std::free(r->p);
            world_->count_allocation(-1);
        } else if (auto* in = std::get_if<copy_in_cmd>(&c)) {
            if (!in->bytes.empty()) std::memcpy(in->dst, in->bytes.data(), in->bytes.size());
        } else if (auto* out = std::get_if<copy_out_cmd>(&c)) {
            if (out->bytes != 0) std::memcpy(out->dst, out->src, out->bytes);
        } else if (auto* rec = std::get_if<record_cmd>(&c)) {
            completed_.store(rec->ticket);
        }
        return true;
    }

    /// Blocks this worker until the backend is aborted (a stalled stream, or one stopped by an error).
    bool stop_until_abort() {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return aborted_.load(); });
        return false;
    }

    bool run_group(const group_cmd& g) {
        const std::string fault = world_->next_group(world_rank_);
        if (fault == "stall") return stop_until_abort();
        if (!fault.empty()) {
            {
                std::lock_guard lock(m_);
                failed_ = fault;
            }
            return stop_until_abort();
        }
        std::vector<std::shared_ptr<std::atomic<int>>> mine;
        {
            std::lock_guard lock(comm_->m);
            for (const nccl_p2p& op : g.ops) {
                fake_detail::endpoint e;
                e.bytes = op.bytes;
                e.owner = rank_;
                e.state = std::make_shared<std::atomic<int>>(0);
                mine.push_back(e.state);
                if (op.kind == nccl_p2p::send) {
                    e.send = static_cast<const std::byte*>(op.send_data);
                    comm_->sends[static_cast<std::size_t>(rank_ * comm_->size + op.peer)].push_back(e);
                    world_->count_sent(world_rank_, op.bytes);
                } else {
                    e.recv = static_cast<std::byte*>(op.recv_data);
                    comm_->recvs[static_cast<std::size_t>(op.peer * comm_->size + rank_)].push_back(e);
                }
            }
            comm_->match_locked();
        }
        comm_->cv.notify_all();
        std::unique_lock lock(comm_->m);
        for (;;) {
            const bool all = std::all_of(mine.begin(), mine.end(), [](const auto& s) { return s->load() != 0; });
            if (all) break;
            if (is_aborted()) return false;
            comm_->cv.wait_for(lock, std::chrono::milliseconds(5));
        }
        return std::none_of(mine.begin(), mine.end(), [](const auto& s) { return s->load() == 2; }) ||
               stop_after_protocol_error(lock);
    }
    bool stop_after_protocol_error(std::unique_lock<std::mutex>& lock) {
        lock.unlock();
        return stop_until_abort();
    }

    bool run_collective(const fake_detail::collective_arrival& mine) {
        const std::uint64_t number = collectives_++;
        world_->count_collective(world_rank_);
        std::unique_lock lock(comm_->m);
        auto& entry = comm_->collectives[number];
        entry.resize(static_cast<std::size_t>(comm_->size));
        entry[static_cast<std::size_t>(rank_)] = mine;
        if (std::all_of(entry.begin(), entry.end(), [](const auto& e) { return e.has_value(); })) {
            std::vector<fake_detail::collective_arrival> all;
            for (auto& e : entry) all.push_back(*e);
            bool same = true;
            for (const auto& a : all) same = same && a.count == mine.count && a.type == mine.type && a.op == mine.op;
            if (!same) {
                comm_->protocol_error = hitch::detail::concat("fake NCCL: collective #", number,
                                                              " called with different counts, types or ops");
                comm_->collective_state[number] = 2;
            } else {
                switch (mine.type) {
                    case dtype::f32:
                        fake_detail::reduce_typed<float>(all, mine.op, mine.count);
                        break;
                    case dtype::f64:
                        fake_detail::reduce_typed<double>(all, mine.op, mine.count);
                        break;
                    case dtype::f16:
                        fake_detail::reduce_typed<hitch::half>(all, mine.op, mine.count);
                        break;
                    case dtype::bf16:
                        fake_detail::reduce_typed<hitch::bfloat16>(all, mine.op, mine.count);
                        break;
                    case dtype::u8:
                        fake_detail::reduce_typed<std::uint8_t>(all, mine.op, mine.count);
                        break;
                    default:
                        comm_->protocol_error = "fake NCCL: an all-reduce of a type NCCL's reduction does not take";
                        comm_->collective_state[number] = 2;
                        break;
                }
                if (comm_->collective_state.count(number) == 0) comm_->collective_state[number] = 1;
            }
            comm_->cv.notify_all();
        }
        for (;;) {
            if (auto it = comm_->collective_state.find(number); it != comm_->collective_state.end()) {
                if (it->second == 1) return true;
                lock.unlock();
                return stop_until_abort();
            }
            if (is_aborted()) return false;
            comm_->cv.wait_for(lock, std::chrono::milliseconds(5));
        }
    }

    [[nodiscard]] bool is_aborted() const noexcept { return aborted_.load(); }

    std::shared_ptr<fake_nccl_world> world_;
    std::shared_ptr<fake_detail::comm> comm_;
    std::shared_ptr<fake_detail::comm> parent_;
    std::uint64_t split_ = 0;
    int color_ = 0;
    int parent_rank_ = 0;
    int rank_ = 0;
    int world_rank_ = 0;

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<command> queue_;
    bool busy_ = false;
    std::atomic<bool> aborted_{false};  // read without m_ where a comm's lock is held (lock order: m_, then comm)
    bool closed_ = false;
    std::string failed_;
    std::thread worker_;
    std::atomic<nccl_ticket> completed_{0};
    nccl_ticket last_ticket_ = 0;
    std::uint64_t splits_ = 0;
    std::uint64_t collectives_ = 0;
};

inline std::unique_ptr<nccl_backend> fake_nccl_world::connect(int rank) {
    return std::make_unique<fake_nccl_backend>(shared_from_this(), root_, rank, rank);
}

}  // namespace hitch_test
