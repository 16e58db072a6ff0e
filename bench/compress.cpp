// hitch-bench-compress: encode and decode throughput of every codec on ResNet-50's gradients (25,557,032 floats in
// its 161 parameter tensors, with per-layer magnitudes like those of a training run), fused into buckets of
// --bucket-mib (25 MiB, as data_parallel and DDP fuse them; 0: one bucket per tensor), next to a memory read pass
// over the same floats in the same run.
//
//   hitch-bench-compress [--json] [--repeats N] [--only name,name] [--no-check] [--aggregate] [--bucket-mib M]
//                        [--isa portable|avx2|avx512]
//
// --isa pins the codecs' kernels to one instruction-set tier (hitch::set_isa_limit, core/isa.hpp), refusing a tier
// the processor lacks; without it the widest tier runs. Every line names the tier that ran.
// encode_GBs and decode_GBs count 4 bytes per gradient element (the float bucket read, or rebuilt); bound_GBs is
// the read pass (a sum over the floats), the faster of one thread and all of hitch's thread pool, since a codec
// spreads a large bucket over the pool; ratio is uncompressed bytes / wire bytes. Each figure is the median of
// N repeats, the codecs interleaved with the read pass so a busy machine slows them alike. --json prints one
// object per line with exactly these keys:
//   {"bench":"compress","impl":"onebit","isa":"avx2","elements":25557032,"wire_bytes":...,"ratio":...,
//    "encode_GBs":...,"decode_GBs":...,"bound_GBs":...}
// and the comparisons (encode / bound, sampled / exact top-k, selected k) go to stderr. Without --json a table
// and the comparisons go to stdout. Every message is decoded and checked against the codec's bound unless
// --no-check. --aggregate also times one data-parallel step's exchange of all buckets between 2 ranks of
// comm::local (threads sharing memory, so communication runs at memory speed) with several codecs, as comment
// lines: the case where compression cannot pay.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/bf16.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/dgc.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/threshold.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/core/isa.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/exchange/aggregate.hpp"

#include "../examples/trainer/option_values.hpp"

#include "isa_option.hpp"
#include "resnet50.hpp"

namespace {

namespace hc = hitch::compress;
using clock_type = std::chrono::steady_clock;

struct layer {
    std::string name;
    std::size_t rows;                       // output channels (or the length of a vector)
    std::size_t cols;                       // inputs x kernel area (1 for vectors)
    float scale;                            // standard deviation of its gradients
    std::vector<hc::matrix_shape> parts{};  // a fused bucket: the shapes of the tensors it holds
    [[nodiscard]] std::size_t size() const { return rows * cols; }
};

/// Consecutive tensors fused into buckets of at most `bucket_bytes` (a larger tensor alone), as data_parallel and
/// PyTorch DDP fuse gradients before compressing them; each bucket keeps its tensors' matrix shapes.
std::vector<layer> fuse(const std::vector<layer>& layers, std::size_t bucket_bytes) {
    std::vector<layer> buckets;
    for (const auto& l : layers) {
        if (buckets.empty() || (buckets.back().size() + l.size()) * sizeof(float) > bucket_bytes)
            buckets.push_back({"bucket " + std::to_string(buckets.size()), 0, 1, 0.0f, {}});
        buckets.back().rows += l.size();
        buckets.back().parts.push_back({l.rows, l.cols});
    }
    return buckets;
}

/// ResNet-50 (He et al. 2016, torchvision's layout): every parameter tensor in order, 25,557,032 floats. Gradient
/// scales follow what a training run shows: smaller for wide convolutions (fan-in), larger for batch-norm
/// parameters and the classifier bias.
std::vector<layer> resnet50() {
    std::vector<layer> t;
    for (const auto& x : hitch_bench::resnet50_tensors()) {
        float scale = 0;
        if (x.name == "fc.weight")
            scale = 5e-4f;
        else if (x.name == "fc.bias")
            scale = 4e-3f;
        else if (x.bias_or_norm)
            scale = x.name.ends_with(".weight") ? 2e-3f : 3e-3f;
        else
            scale = static_cast<float>(2e-2 / std::sqrt(static_cast<double>(x.cols)));
        t.push_back({x.name, x.rows, x.cols, scale});
    }
    return t;
}

/// The model's gradients, layer after layer in one array: normal with the layer's scale, 1% outliers at 10x and
/// 2% exact zeros (dead units), from a fixed seed.
std::vector<float> gradients(const std::vector<layer>& layers) {
    std::size_t n = 0;
    for (const auto& l : layers) n += l.size();
    std::vector<float> g(n);
    hc::detail::xoshiro256ss rng(2024);
    std::size_t at = 0;
    for (const auto& l : layers)
        for (std::size_t i = 0; i < l.size(); ++i, ++at) {
            const double u = rng.uniform();
            const double x = rng.normal() * l.scale;
            g[at] = u < 0.02 ? 0.0f : static_cast<float>(u < 0.03 ? 10 * x : x);
        }
    return g;
}

[[gnu::noinline]] double read_pass_one(const float* p, std::size_t n) {
    float acc[16] = {};
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (std::size_t j = 0; j < 16; ++j) acc[j] += p[i + j];
    double s = 0;
    for (; i < n; ++i) s += p[i];
    for (float a : acc) s += a;
    return s;
}

/// The read pass on one thread, or split over the shared pool's threads (the codecs may use the pool too).
double read_pass(const float* p, std::size_t n, bool threaded) {
    if (!threaded) return read_pass_one(p, n);
    std::vector<double> part(16, 0.0);
    hitch::parallel_options o;
    o.align = 4096;
    hitch::parallel_for(n, [&](std::size_t b, std::size_t e) { part[b * 16 / n] += read_pass_one(p + b, e - b); }, o);
    double s = 0;
    for (double x : part) s += x;
    return s;
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// One codec under test: encode and decode every layer, report bytes, check the result.
struct runner {
    std::string impl;
    std::function<void()> encode;
    std::function<void()> decode;
    std::function<std::size_t()> wire_bytes;
    std::function<std::string()> check;  // "" when the decoded gradients are within the codec's bound
    std::function<std::string()> note;   // extra line for the comparisons (selected k, ...)
};

struct bench_data {
    std::vector<layer> layers;
    std::vector<std::size_t> offsets;
    std::vector<float> g;
    std::vector<float> out;
};

template <class Codec>
runner make_runner(std::string impl, Codec codec, bench_data& d,
                   std::function<std::string(const std::vector<float>&)> check,
                   std::function<typename Codec::state(const Codec&, const layer&)> make_state = nullptr) {
    struct holder {
        Codec codec;
        std::vector<typename Codec::state> states;
        std::vector<std::vector<std::byte>> messages;
    };
    auto h = std::make_shared<holder>(holder{std::move(codec), {}, {}});
    for (const auto& l : d.layers)
        h->states.push_back(make_state ? make_state(h->codec, l) : h->codec.make_state(l.size()));
    h->messages.resize(d.layers.size());
    runner r;
    r.impl = std::move(impl);
    r.encode = [h, &d] {
        for (std::size_t k = 0; k < d.layers.size(); ++k)
            h->codec.encode(hitch::tensor_view<const float>(d.g.data() + d.offsets[k], d.layers[k].size()),
                            h->states[k], h->messages[k]);
    };
    r.decode = [h, &d] {
        for (std::size_t k = 0; k < d.layers.size(); ++k)
            h->codec.decode(std::span<const std::byte>(h->messages[k]),
                            hitch::tensor_view<float>(d.out.data() + d.offsets[k], d.layers[k].size()));
    };
    r.wire_bytes = [h] {
        std::size_t b = 0;
        for (const auto& m : h->messages) b += m.size();
        return b;
    };
    r.check = [&d, check] { return check(d.out); };
    r.note = [] { return std::string(); };
    if constexpr (std::is_same_v<Codec, hc::topk>) {
        r.note = [h, &d] {
            std::size_t selected = 0, k = 0, one_pass = 0;
            for (std::size_t i = 0; i < d.layers.size(); ++i) {
                selected += h->states[i].selection.size();
                k += h->codec.k(d.layers[i].size());
                one_pass += h->states[i].passes == 1;
            }
            char line[200];
            std::snprintf(line, sizeof line,
                          "selected %zu of k = %zu (%.2f%% off); %zu of %zu buckets sampled in one pass", selected, k,
                          100.0 * (static_cast<double>(selected) - static_cast<double>(k)) / static_cast<double>(k),
                          one_pass, d.layers.size());
            return std::string(line);
        };
    }
    return r;
}

// ---- checks: decoded gradients within each codec's stated bound ----

std::string check_relative(const bench_data& d, const std::vector<float>& out, double rel, const char* what) {
    for (std::size_t i = 0; i < d.g.size(); ++i)
        if (std::fabs(out[i] - d.g[i]) > rel * std::fabs(d.g[i]) + 3e-8 * (rel > 0))
            return std::string(what) + ": element " + std::to_string(i) + " outside its bound";
    return "";
}

/// |decoded - g| <= per-layer bound(layer max |g|, layer 2-norm), for the lossy quantisers.
std::string check_per_layer(const bench_data& d, const std::vector<float>& out,
                            const std::function<double(double max_abs, double norm)>& bound, const char* what) {
    for (std::size_t k = 0; k < d.layers.size(); ++k) {
        double max_abs = 0, norm2 = 0;
        const std::size_t b = d.offsets[k], e = b + d.layers[k].size();
        for (std::size_t i = b; i < e; ++i) {
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(d.g[i])));
            norm2 += static_cast<double>(d.g[i]) * d.g[i];
        }
        const double limit = bound(max_abs, std::sqrt(norm2)) * (1 + 1e-5) + 1e-12;
        for (std::size_t i = b; i < e; ++i)
            if (!(std::fabs(out[i] - d.g[i]) <= limit))
                return std::string(what) + ": " + d.layers[k].name + " element " + std::to_string(i - b) + " off by " +
                       std::to_string(std::fabs(out[i] - d.g[i])) + " > " + std::to_string(limit);
    }
    return "";
}

/// Sparse codecs: every decoded element is either 0 or (for value-carrying codecs) the input itself.
std::string check_sparse(const bench_data& d, const std::vector<float>& out, const char* what) {
    for (std::size_t i = 0; i < d.g.size(); ++i)
        if (out[i] != 0.0f && out[i] != d.g[i])
            return std::string(what) + ": element " + std::to_string(i) + " is neither 0 nor sent";
    return "";
}

std::string check_finite(const std::vector<float>& out, const char* what) {
    for (float x : out)
        if (!std::isfinite(x)) return std::string(what) + ": non-finite output";
    return "";
}

/// One data-parallel step: every bucket of the model aggregated over `ranks` threads of comm::local with `codec`;
/// returns the median seconds per step (rank 0's clock) over `steps` steps after one warm-up step.
template <class Codec>
double time_exchange(const Codec& codec, const bench_data& d, int ranks, int steps) {
    const auto per_rank = hitch::comm::run_local(ranks, [&](hitch::comm::local& comm) {
        hitch::allreduce::group g(comm);
        std::vector<hc::aggregation_state<Codec>> states;
        std::vector<std::vector<float>> buckets;
        for (std::size_t k = 0; k < d.layers.size(); ++k) {
            states.push_back(hc::make_aggregation_state(codec, d.layers[k].size()));
            buckets.emplace_back(d.g.begin() + static_cast<std::ptrdiff_t>(d.offsets[k]),
                                 d.g.begin() + static_cast<std::ptrdiff_t>(d.offsets[k] + d.layers[k].size()));
        }
        std::vector<double> times;
        for (int s = 0; s <= steps; ++s) {
            g.comm().barrier();
            const auto t0 = clock_type::now();
            for (std::size_t k = 0; k < buckets.size(); ++k)
                hc::aggregate(g, codec, states[k], hitch::tensor_view<float>(buckets[k]));
            g.comm().barrier();
            if (s > 0) times.push_back(seconds_since(t0));
        }
        return median(times);
    });
    return per_rank[0];
}

}  // namespace

int main(int argc, char** argv) {
    namespace ex = hitch_examples;
    bool json = false, verify = true, aggregate = false;
    int repeats = 5;
    double bucket_mib = 25.0;
    std::vector<std::string> only;
    const std::string program = "hitch-bench-compress";
    const std::string usage = "usage: " + program +
                              " [--json] [--repeats N] [--only a,b] [--no-check] [--aggregate] [--bucket-mib M "
                              "(default 25; 0: one bucket per tensor)] [--isa portable|avx2|avx512 (default: the "
                              "widest this processor has)]";
    hitch::isa tier = hitch::cpu_isa();
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--json")
                json = true;
            else if (a == "--no-check")
                verify = false;
            else if (a == "--aggregate")
                aggregate = true;
            else if (a == "--repeats")
                repeats = ex::parse_whole(a, ex::next_value(argc, argv, i), 1, 1000);
            else if (a == "--bucket-mib")
                bucket_mib = ex::parse_finite(a, ex::next_value(argc, argv, i), ex::real_range::closed(0.0, 1024.0));
            else if (a == "--isa")
                tier = hitch_bench::parse_isa_option(a, ex::next_value(argc, argv, i));
            else if (a == "--only") {
                const std::string list(ex::next_value(argc, argv, i));
                for (std::size_t p = 0; p <= list.size();) {
                    const std::size_t q = std::min(list.find(',', p), list.size());
                    only.push_back(list.substr(p, q - p));
                    p = q + 1;
                }
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

    hitch::set_isa_limit(tier);  // parse_isa refused a tier the processor lacks
    const std::string isa(hitch::isa_name(hitch::active_isa()));

    bench_data d;
    d.layers = resnet50();
    std::size_t n = 0;
    for (const auto& l : d.layers) d.offsets.push_back(n), n += l.size();
    if (n != 25'557'032) {
        std::fprintf(stderr, "internal error: the ResNet-50 layout has %zu parameters, not 25557032\n", n);
        return 1;
    }
    d.g = gradients(d.layers);
    d.out.assign(n, 0.0f);
    if (bucket_mib > 0) {  // codecs see fused buckets, as in data_parallel; the gradients keep per-layer magnitudes
        d.layers = fuse(d.layers, static_cast<std::size_t>(bucket_mib * 1024 * 1024));
        d.offsets.clear();
        std::size_t at = 0;
        for (const auto& l : d.layers) d.offsets.push_back(at), at += l.size();
    }
    const double tau = 3e-3;  // about 0.5% of the elements reach it (Strom's example sends 0.36%)

    std::vector<runner> runners;
    auto want = [&](const std::string& name) {
        return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
    };
    auto add = [&](runner r) {
        if (want(r.impl)) runners.push_back(std::move(r));
    };
    const auto powersgd_state = [](const hc::powersgd& c, const layer& l) {
        if (!l.parts.empty()) return c.make_state(l.size(), std::span<const hc::matrix_shape>(l.parts));
        const hc::matrix_shape shape{l.rows, l.cols};
        return c.make_state(l.size(), std::span(&shape, 1));
    };
    auto none_check = [&](const std::vector<float>& o) { return check_relative(d, o, 0.0, "none"); };
    auto fp16_check = [&](const std::vector<float>& o) { return check_relative(d, o, std::ldexp(1.0, -11), "fp16"); };
    auto bf16_check = [&](const std::vector<float>& o) { return check_relative(d, o, std::ldexp(1.0, -8), "bf16"); };
    auto onebit_check = [&](const std::vector<float>& o) {
        return check_per_layer(d, o, [](double m, double) { return m; }, "onebit");
    };
    const std::uint32_t levels = hc::qsgd_options{}.levels;
    const std::size_t qgroup = hc::qsgd_options{}.group_size;
    auto qsgd_check = [&](const std::vector<float>& o) {
        // Per group of 512 the error is below norm / s; the layer's norm bounds every group's.
        return check_per_layer(d, o, [&](double, double norm) { return norm / levels; }, "qsgd");
    };
    (void)qgroup;
    auto tern_check = [&](const std::vector<float>& o) {
        return check_per_layer(d, o, [](double m, double) { return m; }, "terngrad");
    };
    auto sparse_check = [&](const char* what) {
        return [&, what](const std::vector<float>& o) { return check_sparse(d, o, what); };
    };
    auto finite_check = [&](const char* what) {
        return [what](const std::vector<float>& o) { return check_finite(o, what); };
    };

    add(make_runner("none", hc::none{}, d, none_check));
    add(make_runner("fp16", hc::fp16{}, d, fp16_check));
    add(make_runner("bf16", hc::bf16{}, d, bf16_check));
    add(make_runner("onebit", hc::onebit{}, d, onebit_check));
    add(make_runner("threshold", hc::threshold({.tau = static_cast<float>(tau)}), d, [&](const std::vector<float>& o) {
        for (std::size_t i = 0; i < n; ++i)
            if (o[i] !=
                (std::fabs(d.g[i]) >= static_cast<float>(tau) ? std::copysign(static_cast<float>(tau), d.g[i]) : 0.0f))
                return std::string("threshold: element ") + std::to_string(i);
        return std::string();
    }));
    add(make_runner("topk", hc::topk({.density = 0.001}), d, sparse_check("topk")));
    add(make_runner("topk_exact", hc::topk({.density = 0.001, .method = hc::topk_method::exact}), d,
                    sparse_check("topk_exact")));
    add(make_runner("dgc", hc::dgc({.final_density = 0.001}), d, finite_check("dgc")));
    add(make_runner("randomk", hc::randomk({.density = 0.01}), d, finite_check("randomk")));
    add(make_runner("qsgd", hc::qsgd{}, d, qsgd_check));
    add(make_runner("terngrad", hc::terngrad{}, d, tern_check));
    add(make_runner<hc::powersgd>("powersgd", hc::powersgd({.rank = 4}), d, finite_check("powersgd"), powersgd_state));
    add(make_runner("ef_fp16", hc::error_feedback<hc::fp16>{}, d, finite_check("ef_fp16")));
    add(make_runner("ef_onebit", hc::error_feedback<hc::onebit>{}, d, finite_check("ef_onebit")));
    add(make_runner("ef_threshold", hc::error_feedback<hc::threshold>(hc::threshold({.tau = static_cast<float>(tau)})),
                    d, finite_check("ef_threshold")));
    add(make_runner("ef_topk", hc::error_feedback<hc::topk>(hc::topk({.density = 0.001})), d, finite_check("ef_topk")));
    add(make_runner("ef_randomk", hc::error_feedback<hc::randomk>(hc::randomk({.density = 0.01, .scale = false})), d,
                    finite_check("ef_randomk")));
    add(make_runner("ef_qsgd", hc::error_feedback<hc::qsgd>{}, d, finite_check("ef_qsgd")));
    add(make_runner("ef_terngrad", hc::error_feedback<hc::terngrad>{}, d, finite_check("ef_terngrad")));

    // Warm-up: every buffer allocated and touched once; results checked.
    volatile double sink = read_pass(d.g.data(), n, false) + read_pass(d.g.data(), n, true);
    int failures = 0;
    for (auto& r : runners) {
        r.encode();
        r.decode();
        if (verify) {
            const std::string problem = r.check();
            if (!problem.empty()) {
                std::fprintf(stderr, "CHECK FAILED %s\n", problem.c_str());
                ++failures;
            }
        }
    }

    struct timing {
        std::vector<double> encode, decode, bound1, bound2;
    };
    std::map<std::string, timing> times;
    for (int rep = 0; rep < repeats; ++rep) {
        for (auto& r : runners) {
            auto& t = times[r.impl];
            auto t0 = clock_type::now();
            sink = sink + read_pass(d.g.data(), n, false);
            t.bound1.push_back(seconds_since(t0));
            t0 = clock_type::now();
            sink = sink + read_pass(d.g.data(), n, true);
            t.bound2.push_back(seconds_since(t0));
            t0 = clock_type::now();
            r.encode();
            t.encode.push_back(seconds_since(t0));
            t0 = clock_type::now();
            r.decode();
            t.decode.push_back(seconds_since(t0));
        }
    }

    const double bytes = 4.0 * static_cast<double>(n);
    FILE* cmp = json ? stderr : stdout;
    if (!json) {
        std::printf("hitch-bench-compress: %zu ResNet-50 gradients, kernels of the %s tier, median of %d repeats\n\n",
                    n, isa.c_str(), repeats);
        std::printf("%-13s %12s %9s %11s %11s %10s %9s\n", "impl", "wire_bytes", "ratio", "encode_GBs", "decode_GBs",
                    "bound_GBs", "enc/bound");
    }
    std::map<std::string, double> encode_s;
    for (auto& r : runners) {
        const auto& t = times[r.impl];
        // The bound is the faster of the one-thread and all-thread read passes (the codecs may use every thread).
        const double enc = median(t.encode), dec = median(t.decode),
                     bound = std::min(median(t.bound1), median(t.bound2));
        encode_s[r.impl] = enc;
        const std::size_t wire = r.wire_bytes();
        const double ratio = bytes / static_cast<double>(wire);
        if (json)
            std::printf(
                "{\"bench\":\"compress\",\"impl\":\"%s\",\"isa\":\"%s\",\"elements\":%zu,\"wire_bytes\":%zu,\"ratio\":%"
                ".4f,"
                "\"encode_GBs\":%.3f,\"decode_GBs\":%.3f,\"bound_GBs\":%.3f}\n",
                r.impl.c_str(), isa.c_str(), n, wire, ratio, bytes / enc * 1e-9, bytes / dec * 1e-9,
                bytes / bound * 1e-9);
        else
            std::printf("%-13s %12zu %9.2f %11.3f %11.3f %10.3f %9.2f\n", r.impl.c_str(), wire, ratio,
                        bytes / enc * 1e-9, bytes / dec * 1e-9, bytes / bound * 1e-9, bound / enc);
        const std::string note = r.note();
        if (!note.empty()) std::fprintf(cmp, "# %s: %s\n", r.impl.c_str(), note.c_str());
    }
    for (const char* name : {"fp16", "bf16", "onebit", "qsgd", "terngrad", "threshold"})
        if (times.count(name)) {
            const auto& t = times[name];
            std::fprintf(
                cmp, "# %s encode / bound = %.2f (target >= 0.5); read pass %.1f GB/s on 1 thread, %.1f GB/s on %zu\n",
                name, std::min(median(t.bound1), median(t.bound2)) / median(t.encode), bytes / median(t.bound1) * 1e-9,
                bytes / median(t.bound2) * 1e-9, hitch::thread_pool::shared().size());
        }
    if (encode_s.count("topk") && encode_s.count("topk_exact"))
        std::fprintf(cmp, "# topk (sampled) is %.1fx faster than topk_exact at density 0.001 (target >= 5)\n",
                     encode_s["topk_exact"] / encode_s["topk"]);
    if (aggregate) {
        // The exchange itself, 2 ranks sharing memory: raw all-reduce against the compressed paths.
        const int steps = std::max(3, repeats);
        const double raw = time_exchange(hc::none{}, d, 2, steps);
        std::fprintf(cmp, "# exchange of all buckets between 2 comm::local ranks, median of %d steps:\n", steps);
        std::fprintf(cmp, "#   none (all-reduce)           %8.1f ms  1.00\n", raw * 1e3);
        const auto report = [&](const char* what, double t) {
            std::fprintf(cmp, "#   %-27s %8.1f ms  %.2f\n", what, t * 1e3, t / raw);
        };
        report("fp16 (all-reduce of halves)", time_exchange(hc::fp16{}, d, 2, steps));
        report("ef_onebit (compressed ring)", time_exchange(hc::error_feedback<hc::onebit>{}, d, 2, steps));
        report("qsgd (compressed ring)", time_exchange(hc::qsgd{}, d, 2, steps));
        report("ef_topk 0.001 (all-gather)",
               time_exchange(hc::error_feedback<hc::topk>(hc::topk({.density = 0.001})), d, 2, steps));
    }
    std::fprintf(cmp, "# median of %d repeats; %s\n", repeats,
                 failures ? "CHECKS FAILED"
                 : verify ? "all results checked"
                          : "unchecked");
    (void)sink;
    return failures ? 1 : 0;
}
