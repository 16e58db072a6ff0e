// Emulated nodes over comm::mpi on one host (mpiexec with 4, 5 and 6 ranks: 2 nodes x 2, 3 nodes of 2-2-1, 2 nodes
// x 3 and 3 x 2): the layout every rank reports; every schedule and collective against MPI_Allreduce (exactly for
// integer-valued floats, to tolerance for random ones), with shared memory on (pipes inside each node, messages
// across: the node path) and off; the bytes each rank sends across nodes for ring and hierarchical against the
// ring's formula; no mapping spans two nodes, the per-node pipes exist on every node with two ranks or more, and
// nothing is left in /dev/shm; bad HITCH_EMULATE_NODES values and options are config_error.
#include <catch2/catch.hpp>

#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;
using hitch::comm::mpi_options;

namespace {

bool everywhere(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

int world_size() {
    int p = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    return p;
}

/// The emulated layouts run at this world size: k nodes.
std::vector<int> node_counts() {
    switch (world_size()) {
        case 4:
            return {2};
        case 5:
            return {3};
        case 6:
            return {2, 3};
        default:
            return {2};
    }
}

/// The expected node of each rank, written out (consecutive blocks, the larger first).
std::vector<int> expected_nodes(int p, int k) {
    if (p == 4 && k == 2) return {0, 0, 1, 1};
    if (p == 5 && k == 3) return {0, 0, 1, 1, 2};
    if (p == 6 && k == 2) return {0, 0, 0, 1, 1, 1};
    if (p == 6 && k == 3) return {0, 0, 1, 1, 2, 2};
    if (p == 5 && k == 2) return {0, 0, 0, 1, 1};
    FAIL("no expected layout for p = " << p << ", k = " << k);
    return {};
}

mpi emulated(int k) {
    mpi_options o;
    o.emulate_nodes = k;
    return mpi(MPI_COMM_WORLD, o);
}

call_options with_shared_memory(bool on) {
    call_options o;
    o.shared_memory = on;
    return o;
}

/// The schedule's result for integer-valued floats equals MPI_Allreduce's exactly, and for full-mantissa floats
/// comes within a tolerance of it; the same bytes on every rank.
template <class Schedule>
void against_mpi(group<mpi>& g, const Schedule& schedule, const call_options& options) {
    const int me = g.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{70001}}) {
        std::vector<float> data(n);
        for (std::size_t i = 0; i < n; ++i)
            data[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(me) * 13) % 101);
        std::vector<float> want = data;
        allreduce(g, hitch::view(data), reduce_op::sum, schedule, options);
        MPI_Allreduce(MPI_IN_PLACE, want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        INFO(Schedule::name << " n = " << n << " shared memory " << options.shared_memory);
        REQUIRE(everywhere(data == want));
    }
    const std::size_t n = 30011;
    std::vector<float> data = hitch_test::make_input<float>(
        me, n, [](int r, std::size_t i) { return hitch_test::rough_value<float>(r, i, 5); });
    std::vector<float> want = data;
    allreduce(g, hitch::view(data), reduce_op::sum, schedule, options);
    MPI_Allreduce(MPI_IN_PLACE, want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::abs(data[i] - want[i])));
    std::vector<float> first = data;
    MPI_Bcast(first.data(), static_cast<int>(n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    INFO(Schedule::name << " random floats, shared memory " << options.shared_memory << ", worst " << worst);
    REQUIRE(everywhere(worst <= 1e-4 && first == data));
}

template <class Schedule>
void every_layout(const Schedule& schedule) {
    for (int k : node_counts()) {
        mpi comm = emulated(k);
        group g(comm);
        INFO("nodes " << k);
        against_mpi(g, schedule, with_shared_memory(true));
        against_mpi(g, schedule, with_shared_memory(false));
    }
}

/// Bytes rank r sends in a ring all-reduce of n elements of `width` bytes over p ranks: every chunk but its own in
/// the reduce-scatter and every chunk but its successor's in the all-gather (chunk i holds n/p elements, one more
/// for the first n mod p).
std::uint64_t ring_bytes(int r, int p, std::size_t n, std::size_t width) {
    const auto chunk = [&](int i) {
        return n / static_cast<std::size_t>(p) +
               (static_cast<std::size_t>(i) < n % static_cast<std::size_t>(p) ? 1 : 0);
    };
    return (2 * n - chunk(r) - chunk((r + 1) % p)) * width;
}

}  // namespace

TEST_CASE("nodes: every rank reports the emulated layout; splits keep it", "[allreduce][mpi][nodes]") {
    const int p = world_size();
    for (int k : node_counts()) {
        mpi comm = emulated(k);
        const hitch::node_layout layout = comm.node_layout();
        INFO("p = " << p << ", k = " << k);
        REQUIRE(everywhere(layout.nodes == k && layout.node_of_rank == expected_nodes(p, k)));
        // The odd ranks keep their nodes: renumbered by their lowest member.
        mpi odd = comm.split(comm.rank() % 2, comm.rank());
        std::vector<int> want;
        int last = -1, id = -1;
        for (int r = comm.rank() % 2; r < p; r += 2) {
            const int node = expected_nodes(p, k)[static_cast<std::size_t>(r)];
            if (node != last) ++id;
            last = node;
            want.push_back(id);
        }
        REQUIRE(everywhere(odd.node_layout().node_of_rank == want && odd.node_layout().nodes == id + 1));
    }
    mpi one = emulated(1);
    REQUIRE(everywhere(one.node_layout().single_node()));
    mpi each = emulated(p);
    REQUIRE(everywhere(each.node_layout().nodes == p));
}

TEST_CASE("nodes: HITCH_EMULATE_NODES sets the layout; the option wins; bad values are config_error",
          "[allreduce][mpi][nodes]") {
    const int p = world_size();
    const char* before = std::getenv("HITCH_EMULATE_NODES");
    const std::string saved = before != nullptr ? before : "";
    ::setenv("HITCH_EMULATE_NODES", "2", 1);
    {
        mpi comm;
        REQUIRE(everywhere(comm.node_layout().node_of_rank == expected_nodes(p, 2)));
        mpi by_option = emulated(p);
        REQUIRE(everywhere(by_option.node_layout().nodes == p));
    }
    for (const std::string& bad : std::vector<std::string>{"0", "-1", "two", "2x", std::to_string(p + 1)}) {
        ::setenv("HITCH_EMULATE_NODES", bad.c_str(), 1);
        std::string message;
        try {
            mpi comm;
        } catch (const hitch::config_error& e) {
            message = e.what();
        }
        INFO("HITCH_EMULATE_NODES=" << bad << ": " << message);
        REQUIRE(everywhere(message.find("HITCH_EMULATE_NODES") != std::string::npos));
    }
    if (before != nullptr)
        ::setenv("HITCH_EMULATE_NODES", saved.c_str(), 1);
    else
        ::unsetenv("HITCH_EMULATE_NODES");
    for (int bad : {-1, p + 1}) {
        std::string message;
        try {
            (void)emulated(bad);
        } catch (const hitch::config_error& e) {
            message = e.what();
        }
        INFO("emulate_nodes = " << bad << ": " << message);
        REQUIRE(everywhere(message.find("emulate_nodes") != std::string::npos));
    }
}

TEST_CASE("nodes: no mapping spans two nodes; each node has its own pipes; /dev/shm is left clean",
          "[allreduce][mpi][nodes]") {
    long first_pid = static_cast<long>(::getpid());
    MPI_Bcast(&first_pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    for (int k : node_counts()) {
        mpi comm = emulated(k);
        INFO("nodes " << k);
        REQUIRE(everywhere(comm.map_node_memory(4096) == nullptr));
        {
            group g(comm);
            const hitch::node_layout& layout = comm.node_layout();
            const int local = layout.local_size(comm.rank());
            const auto& s = g.state();
            // Pipes over the node's ranks only: the whole communicator maps none, each node with company maps its own.
            bool ok = s.pipes == nullptr && (s.node_pipes != nullptr) == (local > 1);
            if (s.node_pipes != nullptr) {
                ok = ok && s.node_comm->size() == local && s.node_comm->node_layout().single_node();
                for (int r = 0; r < comm.size(); ++r)
                    ok = ok && (s.local_of[static_cast<std::size_t>(r)] >= 0) ==
                                   (layout.node_of(r) == layout.node_of(comm.rank()));
            }
            REQUIRE(everywhere(ok));
            bool node_staged = false, plain = true;
            call_options o;
            o.check = false;
            call_descriptor d;
            d.operation = static_cast<std::uint8_t>(operation::allreduce);
            d.set_schedule("nodes-test");
            g.run(
                o, [&] { return d; },
                [&](transport<mpi>& t, const call_descriptor&) { node_staged = t.node_staged(); });
            o.shared_memory = false;
            g.run(o, [&] { return d; }, [&](transport<mpi>& t, const call_descriptor&) { plain = t.node_staged(); });
            REQUIRE(everywhere(node_staged == (local > 1) && !plain));
            // A node of the layout maps its memory once it is a communicator of its own.
            mpi node = comm.split(layout.node_of(comm.rank()), comm.rank());
            REQUIRE(everywhere(node.map_node_memory(4096) != nullptr));
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    bool clean = true;
    const std::string prefix = "hitch-" + std::to_string(first_pid) + "-";
    if (std::filesystem::exists("/dev/shm"))
        for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
            if (e.path().filename().string().rfind(prefix, 0) == 0) clean = false;
    REQUIRE(everywhere(clean));
}

TEST_CASE("nodes: the bytes each rank sends across nodes follow the schedule's formula", "[allreduce][mpi][nodes]") {
    const int p = world_size();
    for (int k : node_counts()) {
        const std::vector<int> node = expected_nodes(p, k);
        for (bool shared : {true, false}) {
            mpi comm = emulated(k);
            group g(comm);
            const int me = comm.rank();
            call_options o = with_shared_memory(shared);
            o.check = false;  // the agreement check exchanges descriptors of its own
            for (std::size_t n : {std::size_t{1000} * static_cast<std::size_t>(p), std::size_t{300007}}) {
                std::vector<float> data(n, 1.0f);
                comm.reset_traffic_across_nodes();
                allreduce(g, hitch::view(data), reduce_op::sum, ring{}, o);
                const auto sent = comm.traffic_across_nodes();
                const bool crosses = node[static_cast<std::size_t>(me)] != node[static_cast<std::size_t>((me + 1) % p)];
                const std::uint64_t want = crosses ? ring_bytes(me, p, n, sizeof(float)) : 0;
                INFO("ring, nodes " << k << ", shared memory " << shared << ", n = " << n << ", rank " << me << " sent "
                                    << sent.bytes << " bytes across, want " << want);
                REQUIRE(everywhere(sent.bytes == want && (sent.messages > 0) == crosses));
                if (n == 1000 * static_cast<std::size_t>(p) && crosses)
                    REQUIRE(sent.bytes == 2 * (static_cast<std::uint64_t>(p) - 1) * n * sizeof(float) /
                                              static_cast<std::uint64_t>(p));
            }
            if (p == 4 && k == 2) {  // groups of 2 are the nodes: only the leaders cross, each with a 2-rank ring
                const std::size_t n = 100003;
                std::vector<float> data(n, 1.0f);
                comm.reset_traffic_across_nodes();
                allreduce(g, hitch::view(data), reduce_op::sum, hierarchical<>({2}), o);
                const std::uint64_t want = me % 2 == 0 ? ring_bytes(me / 2, 2, n, sizeof(float)) : 0;
                INFO("hierarchical, shared memory " << shared << ", rank " << me);
                REQUIRE(everywhere(comm.traffic_across_nodes().bytes == want));
                REQUIRE(everywhere(data == std::vector<float>(n, 4.0f)));
            }
        }
    }
}

TEST_CASE("nodes: ring", "[allreduce][mpi][nodes]") { every_layout(ring{}); }
TEST_CASE("nodes: recursive_doubling", "[allreduce][mpi][nodes]") { every_layout(recursive_doubling{}); }
TEST_CASE("nodes: rabenseifner", "[allreduce][mpi][nodes]") { every_layout(rabenseifner{}); }
TEST_CASE("nodes: binary_tree", "[allreduce][mpi][nodes]") { every_layout(binary_tree{}); }
TEST_CASE("nodes: double_binary_tree", "[allreduce][mpi][nodes]") { every_layout(double_binary_tree{}); }
TEST_CASE("nodes: parameter_server", "[allreduce][mpi][nodes]") {
    parameter_server::options_type o;
    o.servers = 2;
    every_layout(parameter_server(o));
}
TEST_CASE("nodes: hierarchical", "[allreduce][mpi][nodes]") {
    every_layout(hierarchical<>({2}));
    every_layout(hierarchical<>({3}));
}
TEST_CASE("nodes: automatic", "[allreduce][mpi][nodes]") { every_layout(automatic{}); }

TEST_CASE("nodes: collectives", "[allreduce][mpi][nodes]") {
    for (int k : node_counts()) {
        mpi comm = emulated(k);
        group g(comm);
        const int p = comm.size(), me = comm.rank();
        for (bool shared : {true, false}) {
            const call_options o = with_shared_memory(shared);
            INFO("nodes " << k << ", shared memory " << shared);
            bool ok = true;
            std::vector<float> v(10007);
            for (std::size_t i = 0; i < v.size(); ++i)
                v[i] = static_cast<float>((i + static_cast<std::size_t>(me)) % 13);
            auto want = v;
            MPI_Allreduce(MPI_IN_PLACE, want.data(), static_cast<int>(want.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            (void)reduce_scatter(g, hitch::view(v), reduce_op::sum, o);
            allgather(g, hitch::view(v), o);
            ok = ok && v == want;
            std::vector<double> b(5000, me == p - 1 ? 2.5 : 0.0);
            broadcast(g, hitch::view(b), p - 1, binary_tree{}, o);
            for (double x : b) ok = ok && x == 2.5;
            std::vector<float> r(3000, static_cast<float>(me + 1));
            reduce(g, hitch::view(r), reduce_op::sum, 1, ring{}, o);
            for (float x : r)
                ok = ok && x == (me == 1 ? static_cast<float>(p * (p + 1) / 2) : static_cast<float>(me + 1));
            std::vector<std::byte> mine(static_cast<std::size_t>(100 * me + 1), static_cast<std::byte>(me));
            const byte_blocks blobs = allgather_bytes(g, std::span<const std::byte>(mine), o);
            for (int q = 0; q < p; ++q) {
                ok = ok && blobs.blob(q).size() == static_cast<std::size_t>(100 * q + 1);
                for (std::byte x : blobs.blob(q)) ok = ok && x == static_cast<std::byte>(q);
            }
            REQUIRE(everywhere(ok));
        }
    }
}
