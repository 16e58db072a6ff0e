// hitch-bench-optim: times one step of each optimizer on a model with ResNet-50's parameter tensors
// (25,557,032 floats), next to a memory-bandwidth pass a[i] = b[i] + s * c[i] and naive unfused versions (one pass
// over memory per arithmetic step), on 1 and 2 threads.
//
//   hitch-bench-optim [--json] [--repeats N] [--threads 1,2] [--isa portable|avx2|avx512]
//
// --isa pins the optimizer kernels to one instruction-set tier (hitch::set_isa_limit, core/isa.hpp), refusing a
// tier the processor lacks; without it the widest tier runs. The triad and naive passes are plain loops of this
// file, built with the default flags whatever the tier. Every line names the tier that ran.
// Achieved bandwidth counts the bytes each update must move per parameter:
//   sgd 12 (read w, g; write w)          momentum 20 (read w, g, b; write w, b)
//   adam, adamw 28 (read w, g, m, v; write w, m, v)
//   lars<momentum> 28 (norm pass reads w, g: 8; update pass 20)
//   lamb 40 (pass 1 reads w, g, m, v, writes m, v: 24; pass 2 reads w, m, v, writes w: 16)
// and the bound is the best bandwidth of the triad pass (12 bytes per element) over the thread counts run.
// --json prints one object per line:
//   {"bench":"optim","impl":"adam","isa":"avx2","params":25557032,"threads":2,"median_ms":...,"GBs":...,
//    "bound_GBs":...,"fraction":...}

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hitch/core/isa.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/device/buffer.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"

#include "../examples/trainer/option_values.hpp"
#include "isa_option.hpp"
#include "resnet50.hpp"

namespace {

namespace optim = hitch::optim;

struct tensor_shape {
    std::string name;
    std::size_t size;
    bool bias_or_norm;
};

/// ResNet-50's parameter tensors as flat sizes.
std::vector<tensor_shape> resnet50_tensors() {
    std::vector<tensor_shape> t;
    for (const auto& x : hitch_bench::resnet50_tensors()) t.push_back({x.name, x.size(), x.bias_or_norm});
    return t;
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Median seconds of `repeats` runs of fn after one warm-up run.
double time_median(int repeats, const std::function<void()>& fn) {
    fn();
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
        const double start = now_s();
        fn();
        t.push_back(now_s() - start);
    }
    return median(t);
}

// ---- naive unfused updates: one pass over memory per arithmetic step, as a tensor library without fusion does ----
struct naive_ops {
    hitch::parallel_options exec;
    template <class F>
    void each(std::size_t n, F f) const {
        hitch::parallel_for(
            n,
            [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i) f(i);
            },
            exec);
    }
    void scale(float* x, float a, std::size_t n) const {
        each(n, [=](std::size_t i) { x[i] = a * x[i]; });
    }
    void axpy(float* y, float a, const float* x, std::size_t n) const {
        each(n, [=](std::size_t i) { y[i] = y[i] + a * x[i]; });
    }
    void mul(float* out, const float* x, const float* y, std::size_t n) const {
        each(n, [=](std::size_t i) { out[i] = x[i] * y[i]; });
    }
    void copy(float* out, const float* x, std::size_t n) const {
        each(n, [=](std::size_t i) { out[i] = x[i]; });
    }
    void sqrt_to(float* out, const float* x, std::size_t n) const {
        // vectorised square roots, as a tensor library's sqrt kernel would be
        hitch::parallel_for(
            n,
            [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i) out[i] = x[i];
                hitch::optim::detail::sqrt_in_place(out + b, e - b);
            },
            exec);
    }
    void add_scalar(float* x, float a, std::size_t n) const {
        each(n, [=](std::size_t i) { x[i] = x[i] + a; });
    }
    void div(float* out, const float* x, const float* y, std::size_t n) const {
        each(n, [=](std::size_t i) { out[i] = x[i] / y[i]; });
    }
};

struct result {
    std::string impl;
    std::size_t threads;
    double median_ms;
    double bytes;
};

}  // namespace

int main(int argc, char** argv) {
    namespace ex = hitch_examples;
    bool json = false;
    int repeats = 7;
    std::vector<std::size_t> thread_counts = {1, 2};
    const std::string program = "hitch-bench-optim";
    const std::string usage = "usage: " + program +
                              " [--json] [--repeats N] [--threads 1,2] [--isa portable|avx2|avx512 (default: the "
                              "widest this processor has)]";
    hitch::isa tier = hitch::cpu_isa();
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--json") {
                json = true;
            } else if (a == "--repeats") {
                repeats = ex::parse_whole(a, ex::next_value(argc, argv, i), 1, 1000);
            } else if (a == "--threads") {
                thread_counts.clear();
                const std::string list(ex::next_value(argc, argv, i));
                for (std::size_t pos = 0; pos <= list.size();) {
                    const std::size_t comma = std::min(list.find(',', pos), list.size());
                    thread_counts.push_back(
                        ex::parse_whole<std::size_t>(a, std::string_view(list).substr(pos, comma - pos), 1, 1024));
                    pos = comma + 1;
                }
            } else if (a == "--isa") {
                tier = hitch_bench::parse_isa_option(a, ex::next_value(argc, argv, i));
            } else if (a == "--help" || a == "-h") {
                std::printf("%s\n", usage.c_str());
                return 0;
            } else {
                throw ex::usage_error("unknown option '" + ex::detail::shown(a) + "' (--help lists the options)");
            }
        }
    } catch (const ex::usage_error& e) {
        ex::print_line(program, e.what());
        return ex::exit_usage;
    }

    hitch::set_isa_limit(tier);  // parse_isa_option refused a tier the processor lacks
    const std::string isa(hitch::isa_name(hitch::active_isa()));

    const auto tensors = resnet50_tensors();
    std::size_t total = 0;
    for (const auto& t : tensors) total += t.size;
    if (total != 25557032) {
        std::fprintf(stderr, "internal error: the ResNet-50 layout has %zu parameters, not 25557032\n", total);
        return 1;
    }
    const std::size_t n = total;
    hitch::cpu dev;
    hitch::device_buffer<float, hitch::cpu> params(dev, n), grads(dev, n), extra(dev, n);
    for (std::size_t i = 0; i < n; ++i) {
        params.data()[i] = 0.01f * static_cast<float>(static_cast<int>(i % 2001) - 1000) / 1000.0f;
        grads.data()[i] = 0.001f * static_cast<float>(static_cast<int>((i * 7) % 1999) - 999) / 999.0f;
    }
    std::vector<hitch::layer> layers;
    std::size_t offset = 0;
    for (const auto& t : tensors) {
        layers.push_back({t.name, params.view().subview(offset, t.size), grads.view().subview(offset, t.size),
                          t.bias_or_norm ? hitch::layer_flags::bias_or_norm() : hitch::layer_flags{}});
        offset += t.size;
    }

    const std::size_t pool_size = *std::max_element(thread_counts.begin(), thread_counts.end());
    hitch::thread_pool pool(pool_size);
    std::vector<result> results;

    for (const std::size_t threads : thread_counts) {
        const hitch::parallel_options exec{.threads = threads, .pool = &pool};
        // Memory-bandwidth pass: a = b + s * c over three model-sized arrays (12 bytes per element counted).
        {
            float* a = extra.data();
            const float* b = params.data();
            const float* c = grads.data();
            const float s = 0.5f;
            const double t = time_median(repeats, [&] {
                hitch::parallel_for(
                    n,
                    [&](std::size_t begin, std::size_t end) {
                        for (std::size_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
                    },
                    exec);
            });
            results.push_back({"triad", threads, t * 1e3, 12.0 * static_cast<double>(n)});
        }
        // options wrapped with their optimizer type, so one generic lambda times them all
        auto run = [&](const std::string& impl, auto options, double bytes_per_param) {
            using O = typename decltype(options)::outer;
            optim::model_optimizer<O> opt(options.value, layers, exec);
            // Small rates keep the parameters in range over all the repeats.
            const double t = time_median(repeats, [&] { opt.step(1e-6f); });
            results.push_back({impl, threads, t * 1e3, bytes_per_param * static_cast<double>(n)});
        };
        struct sgd_o {
            using outer = optim::sgd;
            optim::sgd::options_type value;
        };
        struct mom_o {
            using outer = optim::momentum;
            optim::momentum::options_type value;
        };
        struct adam_o {
            using outer = optim::adam;
            optim::adam::options_type value;
        };
        struct adamw_o {
            using outer = optim::adamw;
            optim::adamw::options_type value;
        };
        struct lars_o {
            using outer = optim::lars_sgd;
            optim::lars_sgd::options_type value;
        };
        struct lamb_o {
            using outer = optim::lamb;
            optim::lamb::options_type value;
        };
        run("sgd", sgd_o{{.weight_decay = 1e-4f}}, 12);
        run("momentum", mom_o{{.momentum = 0.9f, .weight_decay = 1e-4f}}, 20);
        run("adam", adam_o{{}}, 28);
        run("adamw", adamw_o{{.weight_decay = 1e-2f}}, 28);
        run("lars", lars_o{{.base = {.momentum = 0.9f}, .weight_decay = 5e-4f}}, 28);
        run("lamb", lamb_o{{.weight_decay = 1e-2f}}, 40);

        // Naive unfused versions, same update rules, one pass per arithmetic step (bytes counted as for the fused).
        const naive_ops ops{exec};
        {
            // sgd: d = wd * w; d += g; w -= lr * d
            hitch::device_buffer<float, hitch::cpu> d(dev, n);
            const double t = time_median(repeats, [&] {
                for (const auto& l : layers) {
                    float* dd = d.data() + (l.params.data() - params.data());
                    ops.copy(dd, l.params.data(), l.size());
                    ops.scale(dd, 1e-4f, l.size());
                    ops.axpy(dd, 1.0f, l.grads.data(), l.size());
                    ops.axpy(l.params.data(), -1e-6f, dd, l.size());
                }
            });
            results.push_back({"sgd_naive", threads, t * 1e3, 12.0 * static_cast<double>(n)});
        }
        {
            // momentum: b *= mu; b += g; w -= lr * b
            hitch::device_buffer<float, hitch::cpu> b(dev, n);
            const double t = time_median(repeats, [&] {
                for (const auto& l : layers) {
                    float* bb = b.data() + (l.params.data() - params.data());
                    ops.scale(bb, 0.9f, l.size());
                    ops.axpy(bb, 1.0f, l.grads.data(), l.size());
                    ops.axpy(l.params.data(), -1e-6f, bb, l.size());
                }
            });
            results.push_back({"momentum_naive", threads, t * 1e3, 20.0 * static_cast<double>(n)});
        }
        {
            // adam: m *= b1; m += c1 g; v *= b2; q = g * g; v += c2 q; q = sqrt(v); q *= 1/bc2; q += eps;
            //       q = m / q; w -= step * q
            hitch::device_buffer<float, hitch::cpu> m(dev, n), v(dev, n), q(dev, n);
            const double t = time_median(repeats, [&] {
                for (const auto& l : layers) {
                    const std::ptrdiff_t o = l.params.data() - params.data();
                    float *mm = m.data() + o, *vv = v.data() + o, *qq = q.data() + o;
                    const std::size_t k = l.size();
                    ops.scale(mm, 0.9f, k);
                    ops.axpy(mm, 0.1f, l.grads.data(), k);
                    ops.scale(vv, 0.999f, k);
                    ops.mul(qq, l.grads.data(), l.grads.data(), k);
                    ops.axpy(vv, 0.001f, qq, k);
                    ops.sqrt_to(qq, vv, k);
                    ops.scale(qq, 1.0f / 0.0447f, k);
                    ops.add_scalar(qq, 1e-8f, k);
                    ops.div(qq, mm, qq, k);
                    ops.axpy(l.params.data(), -1e-6f, qq, k);
                }
            });
            results.push_back({"adam_naive", threads, t * 1e3, 28.0 * static_cast<double>(n)});
        }
    }

    double bound = 0;
    for (const auto& r : results)
        if (r.impl == "triad") bound = std::max(bound, r.bytes / (r.median_ms * 1e-3) / 1e9);
    if (!json) {
        std::printf(
            "hitch-bench-optim: %zu parameters in %zu ResNet-50 tensors, kernels of the %s tier, median of %d "
            "runs\n",
            n, tensors.size(), isa.c_str(), repeats);
        std::printf("bound: best triad bandwidth a = b + s*c: %.2f GB/s\n\n", bound);
        std::printf("%-16s %7s %10s %8s %9s\n", "impl", "threads", "median_ms", "GB/s", "fraction");
    }
    for (const auto& r : results) {
        const double gbs = r.bytes / (r.median_ms * 1e-3) / 1e9;
        if (json)
            std::printf(
                "{\"bench\":\"optim\",\"impl\":\"%s\",\"isa\":\"%s\",\"params\":%zu,\"threads\":%zu,\"median_ms\":%.3f,"
                "\"GBs\":%.3f,\"bound_GBs\":%.3f,\"fraction\":%.3f}\n",
                r.impl.c_str(), isa.c_str(), n, r.threads, r.median_ms, gbs, bound, gbs / bound);
        else
            std::printf("%-16s %7zu %10.2f %8.2f %9.3f\n", r.impl.c_str(), r.threads, r.median_ms, gbs, gbs / bound);
    }
    if (!json) {
        std::printf("\nfusion speed-up (naive ms / fused ms):");
        for (const char* impl : {"sgd", "momentum", "adam"})
            for (const auto& f : results)
                if (f.impl == impl)
                    for (const auto& u : results)
                        if (u.impl == std::string(impl) + "_naive" && u.threads == f.threads)
                            std::printf("  %s x%zu: %.2f", impl, f.threads, u.median_ms / f.median_ms);
        std::printf("\n");
    }
    return 0;
}
