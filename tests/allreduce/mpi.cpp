// The schedules and collectives over comm::mpi under mpiexec (2, 3 and 4 ranks): every schedule, native included,
// on the staged path (the ranks share a node) and a selection on the message path, against the serial reference and
// against MPI's own MPI_Allreduce; identical bytes on every rank (compared with MPI_Bcast of rank 0's result);
// mismatches reported on every rank; the non-blocking forms, the fusion buffer and allgather_bytes across processes.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/mpi.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;

namespace {

const std::vector<std::size_t> counts{0, 1, 2, 7, 1000};
constexpr std::size_t large_count = (std::size_t{1} << 20) + 3;

/// Every rank's verdict: true only if the check held on every rank (so all ranks fail together).
bool everywhere(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

/// Rank 0's bytes, broadcast with MPI itself, compared on every rank.
template <class T>
bool same_as_rank0(const std::vector<T>& v) {
    std::vector<T> first = v;
    MPI_Bcast(first.data(), static_cast<int>(first.size() * sizeof(T)), MPI_BYTE, 0, MPI_COMM_WORLD);
    return everywhere(hitch_test::same_bytes(std::span<const T>(first), std::span<const T>(v)));
}

template <class T, class Schedule>
void exact_sweep(group<mpi>& g, const Schedule& schedule, std::initializer_list<reduce_op> ops,
                 const std::vector<std::size_t>& ns, const call_options& options = {}) {
    const int p = g.size();
    for (std::size_t n : ns)
        for (reduce_op op : ops) {
            const auto value = [](int r, std::size_t i) { return hitch_test::exact_value<T>(r, i, 3); };
            std::vector<T> data = hitch_test::make_input<T>(g.rank(), n, value);
            allreduce(g, hitch::view(data), op, schedule, options);
            const auto want = hitch_test::reference<T>(p, n, op, value);
            INFO(Schedule::name << " " << hitch::name(hitch::dtype_of<T>()) << " " << name(op) << " n = " << n
                                << " p = " << p);
            REQUIRE(everywhere(hitch_test::first_difference(std::span<const T>(data), std::span<const T>(want)) == -1));
        }
}

template <class Schedule>
void full_check(const Schedule& schedule, bool large) {
    mpi comm;
    group g(comm);
    const std::initializer_list<reduce_op> all_ops{reduce_op::sum, reduce_op::average, reduce_op::min, reduce_op::max};
    exact_sweep<float>(g, schedule, all_ops, counts);
    exact_sweep<double>(g, schedule, all_ops, counts);
    exact_sweep<hitch::half>(g, schedule, all_ops, counts);
    exact_sweep<hitch::bfloat16>(g, schedule, all_ops, counts);
    if (large) {
        exact_sweep<float>(g, schedule, {reduce_op::sum, reduce_op::average}, {large_count});
        exact_sweep<hitch::bfloat16>(g, schedule, {reduce_op::max}, {large_count});
    }
    // full-mantissa inputs: identical bytes everywhere, and close to MPI's own all-reduce
    for (std::size_t n : {std::size_t{1000}, std::size_t{300001}}) {
        std::vector<float> data = hitch_test::make_input<float>(
            g.rank(), n, [](int r, std::size_t i) { return hitch_test::rough_value<float>(r, i, 5); });
        std::vector<float> theirs = data;
        allreduce(g, hitch::view(data), reduce_op::sum, schedule);
        MPI_Allreduce(MPI_IN_PLACE, theirs.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        INFO(Schedule::name << " rough floats n = " << n);
        REQUIRE(same_as_rank0(data));
        double worst = 0;
        for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::abs(data[i] - theirs[i])));
        REQUIRE(everywhere(worst <= 1e-5));
    }
}

}  // namespace

TEST_CASE("comm::mpi: ring", "[allreduce][mpi]") { full_check(ring{}, true); }
TEST_CASE("comm::mpi: recursive_doubling", "[allreduce][mpi]") { full_check(recursive_doubling{}, false); }
TEST_CASE("comm::mpi: rabenseifner", "[allreduce][mpi]") { full_check(rabenseifner{}, true); }
TEST_CASE("comm::mpi: binary_tree", "[allreduce][mpi]") { full_check(binary_tree{}, false); }
TEST_CASE("comm::mpi: double_binary_tree", "[allreduce][mpi]") { full_check(double_binary_tree{}, true); }
TEST_CASE("comm::mpi: hierarchical", "[allreduce][mpi]") { full_check(hierarchical<>({2}), false); }
TEST_CASE("comm::mpi: parameter_server", "[allreduce][mpi]") {
    parameter_server::options_type o;
    o.servers = 2;
    full_check(parameter_server(o), false);
}
TEST_CASE("comm::mpi: native", "[allreduce][mpi]") { full_check(native{}, true); }
TEST_CASE("comm::mpi: automatic", "[allreduce][mpi]") { full_check(automatic{}, true); }

TEST_CASE("comm::mpi: the message path (shared memory off)", "[allreduce][mpi]") {
    mpi comm;
    group g(comm);
    call_options messages;
    messages.shared_memory = false;
    const std::initializer_list<reduce_op> ops{reduce_op::sum, reduce_op::average, reduce_op::max};
    for (std::size_t n : {std::size_t{0}, std::size_t{7}, std::size_t{1000}, large_count}) {
        exact_sweep<float>(g, ring{}, ops, {n}, messages);
        exact_sweep<hitch::half>(g, rabenseifner{}, ops, {n}, messages);
        exact_sweep<double>(g, double_binary_tree{}, ops, {n}, messages);
        exact_sweep<float>(g, parameter_server{}, ops, {n}, messages);
    }
}

TEST_CASE("comm::mpi: native without the agreement check polls MPI_Iallreduce", "[allreduce][mpi]") {
    mpi comm;
    group g(comm);
    call_options unchecked;
    unchecked.check = false;
    std::vector<hitch::half> h(777, hitch::half(1.0f));
    allreduce(g, hitch::view(h), reduce_op::average, native{}, unchecked);
    std::vector<double> d(1000, static_cast<double>(comm.rank()));
    allreduce(g, hitch::view(d), reduce_op::max, native{}, unchecked);
    bool ok = true;
    for (auto x : h) ok = ok && static_cast<float>(x) == 1.0f;
    for (double x : d) ok = ok && x == comm.size() - 1;
    REQUIRE(everywhere(ok));
}

TEST_CASE("comm::mpi: automatic measures the same constants on every rank, native included", "[allreduce][mpi]") {
    mpi comm;
    group g(comm);
    std::vector<float> v(4096, 1.0f);
    allreduce(g, hitch::view(v));
    REQUIRE(g.constants().has_value());
    const cost_constants k = *g.constants();
    REQUIRE(k.has_native());
    std::vector<cost_constants> all(static_cast<std::size_t>(comm.size()));
    MPI_Allgather(&k, sizeof(k), MPI_BYTE, all.data(), sizeof(k), MPI_BYTE, MPI_COMM_WORLD);
    for (const auto& o : all) REQUIRE(std::memcmp(&o, &k, sizeof(k)) == 0);
}

TEST_CASE("comm::mpi: a mismatched count or type throws mismatch_error on every rank", "[allreduce][mpi][agreement]") {
    mpi comm;
    group g(comm);
    const int p = comm.size();
    for (int variant = 0; variant < 3; ++variant) {
        std::string message;
        try {
            if (variant == 0) {
                std::vector<float> v(comm.rank() == p - 1 ? 1001 : 1000);
                allreduce<ring>(g, hitch::view(v));
            } else if (variant == 1) {
                if (comm.rank() == 0) {
                    std::vector<double> v(10);
                    allreduce(g, hitch::view(v), reduce_op::sum, native{});
                } else {
                    std::vector<float> v(10);
                    allreduce(g, hitch::view(v), reduce_op::sum, native{});
                }
            } else {
                std::vector<float> v(10);
                handle h =
                    allreduce_async<binary_tree>(g, hitch::view(v), comm.rank() == 1 ? reduce_op::min : reduce_op::sum);
                h.wait();
            }
        } catch (const hitch::mismatch_error& e) {
            message = e.what();
        }
        INFO("variant " << variant << ": " << message);
        if (variant == 0) {
            std::string want = "allreduce #" + std::to_string(variant) + ": ";
            for (int r = 0; r < p; ++r)
                want += (r ? ", rank " : "rank ") + std::to_string(r) + " has " + (r == p - 1 ? "1001" : "1000") +
                        " x float";
            REQUIRE(everywhere(message == want));
        } else if (variant == 1) {
            REQUIRE(everywhere(message.find("rank 0 has 10 x double, rank 1 has 10 x float") != std::string::npos));
        } else {
            REQUIRE(everywhere(message.find("rank 1 has 10 x float min") != std::string::npos));
        }
    }
    std::vector<float> ok(3, 1.0f);
    allreduce(g, hitch::view(ok));
    REQUIRE(everywhere(ok[0] == static_cast<float>(p)));
}

TEST_CASE("comm::mpi: collectives, non-blocking calls, fusion and variable-size all-gather", "[allreduce][mpi]") {
    mpi comm;
    group g(comm);
    const int p = comm.size(), me = comm.rank();
    bool ok = true;
    // reduce_scatter then allgather is an all-reduce
    std::vector<float> v(10007);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i + static_cast<std::size_t>(me)) % 13);
    auto want = v;
    MPI_Allreduce(MPI_IN_PLACE, want.data(), static_cast<int>(want.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    (void)reduce_scatter(g, hitch::view(v));
    allgather(g, hitch::view(v));
    ok = ok && v == want;
    // broadcast and reduce from the last rank
    std::vector<double> b(5000, me == p - 1 ? 2.5 : 0.0);
    broadcast(g, hitch::view(b), p - 1);
    for (double x : b) ok = ok && x == 2.5;
    std::vector<float> r(3000, 1.0f);
    reduce(g, hitch::view(r), reduce_op::sum, p - 1, ring{});
    for (float x : r) ok = ok && x == (me == p - 1 ? static_cast<float>(p) : 1.0f);
    // many non-blocking calls, waited in reverse
    std::vector<std::vector<float>> buffers;
    std::vector<handle> handles;
    for (int k = 0; k < 12; ++k) buffers.emplace_back(static_cast<std::size_t>(100 + 5000 * k), static_cast<float>(k));
    for (auto& buf : buffers) handles.push_back(allreduce_async(g, hitch::view(buf)));
    for (auto it = handles.rbegin(); it != handles.rend(); ++it) it->wait();
    for (std::size_t k = 0; k < buffers.size(); ++k)
        for (float x : buffers[k]) ok = ok && x == static_cast<float>(k) * static_cast<float>(p);
    // fusion
    {
        fusion_options o;
        o.bucket_bytes = 4096;
        o.op = reduce_op::average;
        fusion_buffer<mpi, float, ring> fusion(g, o);
        std::vector<std::vector<float>> layers;
        for (int k = 0; k < 30; ++k)
            layers.emplace_back(static_cast<std::size_t>((k * 397) % 2000), static_cast<float>(me + k));
        for (auto& l : layers) fusion.add(hitch::view(l));
        fusion.wait();
        for (int k = 0; k < 30; ++k)
            for (float x : layers[static_cast<std::size_t>(k)])
                ok = ok && x == static_cast<float>(k) + static_cast<float>(p - 1) / 2.0f;
    }
    // blobs of different sizes, empty ones included
    std::vector<std::byte> mine(static_cast<std::size_t>(me % 2 == 0 ? 1000 * me + 3 : 0), static_cast<std::byte>(me));
    const byte_blocks blobs = allgather_bytes(g, std::span<const std::byte>(mine));
    for (int q = 0; q < p; ++q) {
        const auto blob = blobs.blob(q);
        ok = ok && blob.size() == static_cast<std::size_t>(q % 2 == 0 ? 1000 * q + 3 : 0);
        for (std::byte x : blob) ok = ok && x == static_cast<std::byte>(q);
    }
    REQUIRE(everywhere(ok));
}
