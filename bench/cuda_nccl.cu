// hitch-bench-cuda-nccl: hitch's all-reduces over cuda::nccl against ncclAllReduce itself, on GPU buffers of 4 KiB to
// 256 MiB (powers of 4) of float sums, one rank per GPU on threads of this process (cuda::nccl bootstrapped over
// comm::local), or one rank per process under mpiexec with --mpi (bootstrapped over comm::mpi):
//
//   hitch-bench-cuda-nccl [--ranks N] [--min-bytes B] [--max-bytes B] [--rounds R] [--warmup-calls W] [--json]
//   mpiexec -n P hitch-bench-cuda-nccl --mpi [--min-bytes B] [--max-bytes B] [--rounds R] [--warmup-calls W] [--json]
//
// With --mpi and fewer GPUs than processes, the processes share the GPUs: each sets NCCL_HOSTID to a name of its own
// before NCCL starts, so NCCL takes them for separate hosts (its duplicate-GPU check is per host) and connects them
// over its network transport (sockets on loopback). Those figures measure that transport, not GPU links: they say
// how hitch's schedules and automatic compare with ncclAllReduce on one path, not what NVLink would give.
//
// Impls at each size:
//   nccl_allreduce   ncclAllReduce on a communicator of the benchmark's own, in place, on the same GPUs (the bound)
//   native_direct    cuda::nccl::allreduce_native on the device buffer: ncclAllReduce through cuda::nccl (its
//                    slot agreement on the control channel, the call's deadline)
//   <schedule>       hitch::allreduce::allreduce(group, device view, sum, schedule) over cuda::nccl: ring goes
//                    direct (device pointers to cuda::nccl's isend/irecv, so NCCL moves its segments, reductions on
//                    the GPU); the others are staged through pinned host memory (hitch/cuda/allreduce); native
//                    there is the staged buffer's ncclAllReduce
//   automatic        the same with automatic, which weighs native among its candidates
// Method as hitch-bench-allreduce's: W calls of each impl first (32 by default: automatic's first tries of its
// candidates happen there, not in the figures), then impls interleaved round after round; a sample is one call after
// a barrier, its time the slowest rank's; the median over rounds. The agreement check is off (NCCL checks nothing).
// Every impl's result is verified on every rank against the exact sum before the figures are printed.
//
// --json prints one object per line:
//   {"bench":"cuda_nccl","impl":"ring","ranks":2,"bytes":67108864,"median_us":...,"algbw_GBs":...,"busbw_GBs":...}
// and per size {"bench":"cuda_nccl","impl":"automatic","bytes":...,"fastest":"nccl_allreduce","ratio_to_fastest":...}
// (busbw = algbw x 2(p-1)/p, as nccl-tests report it); each line also names "bootstrap" (threads or mpi) and "gpus".
// On threads NCCL needs one GPU per rank: with fewer GPUs than --ranks it says so and exits 0 without figures.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/cuda/allreduce/collectives.cuh"
#include "hitch/cuda/nccl.hpp"
#ifdef HITCH_BENCH_MPI
#include <mpi.h>

#include "hitch/comm/mpi.hpp"
#endif

namespace {

namespace ar = hitch::allreduce;
using clock_type = std::chrono::steady_clock;

struct settings {
    int ranks = 0;  // 0: every GPU
    std::size_t min_bytes = 4096;
    std::size_t max_bytes = std::size_t{256} << 20;
    int rounds = 11;
    int warmup_calls = 32;
    bool json = false;
    bool mpi = false;
};

settings parse(int argc, char** argv) {
    settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--ranks")
            s.ranks = std::stoi(next());
        else if (a == "--min-bytes")
            s.min_bytes = std::stoull(next());
        else if (a == "--max-bytes")
            s.max_bytes = std::stoull(next());
        else if (a == "--rounds")
            s.rounds = std::max(1, std::stoi(next()));
        else if (a == "--warmup-calls")
            s.warmup_calls = std::max(0, std::stoi(next()));
        else if (a == "--json")
            s.json = true;
        else if (a == "--mpi")
            s.mpi = true;
        else
            throw std::invalid_argument(
                "unknown option " + a +
                " (--ranks N, --min-bytes B, --max-bytes B, --rounds R, --warmup-calls W, --json, --mpi)");
    }
    return s;
}

void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check_nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

float input(int rank, std::size_t i) { return static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 11) - 5); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// What every rank-thread shares: a barrier and each rank's last time.
struct shared {
    explicit shared(int p) : sync(p), seconds(static_cast<std::size_t>(p)), failed(static_cast<std::size_t>(p)) {}
    std::barrier<> sync;
    std::vector<double> seconds;
    std::vector<std::string> failed;
    std::vector<std::string> names;
};

/// The rank-threads' barrier and slowest time.
struct thread_sync {
    shared& sh;
    int rank;
    void barrier() { sh.sync.arrive_and_wait(); }
    double slowest(double seconds) {
        sh.seconds[static_cast<std::size_t>(rank)] = seconds;
        sh.sync.arrive_and_wait();
        return *std::max_element(sh.seconds.begin(), sh.seconds.end());
    }
};

#ifdef HITCH_BENCH_MPI
/// The processes' barrier and slowest time, over MPI.
struct mpi_sync {
    void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
    double slowest(double seconds) {
        double most = 0;
        MPI_Allreduce(&seconds, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return most;
    }
};
#endif

using impl_fn = std::function<void(float*, std::size_t)>;

/// One rank: runs every impl at every size, round after round, and verifies each. Sync gives the ranks' barrier and
/// slowest time; rank 0 writes names and figures, a rank's failure goes to failed.
template <class Bootstrap, class Sync>
void rank_main(int rank, int p, int gpu, const settings& s, Sync sync, Bootstrap& bootstrap, ncclUniqueId raw_id,
               std::vector<std::string>& names, std::vector<std::vector<double>>& figures, std::string& failed) {
    check_cuda(cudaSetDevice(gpu), "cudaSetDevice");
    hitch::cuda::nccl comm = hitch::cuda::nccl_over(bootstrap, {.device = gpu});
    ncclComm_t raw = nullptr;
    check_nccl(ncclCommInitRank(&raw, p, raw_id, rank), "ncclCommInitRank");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ar::group g(comm);
    ar::call_options unchecked;
    unchecked.check = false;
    const auto view = [](float* d, std::size_t n) {
        return hitch::tensor_view<float>(d, n, hitch::memory_space::cuda);
    };
    std::vector<std::pair<std::string, impl_fn>> impls;
    impls.emplace_back("nccl_allreduce", [&](float* d, std::size_t n) {
        check_nccl(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, raw, stream), "ncclAllReduce");
        check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    impls.emplace_back("native_direct", [&](float* d, std::size_t n) {
        comm.allreduce_native(std::span<float>(d, n), hitch::reduce_op::sum, hitch::deadline(comm.timeout()));
    });
    const auto schedule = [&](std::string name, auto sched) {
        impls.emplace_back(std::move(name), [&g, &unchecked, view, sched](float* d, std::size_t n) {
            ar::allreduce(g, view(d, n), ar::reduce_op::sum, sched, unchecked);
        });
    };
    schedule("ring", ar::ring{});
    schedule("recursive_doubling", ar::recursive_doubling{});
    schedule("rabenseifner", ar::rabenseifner{});
    schedule("binary_tree", ar::binary_tree{});
    schedule("double_binary_tree", ar::double_binary_tree{});
    schedule("native", ar::native{});
    const ar::automatic automatic;  // one object: its decisions are kept across calls
    impls.emplace_back("automatic", [&](float* d, std::size_t n) {
        ar::allreduce(g, view(d, n), ar::reduce_op::sum, automatic, unchecked);
    });
    if (rank == 0)
        for (const auto& [name, fn] : impls) names.push_back(name);

    const std::size_t max_n = s.max_bytes / sizeof(float);
    float* d = nullptr;
    check_cuda(cudaMalloc(&d, std::max<std::size_t>(max_n, 1) * sizeof(float)), "cudaMalloc");
    std::vector<float> host(max_n), back(max_n);
    for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= 4) {
        const std::size_t n = bytes / sizeof(float);
        for (std::size_t i = 0; i < n; ++i) host[i] = input(rank, i);
        // Verify each impl once.
        for (const auto& [name, fn] : impls) {
            check_cuda(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
            sync.barrier();
            fn(d, n);
            check_cuda(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
            for (std::size_t i = 0; i < n; ++i) {
                float want = 0;
                for (int r = 0; r < p; ++r) want += input(r, i);
                if (back[i] != want) {
                    failed = name + " gave a wrong sum at " + std::to_string(bytes);
                    break;
                }
            }
        }
        // Warm every impl up (automatic makes its first tries of each candidate here), from fresh inputs: each
        // call doubles the sums' magnitude, so the buffer is reset before each block and before the rounds.
        for (const auto& [name, fn] : impls) {
            check_cuda(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
            sync.barrier();
            for (int i = 0; i < s.warmup_calls; ++i) fn(d, n);
        }
        check_cuda(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        std::vector<std::vector<double>> samples(impls.size());
        for (int round = 0; round < s.rounds; ++round)
            for (std::size_t k = 0; k < impls.size(); ++k) {
                sync.barrier();
                const auto t0 = clock_type::now();
                impls[k].second(d, n);
                samples[k].push_back(sync.slowest(std::chrono::duration<double>(clock_type::now() - t0).count()));
            }
        if (rank == 0) {
            std::vector<double> row;
            for (auto& v : samples) row.push_back(median(v));
            figures.push_back(row);
        }
    }
    cudaFree(d);
    sync.barrier();
    ncclCommDestroy(raw);
    cudaStreamDestroy(stream);
}

/// Prints the figures rank 0 gathered, one size per row, impls in `names`' order (automatic last).
void print_figures(const settings& s, int p, int gpus, const char* bootstrap, const std::vector<std::string>& names,
                   const std::vector<std::vector<double>>& figures) {
    int version = 0;
    ncclGetVersion(&version);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    if (!s.json)
        std::printf("NCCL %d, %d x %s, %d ranks on %s%s\n", version, gpus, prop.name, p, bootstrap,
                    p > gpus ? " sharing GPUs (NCCL's network transport)" : "");
    std::size_t bytes = s.min_bytes;
    for (const auto& row : figures) {
        std::size_t fastest = 0;
        for (std::size_t k = 0; k < row.size(); ++k)
            if (row[k] < row[fastest]) fastest = k;
        const double bus = p > 1 ? 2.0 * (p - 1) / p : 1.0;
        for (std::size_t k = 0; k < row.size(); ++k) {
            const double algbw = static_cast<double>(bytes) / row[k] / 1e9;
            if (s.json)
                std::printf(
                    "{\"bench\":\"cuda_nccl\",\"impl\":\"%s\",\"ranks\":%d,\"gpus\":%d,\"bootstrap\":\"%s\","
                    "\"bytes\":%zu,\"median_us\":%.3f,\"algbw_GBs\":%.4f,\"busbw_GBs\":%.4f}\n",
                    names[k].c_str(), p, gpus, bootstrap, bytes, row[k] * 1e6, algbw, algbw * bus);
            else
                std::printf("%10zu B  %-20s %12.1f us  %8.3f GB/s bus\n", bytes, names[k].c_str(), row[k] * 1e6,
                            algbw * bus);
        }
        const std::size_t a = row.size() - 1;  // automatic, last
        if (s.json)
            std::printf(
                "{\"bench\":\"cuda_nccl\",\"impl\":\"automatic\",\"ranks\":%d,\"gpus\":%d,\"bootstrap\":\"%s\","
                "\"bytes\":%zu,\"fastest\":\"%s\",\"ratio_to_fastest\":%.4f}\n",
                p, gpus, bootstrap, bytes, names[fastest].c_str(), row[a] / row[fastest]);
        else
            std::printf("%10zu B  automatic / fastest (%s) = %.3f\n", bytes, names[fastest].c_str(),
                        row[a] / row[fastest]);
        bytes *= 4;
    }
}

/// One rank per GPU on threads of this process.
int run_threads(const settings& s, int gpus) {
    const int p = s.ranks > 0 ? s.ranks : gpus;
    if (p < 1 || p > gpus) {
        std::fprintf(stderr,
                     "hitch-bench-cuda-nccl: %d rank(s) asked for, %d GPU(s) present: NCCL needs one GPU per rank "
                     "(it refuses two ranks of one communicator on one GPU); no figures (with fewer GPUs, run the "
                     "ranks as processes: mpiexec -n %d hitch-bench-cuda-nccl --mpi)\n",
                     p, gpus, p);
        return 0;
    }
    ncclUniqueId raw_id{};
    check_nccl(ncclGetUniqueId(&raw_id), "ncclGetUniqueId");
    shared sh(p);
    std::vector<std::vector<double>> figures;  // [size][impl], written by rank 0
    hitch::comm::local_world world(p);
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r)
        threads.emplace_back([&, r] {
            try {
                hitch::comm::local c = world.communicator(r);
                rank_main(r, p, r, s, thread_sync{sh, r}, c, raw_id, sh.names, figures,
                          sh.failed[static_cast<std::size_t>(r)]);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "hitch-bench-cuda-nccl: rank %d: %s\n", r, e.what());
                std::_Exit(2);  // the others may wait in a barrier of the benchmark's own
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& f : sh.failed)
        if (!f.empty()) {
            std::fprintf(stderr, "hitch-bench-cuda-nccl: verification failed: %s\n", f.c_str());
            return 1;
        }
    print_figures(s, p, gpus, "threads", sh.names, figures);
    return 0;
}

#ifdef HITCH_BENCH_MPI
/// One rank per process under mpiexec; processes share the GPUs when there are fewer GPUs than processes.
int run_mpi(int argc, char** argv, const settings& s, int gpus) {
    hitch::comm::mpi_environment env(argc, argv);
    hitch::comm::mpi world;
    const int rank = world.rank();
    const int p = world.size();
    if (s.ranks > 0 && s.ranks != p)
        throw std::invalid_argument("--ranks " + std::to_string(s.ranks) + " with --mpi under " + std::to_string(p) +
                                    " processes: leave --ranks out (mpiexec -n sets the ranks)");
    const int local = hitch::local_rank(world);
    if (gpus < p) {
        // NCCL's duplicate-GPU check compares ranks of one host: a host id per process lets them share a GPU.
        const std::string host = "hitch-bench-rank-" + std::to_string(rank);
        setenv("NCCL_HOSTID", host.c_str(), 1);
    }
    ncclUniqueId raw_id{};
    if (rank == 0) check_nccl(ncclGetUniqueId(&raw_id), "ncclGetUniqueId");
    MPI_Bcast(&raw_id, sizeof raw_id, MPI_BYTE, 0, MPI_COMM_WORLD);
    std::vector<std::string> names;
    std::vector<std::vector<double>> figures;
    std::string failed;
    rank_main(rank, p, local % gpus, s, mpi_sync{}, world, raw_id, names, figures, failed);
    if (!failed.empty())
        std::fprintf(stderr, "hitch-bench-cuda-nccl: rank %d: verification failed: %s\n", rank, failed.c_str());
    int bad = failed.empty() ? 0 : 1;
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any != 0) return 1;
    if (rank == 0) print_figures(s, p, gpus, "mpi", names, figures);
    return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
    try {
        const settings s = parse(argc, argv);
        const int gpus = hitch::cuda::device_count();
        if (gpus == 0) {
            std::fprintf(stderr, "hitch-bench-cuda-nccl: no CUDA device present; no figures\n");
            return 0;
        }
        if (!s.mpi) return run_threads(s, gpus);
#ifdef HITCH_BENCH_MPI
        return run_mpi(argc, argv, s, gpus);
#else
        throw std::invalid_argument("--mpi: this build has no MPI (hitch::mpi was not found at configure time)");
#endif
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hitch-bench-cuda-nccl: %s\n", e.what());
        return 1;
    }
}
