#pragma once
// hitch::comm::mpi: the communicator interface over MPI: requests, probes, splits, the node layout and node memory
// (the matching of receives is in comm/detail/mpi_receiver.hpp, the emulated nodes in comm/detail/node_emulation.hpp).
//
// The user's communicator is duplicated at construction, so hitch's traffic never mixes with the user's; errors
// are returned (MPI_ERRORS_RETURN), not fatal, and become comm_error with MPI's error string. Blocking calls poll
// non-blocking MPI operations against a deadline and cancel them on expiry.
//
//   hitch::comm::mpi_environment env(argc, argv);   // MPI_Init_thread, or nothing if MPI is already initialised
//   hitch::comm::mpi comm;                          // a duplicate of MPI_COMM_WORLD
//
// The node layout (which ranks share a machine) is learnt once, at construction, from MPI_COMM_TYPE_SHARED; with
// node emulation (mpi_options::emulate_nodes or HITCH_EMULATE_NODES=k) each real node is further cut into the k
// blocks of consecutive world ranks, and everything node-aware (node_layout, map_node_memory, the count of bytes
// sent across nodes) treats those blocks as separate machines. A split() keeps each rank's node.

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "hitch/comm/detail/barrier.hpp"
#include "hitch/comm/detail/mpi_receiver.hpp"
#include "hitch/comm/detail/mpi_watchdog.hpp"
#include "hitch/comm/detail/node_emulation.hpp"
#include "hitch/comm/detail/node_memory.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/node_layout.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

struct mpi_options {
    /// Deadline of every blocking call, in seconds (default: HITCH_TIMEOUT_S, else 300).
    double timeout_s = timeout_from_environment().count();
    /// Emulated nodes: k > 0 cuts the world's ranks into k nodes of consecutive ranks (sizes as even as possible,
    /// the larger first), treated as separate machines. 0: HITCH_EMULATE_NODES when set, else the real layout.
    int emulate_nodes = 0;
    /// The most bytes of shared memory one map_node_memory may take (all ranks' parts together); beyond it the
    /// mapping is refused and the staged path's callers use messages. 0: no limit beyond the system's (a /dev/shm
    /// too small is refused the same way). Default: HITCH_SHM_LIMIT_BYTES, else 0.
    std::size_t shm_limit_bytes = detail::shm_limit_from_environment();

    void validate() const {
        option_validator("hitch::comm::mpi_options")
            .open_closed("timeout_s", timeout_s, 0.0, 1e9)
            .at_least("emulate_nodes", emulate_nodes, 0);
    }
};

/// RAII for MPI_Init_thread / MPI_Finalize. A no-op when MPI was already initialised by the user (then the user
/// finalises it). Asks for MPI_THREAD_MULTIPLE, which hitch's non-blocking collectives need.
class mpi_environment {
public:
    mpi_environment() : mpi_environment(nullptr, nullptr) {}
    mpi_environment(int& argc, char**& argv, int required = MPI_THREAD_MULTIPLE)
        : mpi_environment(&argc, &argv, required) {}
    mpi_environment(const mpi_environment&) = delete;
    mpi_environment& operator=(const mpi_environment&) = delete;
    /// MPI_Finalize, under a watch: a rank that died leaves the others in it forever, so past finalize_timeout()
    /// (HITCH_TIMEOUT_S, or a quarter of it once a deadline has passed on this process) it says so and exits 1.
    ~mpi_environment() {
        if (!owns_ || !detail::mpi_usable()) return;
        const detail::mpi_watchdog::watch watch("MPI_Finalize", detail::finalize_timeout(),
                                                detail::mpi_watchdog::ending::exit_process);
        MPI_Finalize();
    }

    /// The thread support level MPI provides (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE).
    [[nodiscard]] int thread_level() const noexcept { return provided_; }
    /// True when this object initialised MPI and will finalise it.
    [[nodiscard]] bool owns() const noexcept { return owns_; }

private:
    mpi_environment(int* argc, char*** argv, int required = MPI_THREAD_MULTIPLE) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (initialized != 0) {
            MPI_Query_thread(&provided_);
            return;
        }
        detail::mpi_check(MPI_Init_thread(argc, argv, required, &provided_), "MPI_Init_thread");
        owns_ = true;
    }
    bool owns_ = false;
    int provided_ = MPI_THREAD_SINGLE;
};

/// Communicator over an MPI communicator (duplicated). Move-only.
class mpi {
public:
    class request {
    public:
        request() = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        request(request&& other) noexcept { *this = std::move(other); }
        request& operator=(request&& other) noexcept {
            if (this != &other) {
                abandon();
                send_req_ = std::exchange(other.send_req_, MPI_REQUEST_NULL);
                slot_ = std::move(other.slot_);
                receiver_ = std::move(other.receiver_);
                send_ = other.send_;
                peer_ = other.peer_;
                tag_ = other.tag_;
                rank_ = other.rank_;
                bytes_ = other.bytes_;
                timeout_ = other.timeout_;
                error_ = std::move(other.error_);
            }
            return *this;
        }
        ~request() { abandon(); }

        /// True once complete; throws comm_error if the operation failed (a message of the wrong size, MPI errors).
        bool test() {
            if (!error_.empty()) throw comm_error(error_);
            if (send_) {
                if (send_req_ == MPI_REQUEST_NULL) return true;
                int flag = 0;
                const int code = MPI_Test(&send_req_, &flag, MPI_STATUS_IGNORE);
                if (code != MPI_SUCCESS) {
                    send_req_ = MPI_REQUEST_NULL;
                    error_ =
                        detail::concat("hitch::comm::mpi: ", describe(), " failed: ", detail::mpi_error_string(code));
                    throw comm_error(error_);
                }
                return flag != 0;
            }
            if (!slot_) return true;
            if (!receiver_->progress(*slot_)) return false;
            if (slot_->state == detail::mpi_recv_slot::failed) {
                error_ = slot_->error;
                throw comm_error(error_);
            }
            return true;
        }
        void wait() { wait(deadline(timeout_)); }
        void wait(const deadline& limit) {
            if (poll_until(limit, [&] { return test(); })) return;
            abandon();
            if (!send_ && slot_ && slot_->state == detail::mpi_recv_slot::done) return;  // arrived while cancelling
            detail::mpi_trouble().store(true);
            throw timeout_error(operation(), where(), limit.waited());
        }
        [[nodiscard]] message_info status() const {
            if (send_) return {peer_, tag_, bytes_};
            return slot_ ? slot_->info : message_info{};
        }
        [[nodiscard]] std::string describe() const { return operation() + " (" + where() + ")"; }

    private:
        friend class mpi;
        request(MPI_Request r, int peer, int tag, int rank, std::size_t bytes, seconds_f timeout)
            : send_req_(r), send_(true), peer_(peer), tag_(tag), rank_(rank), bytes_(bytes), timeout_(timeout) {}
        request(std::shared_ptr<detail::mpi_recv_slot> slot, std::shared_ptr<detail::mpi_receiver> receiver, int rank,
                seconds_f timeout)
            : slot_(std::move(slot)),
              receiver_(std::move(receiver)),
              send_(false),
              peer_(slot_->peer),
              tag_(slot_->tag),
              rank_(rank),
              bytes_(slot_->bytes),
              timeout_(timeout) {}

        [[nodiscard]] std::string operation() const { return send_ ? "comm::mpi send" : "comm::mpi recv"; }
        [[nodiscard]] std::string where() const {
            const std::string peer = peer_ == any_source ? std::string("any rank") : detail::concat("rank ", peer_);
            return detail::concat(send_ ? "to " : "from ", peer, ", tag ", tag_, ", ", bytes_, " bytes, on rank ",
                                  rank_);
        }
        /// Cancels what is still pending. A send MPI cannot cancel within a second is left to complete on its own
        /// (MPI_Request_free), so nothing here blocks for long.
        void abandon() noexcept {
            if (!detail::mpi_usable()) return;
            if (slot_ && receiver_ && slot_->state < detail::mpi_recv_slot::done) receiver_->cancel(*slot_);
            if (send_req_ == MPI_REQUEST_NULL) return;
            MPI_Cancel(&send_req_);
            const deadline grace(seconds_f(1.0));
            int flag = 0;
            while (!grace.expired()) {
                if (MPI_Test(&send_req_, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0) {
                    send_req_ = MPI_REQUEST_NULL;
                    return;
                }
                std::this_thread::yield();
            }
            MPI_Request_free(&send_req_);
            send_req_ = MPI_REQUEST_NULL;
        }

        MPI_Request send_req_ = MPI_REQUEST_NULL;
        std::shared_ptr<detail::mpi_recv_slot> slot_;
        std::shared_ptr<detail::mpi_receiver> receiver_;
        bool send_ = false;
        int peer_ = 0;
        int tag_ = 0;
        int rank_ = 0;
        std::size_t bytes_ = 0;
        seconds_f timeout_{};
        std::string error_;
    };

    /// Duplicates `parent` (MPI_COMM_WORLD by default) for hitch's traffic.
    explicit mpi(MPI_Comm parent = MPI_COMM_WORLD, const mpi_options& options = {}) {
        options.validate();
        if (!detail::mpi_usable())
            throw comm_error("hitch::comm::mpi: MPI is not initialised (create a hitch::comm::mpi_environment first)");
        int world_size = 0;
        int world_rank = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &world_size);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        const int emulated = detail::resolve_emulated_nodes(options.emulate_nodes, world_size);
        // Every rank of `parent` must come: the duplicate is made without blocking and waited for with a deadline.
        MPI_Comm dup = MPI_COMM_NULL;
        MPI_Request pending = MPI_REQUEST_NULL;
        detail::mpi_check(MPI_Comm_idup(parent, &dup, &pending), "MPI_Comm_idup");
        detail::mpi_wait_collective(pending, deadline(seconds_f(options.timeout_s)),
                                    "hitch::comm::mpi's construction (MPI_Comm_idup of the parent communicator)",
                                    world_rank);
        adopt(dup, seconds_f(options.timeout_s));
        detail::node_key key;
        key.real = real_node_of(world_rank);
        if (emulated > 0) key.emulated = detail::emulated_node(world_rank, world_size, emulated);
        learn_layout(key);
        traffic_ = std::make_shared<detail::traffic_counter>();
        shm_limit_ = options.shm_limit_bytes;
    }
    mpi(const mpi&) = delete;
    mpi& operator=(const mpi&) = delete;
    mpi(mpi&& other) noexcept { *this = std::move(other); }
    mpi& operator=(mpi&& other) noexcept {
        if (this != &other) {
            release();
            comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
            internal_ = std::exchange(other.internal_, MPI_COMM_NULL);
            receiver_ = std::move(other.receiver_);
            rank_ = other.rank_;
            size_ = other.size_;
            max_tag_ = other.max_tag_;
            timeout_ = other.timeout_;
            barriers_ = other.barriers_;
            key_ = other.key_;
            layout_ = std::move(other.layout_);
            traffic_ = std::move(other.traffic_);
            shm_limit_ = other.shm_limit_;
            refusal_ = std::move(other.refusal_);
        }
        return *this;
    }
    ~mpi() { release(); }

    [[nodiscard]] int rank() const noexcept { return rank_; }
    [[nodiscard]] int size() const noexcept { return size_; }
    [[nodiscard]] int max_tag() const noexcept { return max_tag_; }
    static constexpr std::string_view name = "comm::mpi";
    [[nodiscard]] seconds_f timeout() const noexcept { return timeout_; }
    void set_timeout(seconds_f t) {
        option_validator("hitch::comm::mpi::set_timeout").open_closed("timeout_s", t.count(), 0.0, 1e9);
        timeout_ = t;
    }
    /// The duplicated MPI communicator that carries this object's user-visible traffic (for MPI's own
    /// collectives, e.g. allreduce::native).
    [[nodiscard]] MPI_Comm native_handle() const noexcept { return comm_; }
    static constexpr bool shares_address_space = false;

    template <element_type T>
    [[nodiscard]] request isend(std::span<const T> data, int peer, int tag) {
        return post_send(std::as_bytes(data), peer, tag, comm_);
    }
    template <element_type T>
    [[nodiscard]] request isend(std::span<T> data, int peer, int tag) {
        return isend(std::span<const T>(data), peer, tag);
    }
    template <element_type T>
    [[nodiscard]] request irecv(std::span<T> data, int peer, int tag) {
        static_assert(!std::is_const_v<T>, "hitch::comm::mpi::irecv needs a writable span");
        return post_recv(std::as_writable_bytes(data), peer, tag, comm_);
    }
    template <element_type T>
    void send(std::span<const T> data, int peer, int tag) {
        isend(data, peer, tag).wait();
    }
    template <element_type T>
    void send(std::span<T> data, int peer, int tag) {
        isend(std::span<const T>(data), peer, tag).wait();
    }
    template <element_type T>
    message_info recv(std::span<T> data, int peer, int tag) {
        auto r = irecv(data, peer, tag);
        r.wait();
        return r.status();
    }

    [[nodiscard]] message_info probe(int peer, int tag) {
        check_peer(peer, true, "probe");
        check_tag(tag, "probe");
        const deadline limit(timeout_);
        std::optional<message_info> found;
        if (poll_until(limit, [&] { return (found = iprobe(peer, tag)).has_value(); })) return *found;
        throw timeout_error(
            "comm::mpi probe",
            detail::concat("from ", peer == any_source ? std::string("any rank") : detail::concat("rank ", peer),
                           ", tag ", tag, ", on rank ", rank_),
            limit.waited());
    }
    [[nodiscard]] std::optional<message_info> iprobe(int peer, int tag) {
        check_peer(peer, true, "iprobe");
        check_tag(tag, "iprobe");
        receiver_->match();  // messages that pending receives will take are not visible to a probe
        int flag = 0;
        MPI_Status status{};
        detail::mpi_check(MPI_Iprobe(peer == any_source ? MPI_ANY_SOURCE : peer, tag, comm_, &flag, &status),
                          "MPI_Iprobe");
        if (flag == 0) return std::nullopt;
        MPI_Count count = 0;
        MPI_Get_count_c(&status, MPI_BYTE, &count);
        return message_info{status.MPI_SOURCE, status.MPI_TAG, static_cast<std::size_t>(count)};
    }

    void barrier() {
        detail::dissemination_barrier(
            rank_, size_, barriers_++, timeout_, name,
            [&](int to, int round) { return post_send({}, to, round, internal_); },
            [&](int from, int round) { return post_recv({}, from, round, internal_); });
    }

    /// Ranks with the same color (>= 0) form a new communicator, ordered by (key, rank). Every rank must arrive
    /// within the deadline (checked with a barrier first, so MPI_Comm_split itself cannot hang).
    [[nodiscard]] mpi split(int color, int key) {
        option_validator("hitch::comm::mpi::split").at_least("color", color, 0);
        barrier();
        MPI_Comm part = MPI_COMM_NULL;
        {
            const detail::mpi_watchdog::watch watch("hitch::comm::mpi::split (MPI_Comm_split)", timeout_);
            detail::mpi_check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
        }
        mpi out(part, timeout_);
        out.learn_layout(key_);  // each rank keeps its node, emulated or real
        out.traffic_ = traffic_;
        out.shm_limit_ = shm_limit_;
        return out;
    }

    /// The node each rank runs on (ranks that MPI_COMM_TYPE_SHARED puts together, cut further into the emulated
    /// nodes under emulation), nodes numbered in the order of their lowest rank; the same on every rank. Learnt at
    /// construction: not collective.
    [[nodiscard]] const hitch::node_layout& node_layout() const noexcept { return layout_; }

    /// What this rank has sent to ranks on other nodes (real or emulated) through this communicator and every
    /// communicator split from it or from the one it was split from (a group's, a schedule's levels): payload
    /// bytes and messages, hitch's own zero-byte barrier messages not counted.
    [[nodiscard]] cross_node_traffic traffic_across_nodes() const noexcept { return traffic_->read(); }
    /// Starts the count of traffic_across_nodes() again from zero (for every communicator that shares it).
    void reset_traffic_across_nodes() noexcept { traffic_->reset(); }

    /// Collective: memory every rank can read and write, `bytes_per_rank` bytes for each (node_memory::part(r)),
    /// when all ranks run on one node (one emulated node under emulation); nullptr when they do not, or when any
    /// rank's system refuses the mapping (then every rank gets nullptr: the answer is agreed, and
    /// node_memory_refusal() says why on every rank). Every rank must arrive within the deadline. For a
    /// communicator over several nodes, map over a split() per node. Rank 0 first removes what killed jobs left in
    /// /dev/shm (node_memory::remove_stale); the mapping itself is never left there.
    [[nodiscard]] std::shared_ptr<node_memory> map_node_memory(std::size_t bytes_per_rank) {
        barrier();  // everyone is here: the MPI calls below cannot wait for an absent rank
        refusal_.clear();
        if (!layout_.single_node()) return nullptr;  // the same answer on every rank
        char shm_name[64] = {};
        std::string created;
        std::string why;
        std::unique_ptr<node_memory> mine;
        if (rank_ == 0) {
            (void)node_memory::remove_stale();
            created = node_memory::new_name();
            std::snprintf(shm_name, sizeof shm_name, "%s", created.c_str());
            mine.reset(node_memory::create(created, size_, bytes_per_rank, why, shm_limit_));
        }
        struct in_flight {
            const std::string& name;
            ~in_flight() {
                if (!name.empty()) node_memory::finished_with(name);
            }
        } forget{created};
        const detail::mpi_watchdog::watch watch("hitch::comm::mpi::map_node_memory (MPI_Allreduce, MPI_Bcast)",
                                                timeout_);
        if (!agreed_mapping(rank_ != 0 || mine != nullptr, why)) return nullptr;
        detail::mpi_check(MPI_Bcast(shm_name, sizeof shm_name, MPI_CHAR, 0, comm_), "MPI_Bcast");
        if (rank_ != 0) mine.reset(node_memory::open(shm_name, size_, bytes_per_rank, why));
        const bool everywhere = agreed_mapping(mine != nullptr, why, [&] {
            if (rank_ == 0) ::shm_unlink(shm_name);  // mapped everywhere (or given up): the name is no longer needed
        });
        if (!everywhere) return nullptr;
        return std::shared_ptr<node_memory>(mine.release());
    }
    /// Why the last map_node_memory() gave nullptr although the ranks share a node ("rank R: <reason>"), the same
    /// on every rank; empty when it succeeded or the ranks span nodes.
    [[nodiscard]] const std::string& node_memory_refusal() const noexcept { return refusal_; }

private:
    mpi(MPI_Comm adopted, seconds_f timeout) { adopt(adopted, timeout); }

    /// Collective: true when `ok` on every rank; otherwise the lowest rank that failed tells every rank `why`
    /// (kept in refusal_). `then` runs between the agreement and the telling (rank 0 unlinks the name there).
    template <class Then = void (*)()>
    bool agreed_mapping(bool ok, const std::string& why, Then then = [] {}) {
        int first_failed = ok ? size_ : rank_;
        const int code = MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm_);
        then();
        detail::mpi_check(code, "MPI_Allreduce");
        if (first_failed == size_) return true;
        char text[512] = {};
        if (rank_ == first_failed) std::snprintf(text, sizeof text, "%s", why.c_str());
        detail::mpi_check(MPI_Bcast(text, sizeof text, MPI_CHAR, first_failed, comm_), "MPI_Bcast");
        refusal_ = detail::concat("rank ", first_failed, ": ", text);
        return false;
    }

    /// Collective: the lowest world rank among the ranks of this communicator on this rank's machine.
    [[nodiscard]] int real_node_of(int world_rank) const {
        const detail::mpi_watchdog::watch watch("hitch::comm::mpi's node layout (MPI_Comm_split_type)", timeout_);
        MPI_Comm node = MPI_COMM_NULL;
        detail::mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
                          "MPI_Comm_split_type");
        int lowest = world_rank;
        const int code = MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, node);
        MPI_Comm_free(&node);
        detail::mpi_check(code, "MPI_Allreduce");
        return lowest;
    }
    /// Collective: every rank's key, so the layout is known without another collective later (isend consults it).
    void learn_layout(const detail::node_key& mine) {
        key_ = mine;
        std::vector<detail::node_key> keys(static_cast<std::size_t>(size_));
        static_assert(sizeof(detail::node_key) == 2 * sizeof(int));
        MPI_Request pending = MPI_REQUEST_NULL;
        detail::mpi_check(MPI_Iallgather(&key_, 2, MPI_INT, keys.data(), 2, MPI_INT, comm_, &pending),
                          "MPI_Iallgather");
        detail::mpi_wait_collective(pending, deadline(timeout_), "hitch::comm::mpi's node layout (MPI_Iallgather)",
                                    rank_);
        layout_ = detail::layout_from_keys(keys);
    }

    void adopt(MPI_Comm comm, seconds_f timeout) {
        comm_ = comm;
        timeout_ = timeout;
        detail::mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        MPI_Request pending = MPI_REQUEST_NULL;
        detail::mpi_check(MPI_Comm_idup(comm_, &internal_, &pending), "MPI_Comm_idup");
        int me = 0;
        MPI_Comm_rank(comm_, &me);
        detail::mpi_wait_collective(pending, deadline(timeout), "hitch::comm::mpi (MPI_Comm_idup)", me);
        detail::mpi_check(MPI_Comm_set_errhandler(internal_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        detail::mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        detail::mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
        void* value = nullptr;
        int flag = 0;
        MPI_Comm_get_attr(comm_, MPI_TAG_UB, &value, &flag);
        max_tag_ = flag != 0 ? *static_cast<int*>(value) : 32767;
        receiver_ = std::make_shared<detail::mpi_receiver>(rank_);
    }
    void release() noexcept {
        if (!detail::mpi_usable()) return;
        if (internal_ != MPI_COMM_NULL) MPI_Comm_free(&internal_);
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    }

    void check_peer(int peer, bool any_ok, const char* op) const {
        if (any_ok && peer == any_source) return;
        if (peer < 0 || peer >= size_)
            throw config_error(detail::concat("hitch::comm::mpi::", op, ": peer ", peer,
                                              " is outside the allowed range [0, ", size_, ")",
                                              any_ok ? " (or hitch::any_source)" : ""));
    }
    void check_tag(int tag, const char* op) const {
        if (tag < 0 || tag > max_tag_)
            throw config_error(detail::concat("hitch::comm::mpi::", op, ": tag ", tag,
                                              " is outside the allowed range [0, ", max_tag_, "]"));
    }

    request post_send(std::span<const std::byte> data, int peer, int tag, MPI_Comm comm) {
        check_peer(peer, false, "isend");
        check_tag(tag, "isend");
        if (comm == comm_ && layout_.node_of_rank[static_cast<std::size_t>(peer)] !=
                                 layout_.node_of_rank[static_cast<std::size_t>(rank_)])
            traffic_->add(data.size());
        MPI_Request r = MPI_REQUEST_NULL;
        detail::mpi_check(MPI_Isend_c(data.data(), static_cast<MPI_Count>(data.size()), MPI_BYTE, peer, tag, comm, &r),
                          "MPI_Isend");
        return request(r, peer, tag, rank_, data.size(), timeout_);
    }
    request post_recv(std::span<std::byte> data, int peer, int tag, MPI_Comm comm) {
        check_peer(peer, true, "irecv");
        check_tag(tag, "irecv");
        auto slot = std::make_shared<detail::mpi_recv_slot>();
        slot->data = data.data();
        slot->bytes = data.size();
        slot->peer = peer;
        slot->tag = tag;
        slot->comm = comm;
        receiver_->post(slot);
        return request(std::move(slot), receiver_, rank_, timeout_);
    }

    MPI_Comm comm_ = MPI_COMM_NULL;      // user-visible traffic
    MPI_Comm internal_ = MPI_COMM_NULL;  // hitch's own (barriers), never matched against user tags
    std::shared_ptr<detail::mpi_receiver> receiver_;
    int rank_ = 0;
    int size_ = 0;
    int max_tag_ = 32767;
    seconds_f timeout_{};
    std::uint64_t barriers_ = 0;
    detail::node_key key_;
    hitch::node_layout layout_;
    std::shared_ptr<detail::traffic_counter> traffic_;
    std::size_t shm_limit_ = 0;  // mpi_options::shm_limit_bytes, kept by split()
    std::string refusal_;        // why the last map_node_memory gave nullptr
};

static_assert(communicator<mpi>, "hitch::comm::mpi must model hitch::communicator");
static_assert(maps_node_memory<mpi> && has_node_layout<mpi> && !shares_address_space<mpi>,
              "hitch::comm::mpi maps node memory and knows its node layout; its ranks are processes");

}  // namespace hitch::comm
