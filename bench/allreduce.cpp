// hitch-bench-allreduce: every hitch all-reduce schedule against its peers, in the same run, for buffers of 4 KiB
// to 64 MiB (powers of 4) of float sums:
//
//   mpiexec -n 2 hitch-bench-allreduce [--json]        ranks are MPI processes (comm::mpi)
//   hitch-bench-allreduce --comm local --ranks 2       ranks are threads of this process (comm::local)
//
// hitch's schedules run with their default options, except parameter_server with one server shard per rank.
// Peers: MPICH's MPI_Allreduce (comm mpi), Gloo's allreduce_ring_chunked and allreduce_halving_doubling over TCP
// loopback (both modes), and a bound:
//   comm mpi:   the time to exchange 2(p-1)/p n bytes per rank with one plain MPI point-to-point message (send to
//               rank+1, receive from rank-1): what any bandwidth-optimal all-reduce must move; algbw = n / that time.
//   comm local: a memory-bandwidth pass in which every rank-thread reads its n bytes and writes them back
//               (x[i] = x[i] + c, in place so no write-allocate traffic hides in it), all threads at once: 2p bytes
//               moved per byte reduced (4 for 2 ranks), what an all-reduce in shared memory must at least move
//               (read p inputs, write p outputs); algbw = n / that time.
//
// Method: the impls run interleaved, round after round (each round in its own order), so machine noise falls on all
// of them alike (Gloo runs in a second phase after the others at each size, because its TCP threads disturb
// whatever runs next). A sample is one call (or, for small buffers, a batch of calls of at least --min-sample-ms,
// 2 ms by default, divided by the batch; and of at least --min-sample-calls calls) started after a barrier; its time
// is the slowest rank's. Each impl reports the median over rounds. hitch's schedules run with the agreement check
// off (MPI and Gloo check nothing); the check's own cost at 4 KiB is reported separately. `--twin NAME` runs one
// schedule a second time as another impl, NAME_twin: the two medians differ only by the measurement's noise, which
// bounds the ratios a run can resolve. Beside a load busy 5 ms in every 20, samples of one 64 MiB call put
// binary_tree 0.79-0.94 of itself (hierarchical, on one node the same tree, as the twin), as each call met the
// load's bursts differently; samples of 4 calls (--min-sample-calls 4) 0.91-1.00.
// Every impl's result is verified on every rank against the exact sum before the figures are printed.
//
// --json prints one object per line:
//   {"bench":"allreduce","comm":"mpi","impl":"ring","ranks":4,"nodes":2,"ranks_per_node":[2,2],"bytes":67108864,
//    "median_us":...,"algbw_GBs":...,"cross_node_bytes":50331648}
// impl is a schedule's name, mpi_allreduce, gloo_ring_chunked, gloo_halving_doubling or bound. nodes and
// ranks_per_node are comm::mpi's node layout (emulated under HITCH_EMULATE_NODES=k); cross_node_bytes is what one
// call sent to ranks on other nodes, the most any rank sent (counted by comm::mpi in the verification call), or
// null for impls that do not send through it (MPI_Allreduce, native, Gloo and the bound do not see the emulation;
// automatic's count leaves out a call it hands to native).
//
// Emulated nodes (the multi-node paths on one machine: shared memory inside each node, messages between them):
//   HITCH_EMULATE_NODES=2 mpiexec -n 4 hitch-bench-allreduce --only ring,hierarchical,automatic,mpi_allreduce
// hierarchical groups the ranks of each node (its default; on one node it is its intra-node tree alone). Ratios, the
// check's cost, automatic's online ranking at each size and the machine go to stderr in that mode, to stdout otherwise.

#include <mpi.h>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"

#include "../examples/trainer/cli_options.hpp"

namespace {

namespace ar = hitch::allreduce;
using clock_type = std::chrono::steady_clock;

struct settings {
    std::string comm = "mpi";
    int ranks = 2;
    bool json = false;
    std::size_t min_bytes = 4096;
    std::size_t max_bytes = std::size_t{64} << 20;
    int rounds = 11;
    double min_sample_ms = 2.0;
    int min_sample_calls = 1;
    int warmup_calls = 32;
    bool gloo = true;
    std::string only;  // comma-separated impl names to run (empty: all)
    std::string twin;  // a hitch schedule run a second time as "<name>_twin": the measurement's own resolution
};

/// What the measuring code needs from "the ranks": a barrier and the maximum of a value over ranks.
struct world {
    int rank = 0;
    int size = 1;
    std::function<void()> barrier;
    std::function<double(double)> max_over_ranks;
    std::function<bool(bool)> all_true;
    /// Bytes this rank has sent to other nodes since the last reset (0 where every rank shares one node).
    std::function<double()> cross_node_bytes = [] { return 0.0; };
    std::function<void()> reset_cross_node_bytes = [] {};
};

struct impl {
    std::string name;
    std::function<void(std::span<float>)> run;  // one all-reduce (sum) of the buffer, in place
    bool is_bound = false;
    int phase = 0;         // impls of one phase are interleaved; phases run one after the other
    bool counted = false;  // sends through the communicator, which counts the bytes that cross nodes
};

struct figure {
    std::string impl;
    std::size_t bytes = 0;
    double median_us = 0;
    double algbw = 0;
    double cross_node_bytes = -1;  // per call, the most any rank sent to other nodes; < 0: not counted
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

bool wanted(const settings& s, const std::string& name) {
    if (s.only.empty()) return true;
    const std::string list = "," + s.only + ",";
    return list.find("," + name + ",") != std::string::npos;
}

float exact_input(int rank, std::size_t i) {
    return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 11) - 5);
}

/// Times the impls at one size: within a phase interleaved round after round; returns the median per impl
/// (slowest rank per sample), in the order given.
std::vector<figure> measure(const world& w, const settings& s, std::vector<impl>& impls, std::span<float> buffer) {
    const float seed = std::ldexp(1.0f, -100);  // sums stay normal and finite for many in-place calls
    std::vector<std::size_t> batch(impls.size(), 1);
    std::vector<std::vector<double>> samples(impls.size());
    int last_phase = 0;
    for (const auto& im : impls) last_phase = std::max(last_phase, im.phase);
    for (int phase = 0; phase <= last_phase; ++phase) {
        std::vector<std::size_t> members;
        for (std::size_t k = 0; k < impls.size(); ++k)
            if (impls[k].phase == phase) members.push_back(k);
        // Warm-up (and calibration of automatic), then the batch: blocks of calls, each twice the last, until one
        // takes min_sample_ms (the slowest rank's time, so every rank settles on the same count). A batch sized
        // from one call's time was set by whatever that call met: automatic's first calls of a size try its
        // runners-up, and one of them set a batch of ~75 calls of 4 KiB where recursive doubling got ~500: samples
        // of different lengths, which a load's bursts and the ranks' skew out of the barrier weigh differently.
        // The warm-up runs automatic's first calls of the size (the model's pick, then each runner-up twice in
        // turn) before the batch is sized: a block of them took 0.5 ms in fewer calls than the steady state's, and
        // automatic's samples then held fewer calls than the others', each weighing the barrier's skew more.
        for (std::size_t k : members) {
            for (int i = 0; i < s.warmup_calls; ++i) impls[k].run(buffer);
            // The batch holds min_sample_ms at the fastest rate a block ran: a block that met a load's burst stops
            // the doubling early, and had left that impl with batches of a few calls, each weighing the barrier's
            // skew out of a busy host many times (automatic at 0.27 of recursive doubling at 4 KiB, both of ~1 us).
            // At least three blocks run: a first block of one call that met a burst took 0.5 ms and had stopped the
            // doubling at once, leaving batches of one call (automatic at 0.31 of recursive doubling at 4 KiB).
            std::size_t calls = 1;
            int blocks = 0;
            double fastest_call_s = 0;
            for (;;) {
                std::fill(buffer.begin(), buffer.end(), seed);
                w.barrier();
                const auto start = clock_type::now();
                for (std::size_t b = 0; b < calls; ++b) impls[k].run(buffer);
                const double took = w.max_over_ranks(std::chrono::duration<double>(clock_type::now() - start).count());
                const double per_call = took / static_cast<double>(calls);
                fastest_call_s = fastest_call_s > 0 ? std::min(fastest_call_s, per_call) : per_call;
                ++blocks;
                if ((took >= s.min_sample_ms * 1e-3 && blocks >= 3) || calls >= 2000) break;
                calls = std::min<std::size_t>(2 * calls, 2000);
            }
            const double wanted = std::ceil(s.min_sample_ms * 1e-3 / std::max(fastest_call_s, 1e-12));
            batch[k] = static_cast<std::size_t>(
                std::clamp(std::max(wanted, static_cast<double>(s.min_sample_calls)), 1.0, 2000.0));
        }
        // Each round runs the impls in its own order, the same on every rank (the generator's seed is the round):
        // a load that comes and goes with a period (a timer, a scheduler's slice) then falls on no impl more than on
        // another, where a fixed order could meet it at the same place in every round.
        for (int round = 0; round < s.rounds; ++round) {
            std::mt19937 order(static_cast<std::mt19937::result_type>(round) * 7919u + 17u);
            std::shuffle(members.begin(), members.end(), order);
            for (std::size_t k : members) {
                std::fill(buffer.begin(), buffer.end(), seed);
                w.barrier();
                const auto start = clock_type::now();
                for (std::size_t b = 0; b < batch[k]; ++b) impls[k].run(buffer);
                const double t =
                    std::chrono::duration<double>(clock_type::now() - start).count() / static_cast<double>(batch[k]);
                samples[k].push_back(w.max_over_ranks(t));
            }
        }
    }
    std::vector<figure> out;
    for (std::size_t k = 0; k < impls.size(); ++k) {
        const double m = median(samples[k]);
        out.push_back(
            {impls[k].name, buffer.size_bytes(), m * 1e6, static_cast<double>(buffer.size_bytes()) / m / 1e9});
    }
    return out;
}

/// Runs each all-reduce once on exact inputs and compares with the exact sum on every rank; notes in `figures` the
/// bytes that call sent across nodes (the most any rank sent).
bool verify(const world& w, std::vector<impl>& impls, std::span<float> buffer, std::vector<figure>& figures,
            std::string& failure) {
    bool all_ok = true;
    for (std::size_t k = 0; k < impls.size(); ++k) {
        auto& im = impls[k];
        if (im.is_bound) continue;
        for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = exact_input(w.rank, i);
        w.barrier();
        w.reset_cross_node_bytes();
        im.run(buffer);
        const double crossed = w.max_over_ranks(w.cross_node_bytes());
        if (im.counted) figures[k].cross_node_bytes = crossed;
        bool ok = true;
        for (std::size_t i = 0; i < buffer.size() && ok; ++i) {
            float want = 0;
            for (int r = 0; r < w.size; ++r) want += exact_input(r, i);
            if (buffer[i] != want) {
                ok = false;
                failure = im.name + " at " + std::to_string(buffer.size_bytes()) + " bytes: element " +
                          std::to_string(i) + " is " + std::to_string(buffer[i]) + ", want " + std::to_string(want) +
                          " (rank " + std::to_string(w.rank) + ")";
            }
        }
        if (!w.all_true(ok)) all_ok = false;
    }
    return all_ok;
}

/// The hitch schedules, each on the group with the agreement check off.
template <class C>
void add_hitch(std::vector<impl>& impls, const settings& s, ar::group<C>& g) {
    ar::call_options unchecked;
    unchecked.check = false;
    const auto add = [&](auto schedule) {
        using S = decltype(schedule);
        const std::string name(S::name);
        if (!wanted(s, name)) return;
        const auto run = [&g, schedule, unchecked](std::span<float> data) {
            ar::allreduce(g, hitch::tensor_view<float>(data.data(), data.size()), ar::reduce_op::sum, schedule,
                          unchecked);
        };
        impls.push_back({name, run, false, 0, S::name != "native"});
        // The same schedule again, as another impl: how far apart two measurements of one thing land in this run.
        if (s.twin == name) impls.push_back({name + "_twin", run, false, 0, S::name != "native"});
    };
    add(ar::ring{});
    add(ar::recursive_doubling{});
    add(ar::rabenseifner{});
    add(ar::binary_tree{});
    add(ar::double_binary_tree{});
    add(ar::hierarchical<>{});                   // groups by the node layout (on one node: the intra-node tree alone)
    ar::parameter_server::options_type sharded;  // one shard per rank, as sharded parameter servers run
    sharded.servers = g.size();
    add(ar::parameter_server(sharded));
    if constexpr (ar::has_native_allreduce<C>::value) add(ar::native{});
    add(ar::automatic{});
}

/// Gloo's two algorithms over TCP loopback, built for `buffer` (they keep the pointer).
struct gloo_peer {
    std::shared_ptr<gloo::rendezvous::Context> context;
    std::unique_ptr<gloo::AllreduceRingChunked<float>> ring;
    std::unique_ptr<gloo::AllreduceHalvingDoubling<float>> halving;
    float* bound_to = nullptr;
    std::size_t count = 0;

    void connect(int rank, int size, gloo::rendezvous::Store& store) {
        gloo::transport::tcp::attr attr("127.0.0.1");
        auto device = gloo::transport::tcp::CreateDevice(attr);
        context = std::make_shared<gloo::rendezvous::Context>(rank, size);
        context->setTimeout(std::chrono::seconds(120));
        context->connectFullMesh(store, device);
    }
    void bind(std::span<float> buffer) {
        if (bound_to == buffer.data() && count == buffer.size()) return;
        bound_to = buffer.data();
        count = buffer.size();
        ring = std::make_unique<gloo::AllreduceRingChunked<float>>(context, std::vector<float*>{buffer.data()},
                                                                   static_cast<int>(buffer.size()));
        halving = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, std::vector<float*>{buffer.data()},
                                                                          static_cast<int>(buffer.size()));
    }
};

void add_gloo(std::vector<impl>& impls, const settings& s, gloo_peer& peer) {
    if (!s.gloo) return;
    if (wanted(s, "gloo_ring_chunked"))
        impls.push_back({"gloo_ring_chunked",
                         [&peer](std::span<float> data) {
                             peer.bind(data);
                             peer.ring->run();
                         },
                         false, 1});
    if (wanted(s, "gloo_halving_doubling"))
        impls.push_back({"gloo_halving_doubling",
                         [&peer](std::span<float> data) {
                             peer.bind(data);
                             peer.halving->run();
                         },
                         false, 1});
}

std::string machine() {
    utsname u{};
    uname(&u);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string mpi(version, static_cast<std::size_t>(length));
    mpi = mpi.substr(0, mpi.find('\n'));
    return std::string(u.sysname) + " " + u.release + ", " + std::to_string(std::thread::hardware_concurrency()) +
           " hardware threads, " + mpi;
}

/// `"nodes":k,"ranks_per_node":[...]` of a layout, for the JSON lines.
std::string layout_json(const hitch::node_layout& layout) {
    std::string out = "\"nodes\":" + std::to_string(layout.nodes) + ",\"ranks_per_node\":[";
    for (int node = 0; node < layout.nodes; ++node)
        out += (node > 0 ? "," : "") + std::to_string(layout.ranks_on(node).size());
    return out + "]";
}

/// Prints the figures of one size: JSON lines to stdout, or a table; ratios to the table or stderr.
void report(const settings& s, int p, const std::string& layout, const std::vector<figure>& figures, std::FILE* notes) {
    double best = 0, mpi_bw = 0, bound = 0;
    std::string best_name;
    for (const auto& f : figures) {
        if (f.impl == "bound")
            bound = f.algbw;
        else if (f.algbw > best) {
            best = f.algbw;
            best_name = f.impl;
        }
        if (f.impl == "mpi_allreduce") mpi_bw = f.algbw;
    }
    if (s.json) {
        for (const auto& f : figures) {
            const std::string crossed = f.cross_node_bytes < 0
                                            ? std::string("null")
                                            : std::to_string(static_cast<long long>(f.cross_node_bytes));
            std::printf(
                "{\"bench\":\"allreduce\",\"comm\":\"%s\",\"impl\":\"%s\",\"ranks\":%d,%s,\"bytes\":%zu,\"median_"
                "us\":%.3f,\"algbw_GBs\":%.4f,\"cross_node_bytes\":%s}\n",
                s.comm.c_str(), f.impl.c_str(), p, layout.c_str(), f.bytes, f.median_us, f.algbw, crossed.c_str());
        }
        std::fflush(stdout);
    } else {
        std::fprintf(notes, "\n%zu bytes (%d ranks, comm %s, %s)\n", figures.front().bytes, p, s.comm.c_str(),
                     layout.c_str());
        std::fprintf(notes, "  %-22s %12s %10s %9s %9s %9s %16s\n", "impl", "median_us", "algbw_GBs", "x best", "x mpi",
                     "x bound", "cross-node B");
        for (const auto& f : figures)
            std::fprintf(
                notes, "  %-22s %12.1f %10.3f %9.2f %9s %9s %16s\n", f.impl.c_str(), f.median_us, f.algbw,
                best > 0 ? f.algbw / best : 0.0,
                mpi_bw > 0 ? std::to_string(f.algbw / mpi_bw).substr(0, 5).c_str() : "-",
                bound > 0 ? std::to_string(f.algbw / bound).substr(0, 5).c_str() : "-",
                f.cross_node_bytes < 0 ? "-" : std::to_string(static_cast<long long>(f.cross_node_bytes)).c_str());
    }
    // the targets: the best non-native hitch schedule, and automatic against the fastest impl
    double best_hitch = 0, automatic = 0;
    std::string best_hitch_name;
    for (const auto& f : figures) {
        const bool peer =
            f.impl == "bound" || f.impl == "mpi_allreduce" || f.impl.rfind("gloo_", 0) == 0 || f.impl == "native";
        if (!peer && f.impl != "automatic" && f.algbw > best_hitch) {
            best_hitch = f.algbw;
            best_hitch_name = f.impl;
        }
        if (f.impl == "automatic") automatic = f.algbw;
    }
    std::fprintf(notes, "  summary %zu B: fastest %s %.3f GB/s; best hitch schedule %s %.3f GB/s",
                 figures.front().bytes, best_name.c_str(), best, best_hitch_name.c_str(), best_hitch);
    if (mpi_bw > 0) std::fprintf(notes, " = %.2f x MPI_Allreduce", best_hitch / mpi_bw);
    if (bound > 0) std::fprintf(notes, " = %.2f of the bound", best_hitch / bound);
    if (automatic > 0) std::fprintf(notes, "; automatic %.2f of the fastest", automatic / best);
    std::fprintf(notes, "\n");
    std::fflush(notes);
}

std::vector<std::size_t> sizes(const settings& s) {
    std::vector<std::size_t> out;
    for (std::size_t b = s.min_bytes; b <= s.max_bytes; b *= 4) out.push_back(b);
    return out;
}

/// What automatic measured and picks at each size.
template <class C>
void automatic_picks(const world& w, const settings& s, ar::group<C>& g, std::FILE* notes) {
    if (w.rank != 0 || !g.constants()) return;
    const ar::cost_constants k = *g.constants();
    std::fprintf(notes, "automatic's constants: alpha %.3g s, beta %.3g s/B, gamma %.3g s/B", k.alpha_s,
                 k.beta_s_per_byte, k.gamma_s_per_byte);
    if (k.has_native()) std::fprintf(notes, ", native %.3g s + %.3g s/B", k.native_alpha_s, k.native_beta_s_per_byte);
    const auto profile = ar::automatic::measured_profile(g.state());
    std::fprintf(notes, "\nautomatic picks (model and measured profile):");
    for (std::size_t b : sizes(s))
        std::fprintf(notes, " %zu B %s;", b,
                     std::string(ar::automatic{}.choose(hitch::node_layout_of(g.comm()), b, k, profile.get())).c_str());
    std::fprintf(notes, "\n");
}

/// Where automatic's online ranking of this size stands after the runs: the pick most calls take, and the agreed
/// estimate of each candidate (us), the pick first.
template <class C>
void automatic_ranking(const world& w, ar::group<C>& g, std::size_t bytes, std::FILE* notes) {
    if (w.rank != 0) return;
    const auto r = ar::automatic{}.ranking(g.state(), g.size(), bytes);
    if (!r) return;
    std::fprintf(notes, "  automatic's ranking at %zu B: %s;", bytes,
                 std::string(ar::automatic::candidate_names[static_cast<std::size_t>(r->current)]).c_str());
    for (std::size_t c = 0; c < r->estimates.size(); ++c)
        if (r->estimates[c] >= 0)
            std::fprintf(notes, " %s %.1f", std::string(ar::automatic::candidate_names[c]).c_str(),
                         r->estimates[c] * 1e6);
    std::fprintf(notes, " (window %d calls)\n", r->review_every);
}

/// The agreement check's cost: automatic at 4 KiB with and without it, interleaved.
template <class C>
void check_cost(const world& w, const settings& s, ar::group<C>& g, std::FILE* notes) {
    std::vector<float> buffer(1024);
    ar::call_options checked, unchecked;
    unchecked.check = false;
    std::vector<impl> pair{{"automatic (checked)",
                            [&](std::span<float> d) {
                                ar::allreduce(g, hitch::tensor_view<float>(d.data(), d.size()), ar::reduce_op::sum,
                                              ar::automatic{}, checked);
                            }},
                           {"automatic (unchecked)", [&](std::span<float> d) {
                                ar::allreduce(g, hitch::tensor_view<float>(d.data(), d.size()), ar::reduce_op::sum,
                                              ar::automatic{}, unchecked);
                            }}};
    settings more = s;
    more.rounds = std::max(s.rounds, 21);
    const auto f = measure(w, more, pair, std::span<float>(buffer));
    if (w.rank == 0)
        std::fprintf(notes,
                     "agreement check at 4 KiB (%s, %d ranks): automatic %.2f us checked vs %.2f us unchecked: +%.2f "
                     "us per call\n",
                     s.comm.c_str(), w.size, f[0].median_us, f[1].median_us, f[0].median_us - f[1].median_us);
}

int run_mpi(settings& s, int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi comm;
    const int p = comm.size(), me = comm.rank();
    std::FILE* notes = s.json ? stderr : stdout;
    world w;
    w.rank = me;
    w.size = p;
    w.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
    w.max_over_ranks = [](double v) {
        double m = 0;
        MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return m;
    };
    w.all_true = [](bool ok) {
        int mine = ok ? 1 : 0, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        return all == 1;
    };
    w.cross_node_bytes = [&comm] { return static_cast<double>(comm.traffic_across_nodes().bytes); };
    w.reset_cross_node_bytes = [&comm] { comm.reset_traffic_across_nodes(); };
    const std::string layout = layout_json(comm.node_layout());
    if (me == 0)
        std::fprintf(notes, "hitch-bench-allreduce: comm mpi, %d ranks, %s; %s\n", p, layout.c_str(),
                     machine().c_str());

    ar::group g(comm);
    // Gloo rendezvous through a directory every rank of this machine sees.
    std::string dir;
    gloo_peer gloo;
    if (s.gloo) {
        char path[256] = {};
        if (me == 0) {
            std::snprintf(path, sizeof(path), "/tmp/hitch-bench-gloo-XXXXXX");
            if (mkdtemp(path) == nullptr) path[0] = '\0';
        }
        MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
        dir = path;
        if (dir.empty())
            s.gloo = false;
        else {
            gloo::rendezvous::FileStore store(dir);
            gloo.connect(me, p, store);
        }
    }
    MPI_Comm bound_comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &bound_comm);
    std::vector<float> scratch;
    int failures = 0;
    for (std::size_t bytes : sizes(s)) {
        std::vector<float> buffer(bytes / sizeof(float));
        std::vector<impl> impls;
        add_hitch(impls, s, g);
        if (wanted(s, "mpi_allreduce"))
            impls.push_back({"mpi_allreduce", [](std::span<float> d) {
                                 MPI_Allreduce(MPI_IN_PLACE, d.data(), static_cast<int>(d.size()), MPI_FLOAT, MPI_SUM,
                                               MPI_COMM_WORLD);
                             }});
        add_gloo(impls, s, gloo);
        if (wanted(s, "bound")) {
            const std::size_t moved = 2 * static_cast<std::size_t>(p - 1) * buffer.size() / static_cast<std::size_t>(p);
            scratch.assign(std::max<std::size_t>(moved, 1), 0.0f);
            std::vector<float> out_copy(std::max<std::size_t>(moved, 1), 1.0f);
            impls.push_back({"bound",
                             [&, moved, out_copy](std::span<float>) {
                                 if (p == 1) return;
                                 MPI_Sendrecv(out_copy.data(), static_cast<int>(moved), MPI_FLOAT, (me + 1) % p, 7,
                                              scratch.data(), static_cast<int>(moved), MPI_FLOAT, (me - 1 + p) % p, 7,
                                              bound_comm, MPI_STATUS_IGNORE);
                             },
                             true});
        }
        std::vector<figure> figures = measure(w, s, impls, std::span<float>(buffer));
        std::string failure;
        if (!verify(w, impls, std::span<float>(buffer), figures, failure)) {
            ++failures;
            if (!failure.empty())
                std::fprintf(stderr, "hitch-bench-allreduce: VERIFICATION FAILED: %s\n", failure.c_str());
        }
        if (me == 0) report(s, p, layout, figures, notes);
        if (wanted(s, "automatic")) automatic_ranking(w, g, bytes, notes);
    }
    automatic_picks(w, s, g, notes);
    if (wanted(s, "automatic")) check_cost(w, s, g, notes);
    MPI_Comm_free(&bound_comm);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0 && !dir.empty()) std::filesystem::remove_all(dir);
    return failures == 0 ? 0 : 1;
}

int run_local(settings& s) {
    const int p = s.ranks;
    std::FILE* notes = s.json ? stderr : stdout;
    std::barrier sync(p);
    std::vector<double> values(static_cast<std::size_t>(p));
    std::vector<char> flags(static_cast<std::size_t>(p));
    std::atomic<int> failures{0};
    gloo::rendezvous::HashStore store;
    const std::string local_layout =
        layout_json(hitch::node_layout{std::vector<int>(static_cast<std::size_t>(p), 0), 1});
    std::fprintf(notes, "hitch-bench-allreduce: comm local, %d ranks (threads); %s\n", p, machine().c_str());
    hitch::comm::run_local(p, [&](hitch::comm::local& comm) {
        const int me = comm.rank();
        world w;
        w.rank = me;
        w.size = p;
        w.barrier = [&] { sync.arrive_and_wait(); };
        w.max_over_ranks = [&](double v) {
            values[static_cast<std::size_t>(me)] = v;
            sync.arrive_and_wait();
            const double m = *std::max_element(values.begin(), values.end());
            sync.arrive_and_wait();
            return m;
        };
        w.all_true = [&](bool ok) {
            flags[static_cast<std::size_t>(me)] = ok ? 1 : 0;
            sync.arrive_and_wait();
            const bool all = std::all_of(flags.begin(), flags.end(), [](char f) { return f != 0; });
            sync.arrive_and_wait();
            return all;
        };
        ar::group g(comm);
        gloo_peer gloo;
        if (s.gloo) gloo.connect(me, p, store);
        for (std::size_t bytes : sizes(s)) {
            std::vector<float> buffer(bytes / sizeof(float));
            std::vector<impl> impls;
            add_hitch(impls, s, g);
            add_gloo(impls, s, gloo);
            if (wanted(s, "bound"))
                impls.push_back({"bound",
                                 [](std::span<float> in) {
                                     // read n bytes, write n bytes, in place (no write-allocate traffic)
                                     const float c = 1.0f;
                                     float* x = in.data();
                                     for (std::size_t i = 0; i < in.size(); ++i) x[i] = x[i] + c;
                                 },
                                 true});
            std::vector<figure> figures = measure(w, s, impls, std::span<float>(buffer));
            std::string failure;
            if (!verify(w, impls, std::span<float>(buffer), figures, failure)) {
                failures += 1;
                if (!failure.empty())
                    std::fprintf(stderr, "hitch-bench-allreduce: VERIFICATION FAILED: %s\n", failure.c_str());
            }
            if (me == 0) report(s, p, local_layout, figures, notes);
            if (wanted(s, "automatic")) automatic_ranking(w, g, bytes, notes);
            sync.arrive_and_wait();
        }
        automatic_picks(w, s, g, notes);
        if (wanted(s, "automatic")) check_cost(w, s, g, notes);
    });
    return failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    namespace ex = hitch_examples;
    using ex::detail::add_name, ex::detail::add_real, ex::detail::add_whole;
    const std::string program = "hitch-bench-allreduce";
    settings s;
    CLI::App app(program + ": hitch's all-reduce schedules against MPI_Allreduce, Gloo and a bound");
    add_name(app, "--comm", s.comm, "mpi (run under mpiexec) or local (threads)", {"mpi", "local"});
    add_whole(app, "--ranks", s.ranks, "ranks (threads) for --comm local", 1, 64);
    app.add_flag("--json", s.json, "one JSON object per line");
    add_whole<std::size_t>(app, "--min-bytes", s.min_bytes, "smallest buffer", 4, std::size_t{1} << 34);
    add_whole<std::size_t>(app, "--max-bytes", s.max_bytes, "largest buffer", 4, std::size_t{1} << 34);
    add_whole(app, "--rounds", s.rounds, "samples per impl and size (median reported)", 1, 1000);
    add_real(app, "--min-sample-ms", s.min_sample_ms, "small buffers are timed in batches of at least this",
             ex::real_range::closed(0.0, 1000.0));
    add_whole(app, "--min-sample-calls", s.min_sample_calls,
              "calls per sample at least (averaged): long calls each meet a load's bursts differently", 1, 2000);
    add_whole(app, "--warmup-calls", s.warmup_calls, "calls of each impl before its batch is sized", 0, 100000);
    app.add_option("--only", s.only, "comma-separated impls to run (default all)");
    app.add_option("--twin", s.twin,
                   "also run this hitch schedule (when it runs) as NAME_twin, a second impl: the run's resolution");
    bool no_gloo = false;
    app.add_flag("--no-gloo", no_gloo, "skip Gloo");
    // Every rank finds the same mistake before MPI starts; the launcher's rank 0 alone prints it.
    const bool speaks = ex::launcher_rank() == 0;
    try {
        app.parse(argc, argv);
        // automatic's candidates are every schedule the benchmark runs.
        const auto& names = ar::automatic::candidate_names;
        if (!s.twin.empty() && std::find(names.begin(), names.end(), s.twin) == names.end()) {
            std::string known;
            for (const auto n : names) known += (known.empty() ? "" : ", ") + std::string(n);
            throw ex::usage_error("--twin " + s.twin + ": not one of hitch's schedules (" + known + ")");
        }
        if (s.min_bytes > s.max_bytes)
            throw ex::usage_error("--min-bytes " + std::to_string(s.min_bytes) + " is above --max-bytes " +
                                  std::to_string(s.max_bytes));
    } catch (const CLI::CallForHelp& e) {
        return speaks ? app.exit(e) : 0;
    } catch (const CLI::ParseError& e) {
        if (speaks) ex::print_line(program, std::string(e.what()) + " (--help lists the options)");
        return ex::exit_usage;
    } catch (const ex::usage_error& e) {
        if (speaks) ex::print_line(program, e.what());
        return ex::exit_usage;
    }
    s.gloo = !no_gloo;
    try {
        return s.comm == "mpi" ? run_mpi(s, argc, argv) : run_local(s);
    } catch (const std::exception& e) {
        ex::print_line(program, e.what());
        return ex::exit_failure;
    }
}
