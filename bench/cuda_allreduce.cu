// hitch-bench-cuda-allreduce: hitch's all-reduce schedules on GPU buffers against the same schedules on host buffers
// and against MPI_Allreduce on host buffers, in the same run, for buffers of 64 KiB to 256 MiB (powers of 4) of
// float sums:
//
//   mpiexec -n 2 hitch-bench-cuda-allreduce [--json]        ranks are MPI processes (comm::mpi), one GPU each or
//                                                           sharing the GPUs there are (local rank mod count)
//   hitch-bench-cuda-allreduce --comm local --ranks 2       ranks are threads of this process sharing GPU 0
//
// Impls at each size, each named by its schedule and the space of its buffer:
//   <schedule>/host   the schedule on a host buffer (the figures of hitch-bench-allreduce)
//   <schedule>/cuda   the same schedule on a GPU buffer: staged through the group's pinned memory, pipelined in
//                     pieces of --chunk-bytes, or direct where the MPI library is CUDA-aware (ring only; "path")
//   mpi_allreduce/host  MPI_Allreduce on a host buffer (comm mpi)
//   copies/cuda       the staging's own cost: the buffer to pinned memory and back, no schedule (every rank at once)
//
// Method as hitch-bench-allreduce's: impls interleaved round after round, a sample is one call (or a batch of at
// least --min-sample-ms) after a barrier, the slowest rank's time, the median over --rounds. The agreement check is
// off (MPI checks nothing). Every impl's result is verified on every rank against the exact sum before the figures
// are printed. --json prints one object per line:
//   {"bench":"cuda_allreduce","comm":"mpi","impl":"ring","space":"cuda","path":"staged","ranks":2,"bytes":67108864,
//    "median_us":...,"algbw_GBs":...,"x_host":...}
// x_host is the impl's time over the same schedule's on host buffers (1: staging costs nothing; copies/cuda and
// mpi_allreduce against ring/host). The path's reason goes to stderr with --json, to stdout otherwise.

#include <mpi.h>

#include <cuda_runtime.h>
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/mpi.hpp"
#include "hitch/cuda/allreduce/collectives.cuh"
#include "hitch/cuda/allreduce/mpi.hpp"
#include "hitch/cuda/pinned.hpp"

namespace {

namespace ar = hitch::allreduce;
namespace ca = hitch::cuda::allreduce;
using clock_type = std::chrono::steady_clock;

struct settings {
    std::string comm = "mpi";
    int ranks = 2;
    bool json = false;
    std::size_t min_bytes = std::size_t{64} << 10;
    std::size_t max_bytes = std::size_t{256} << 20;
    int rounds = 7;
    double min_sample_ms = 2.0;
    std::size_t chunk_bytes = ca::tuning::staging_chunk_bytes;
    std::string path = "automatic";
    std::string only;  // comma-separated schedule names (empty: all)
};

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// The ranks, as the measuring code needs them.
struct world {
    int rank = 0;
    int size = 1;
    std::function<void()> barrier;
    std::function<double(double)> max_over_ranks;
    std::function<bool(bool)> all_true;
};

/// A rank's buffers at one size: host memory, and GPU memory.
struct buffers {
    std::vector<float> host;
    float* gpu = nullptr;
    std::size_t n = 0;
    explicit buffers(std::size_t count) : host(count), n(count) {
        check(cudaMalloc(reinterpret_cast<void**>(&gpu), std::max<std::size_t>(n, 1) * sizeof(float)), "cudaMalloc");
    }
    buffers(const buffers&) = delete;
    buffers& operator=(const buffers&) = delete;
    ~buffers() { cudaFree(gpu); }
    /// Both hold `values`.
    void fill(const std::vector<float>& values) {
        host = values;
        check(cudaMemcpy(gpu, values.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    [[nodiscard]] std::vector<float> read(bool on_gpu) const {
        if (!on_gpu) return host;
        std::vector<float> out(n);
        check(cudaMemcpy(out.data(), gpu, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
        return out;
    }
};

struct impl {
    std::string name;
    std::string space;      // "host" or "cuda"
    std::string path;       // "staged", "direct" or "-"
    std::string host_twin;  // the impl whose time x_host divides by
    std::function<void(buffers&)> run;
    bool verified = true;
};

struct figure {
    std::size_t bytes = 0;
    double median_us = 0;
    double algbw = 0;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

bool wanted(const settings& s, std::string_view name) {
    if (s.only.empty()) return true;
    const std::string list = "," + s.only + ",";
    return list.find("," + std::string(name) + ",") != std::string::npos;
}

float exact_input(int rank, std::size_t i) {
    return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 11) - 5);
}

std::vector<figure> measure(const world& w, const settings& s, std::vector<impl>& impls, buffers& b) {
    const std::vector<float> seed(b.n, std::ldexp(1.0f, -100));
    std::vector<std::size_t> batch(impls.size(), 1);
    std::vector<std::vector<double>> samples(impls.size());
    for (std::size_t k = 0; k < impls.size(); ++k) {  // warm-up, then the batch that makes a sample long enough
        for (int i = 0; i < 2; ++i) impls[k].run(b);
        b.fill(seed);
        w.barrier();
        const auto start = clock_type::now();
        impls[k].run(b);
        const double one = w.max_over_ranks(std::chrono::duration<double>(clock_type::now() - start).count());
        batch[k] =
            std::clamp<std::size_t>(static_cast<std::size_t>(s.min_sample_ms * 1e-3 / std::max(one, 1e-9)), 1, 1000);
    }
    for (int round = 0; round < s.rounds; ++round)
        for (std::size_t k = 0; k < impls.size(); ++k) {
            b.fill(seed);
            w.barrier();
            const auto start = clock_type::now();
            for (std::size_t i = 0; i < batch[k]; ++i) impls[k].run(b);
            const double t =
                std::chrono::duration<double>(clock_type::now() - start).count() / static_cast<double>(batch[k]);
            samples[k].push_back(w.max_over_ranks(t));
        }
    std::vector<figure> out;
    for (auto& v : samples) {
        const double m = median(v);
        const std::size_t bytes = b.n * sizeof(float);
        out.push_back({bytes, m * 1e6, static_cast<double>(bytes) / m / 1e9});
    }
    return out;
}

bool verify(const world& w, std::vector<impl>& impls, buffers& b, std::string& failure) {
    std::vector<float> input(b.n), want(b.n, 0.0f);
    for (std::size_t i = 0; i < b.n; ++i) {
        input[i] = exact_input(w.rank, i);
        for (int r = 0; r < w.size; ++r) want[i] += exact_input(r, i);
    }
    bool all_ok = true;
    for (auto& im : impls) {
        if (!im.verified) continue;
        b.fill(input);
        w.barrier();
        im.run(b);
        const std::vector<float> got = b.read(im.space == "cuda");
        const bool ok = got == want;
        if (!ok)
            failure = im.name + "/" + im.space + " at " + std::to_string(b.n * 4) + " bytes (rank " +
                      std::to_string(w.rank) + ")";
        if (!w.all_true(ok)) all_ok = false;
    }
    return all_ok;
}

ca::device_path parse_path(const std::string& p) {
    if (p == "automatic") return ca::device_path::automatic;
    if (p == "staged") return ca::device_path::staged;
    if (p == "direct") return ca::device_path::direct;
    throw usage_error("--path " + p + " is not one of automatic, staged, direct");
}

/// Each schedule twice, on host and on GPU buffers; the copies alone.
template <class C>
void add_impls(std::vector<impl>& impls, const settings& s, ar::group<C>& g, hitch::cuda::pinned_buffer& pinned) {
    ar::call_options unchecked;
    unchecked.check = false;
    const auto add = [&](auto schedule) {
        using S = decltype(schedule);
        if (!wanted(s, S::name)) return;
        const std::string name(S::name);
        impls.push_back({name, "host", "-", name + "/host", [&g, schedule, unchecked](buffers& b) {
                             ar::allreduce(g, hitch::view(b.host), ar::reduce_op::sum, schedule, unchecked);
                         }});
        const ca::path_choice choice = ca::explain_allreduce(g, S::name);
        impls.push_back(
            {name, "cuda", choice.direct ? "direct" : "staged", name + "/host", [&g, schedule, unchecked](buffers& b) {
                 ar::allreduce(g, hitch::tensor_view<float>(b.gpu, b.n, hitch::memory_space::cuda), ar::reduce_op::sum,
                               schedule, unchecked);
             }});
    };
    add(ar::ring{});
    add(ar::recursive_doubling{});
    add(ar::rabenseifner{});
    add(ar::binary_tree{});
    add(ar::double_binary_tree{});
    add(ar::hierarchical<>{});
    ar::parameter_server::options_type sharded;
    sharded.servers = g.size();
    add(ar::parameter_server(sharded));
    if constexpr (ar::has_native_allreduce<C>::value) add(ar::native{});
    add(ar::automatic{});
    if (wanted(s, "copies"))
        impls.push_back({"copies", "cuda", "-", "ring/host",
                         [&pinned](buffers& b) {
                             const std::size_t bytes = b.n * sizeof(float);
                             pinned.reserve(bytes);
                             check(cudaMemcpy(pinned.data(), b.gpu, bytes, cudaMemcpyDeviceToHost), "copy down");
                             check(cudaMemcpy(b.gpu, pinned.data(), bytes, cudaMemcpyHostToDevice), "copy up");
                         },
                         false});
}

std::string machine() {
    utsname u{};
    uname(&u);
    cudaDeviceProp prop{};
    int device = 0;
    cudaGetDevice(&device);
    cudaGetDeviceProperties(&prop, device);
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string mpi(version, static_cast<std::size_t>(length));
    mpi = mpi.substr(0, mpi.find('\n'));
    return std::string(u.sysname) + " " + u.release + ", " + std::to_string(std::thread::hardware_concurrency()) +
           " hardware threads, " + prop.name + ", " + mpi;
}

void report(const settings& s, int p, const std::vector<impl>& impls, const std::vector<figure>& figures,
            std::FILE* notes) {
    const auto time_of = [&](const std::string& key) {
        for (std::size_t k = 0; k < impls.size(); ++k)
            if (impls[k].name + "/" + impls[k].space == key) return figures[k].median_us;
        return 0.0;
    };
    if (!s.json) std::fprintf(notes, "\n%zu bytes (%d ranks, comm %s)\n", figures.front().bytes, p, s.comm.c_str());
    for (std::size_t k = 0; k < impls.size(); ++k) {
        const impl& im = impls[k];
        const figure& f = figures[k];
        const double twin = time_of(im.host_twin);
        const double x = twin > 0 ? f.median_us / twin : 0.0;
        if (s.json)
            std::printf(
                "{\"bench\":\"cuda_allreduce\",\"comm\":\"%s\",\"impl\":\"%s\",\"space\":\"%s\",\"path\":\"%s\","
                "\"ranks\":%d,\"bytes\":%zu,\"median_us\":%.3f,\"algbw_GBs\":%.4f,\"x_host\":%.3f}\n",
                s.comm.c_str(), im.name.c_str(), im.space.c_str(), im.path.c_str(), p, f.bytes, f.median_us, f.algbw,
                x);
        else
            std::fprintf(notes, "  %-20s %-5s %-7s %12.1f us %9.3f GB/s %7.2f x host\n", im.name.c_str(),
                         im.space.c_str(), im.path.c_str(), f.median_us, f.algbw, x);
    }
    std::fflush(stdout);
    std::fflush(notes);
}

std::vector<std::size_t> sizes(const settings& s) {
    std::vector<std::size_t> out;
    for (std::size_t b = s.min_bytes; b <= s.max_bytes; b *= 4) out.push_back(b);
    return out;
}

template <class C>
int run_sizes(const world& w, const settings& s, ar::group<C>& g, std::FILE* notes,
              const std::function<void(std::vector<impl>&)>& extra) {
    ca::device_options o;
    o.chunk_bytes = s.chunk_bytes;
    o.path = parse_path(s.path);
    ca::set_options(g, o);
    if (w.rank == 0) {
        const ca::path_choice ring = ca::explain_allreduce(g, "ring");
        std::fprintf(notes, "GPU buffers: ring goes %s (%s); chunk %zu bytes\n", ring.direct ? "direct" : "staged",
                     ring.reason.c_str(), s.chunk_bytes);
    }
    hitch::cuda::pinned_buffer pinned;
    int failures = 0;
    for (std::size_t bytes : sizes(s)) {
        buffers b(bytes / sizeof(float));
        std::vector<impl> impls;
        add_impls(impls, s, g, pinned);
        extra(impls);
        const std::vector<figure> figures = measure(w, s, impls, b);
        std::string failure;
        if (!verify(w, impls, b, failure)) {
            ++failures;
            if (!failure.empty())
                std::fprintf(stderr, "hitch-bench-cuda-allreduce: VERIFICATION FAILED: %s\n", failure.c_str());
        }
        if (w.rank == 0) report(s, w.size, impls, figures, notes);
    }
    return failures;
}

int run_mpi(const settings& s, int argc, char** argv) {
    hitch::comm::mpi_environment env(argc, argv);
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    hitch::comm::mpi comm;
    check(cudaSetDevice(hitch::local_rank(comm) % count), "cudaSetDevice");
    std::FILE* notes = s.json ? stderr : stdout;
    world w;
    w.rank = comm.rank();
    w.size = comm.size();
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
    if (w.rank == 0)
        std::fprintf(notes, "hitch-bench-cuda-allreduce: comm mpi, %d ranks on %d GPUs; %s\n", w.size, count,
                     machine().c_str());
    ar::group g(comm);
    const int failures = run_sizes(w, s, g, notes, [&](std::vector<impl>& impls) {
        if (wanted(s, "mpi_allreduce"))
            impls.push_back({"mpi_allreduce", "host", "-", "ring/host", [](buffers& b) {
                                 MPI_Allreduce(MPI_IN_PLACE, b.host.data(), static_cast<int>(b.n), MPI_FLOAT, MPI_SUM,
                                               MPI_COMM_WORLD);
                             }});
    });
    return failures == 0 ? 0 : 1;
}

int run_local(const settings& s) {
    const int p = s.ranks;
    std::FILE* notes = s.json ? stderr : stdout;
    std::barrier sync(p);
    std::vector<double> values(static_cast<std::size_t>(p));
    std::vector<char> flags(static_cast<std::size_t>(p));
    std::atomic<int> failures{0};
    std::fprintf(notes, "hitch-bench-cuda-allreduce: comm local, %d ranks (threads) on one GPU; %s\n", p,
                 machine().c_str());
    hitch::comm::run_local(p, [&](hitch::comm::local& comm) {
        check(cudaSetDevice(0), "cudaSetDevice");
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
        failures += run_sizes(w, s, g, notes, [](std::vector<impl>&) {});
    });
    return failures.load() == 0 ? 0 : 1;
}

std::size_t parse_whole(const std::string& flag, const char* v, std::size_t lo, std::size_t hi) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi)
        throw usage_error(flag + " " + v + " is outside the allowed range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
    return static_cast<std::size_t>(x);
}

settings parse(int argc, char** argv) {
    settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> const char* {
            if (i + 1 >= argc) throw usage_error(a + " needs a value");
            return argv[++i];
        };
        if (a == "--json")
            s.json = true;
        else if (a == "--comm") {
            s.comm = value();
            if (s.comm != "mpi" && s.comm != "local") throw usage_error("--comm " + s.comm + " is not mpi or local");
        } else if (a == "--ranks")
            s.ranks = static_cast<int>(parse_whole(a, value(), 1, 64));
        else if (a == "--min-bytes")
            s.min_bytes = parse_whole(a, value(), 4, std::size_t{1} << 34);
        else if (a == "--max-bytes")
            s.max_bytes = parse_whole(a, value(), 4, std::size_t{1} << 34);
        else if (a == "--rounds")
            s.rounds = static_cast<int>(parse_whole(a, value(), 1, 1000));
        else if (a == "--chunk-bytes")
            s.chunk_bytes = parse_whole(a, value(), 0, std::size_t{1} << 34);
        else if (a == "--path") {
            s.path = value();
            (void)parse_path(s.path);
        } else if (a == "--only")
            s.only = value();
        else if (a == "--help") {
            std::puts(
                "hitch-bench-cuda-allreduce [--comm mpi|local] [--ranks N] [--json] [--min-bytes B] [--max-bytes B]\n"
                "  [--rounds N] [--chunk-bytes B] [--path automatic|staged|direct] [--only ring,copies,...]");
            std::exit(0);
        } else
            throw usage_error("unknown option " + a + " (--help lists them)");
    }
    if (s.min_bytes > s.max_bytes) throw usage_error("--min-bytes is above --max-bytes");
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    try {
        s = parse(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "hitch-bench-cuda-allreduce: %s\n", e.what());
        return 2;
    }
    try {
        if (!hitch::cuda::available()) {
            std::fprintf(stderr, "hitch-bench-cuda-allreduce: no CUDA device present\n");
            return 1;
        }
        return s.comm == "mpi" ? run_mpi(s, argc, argv) : run_local(s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hitch-bench-cuda-allreduce: %s\n", e.what());
        return 1;
    }
}
