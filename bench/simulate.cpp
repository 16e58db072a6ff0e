// hitch-simulate: hitch's all-reduce schedules on a simulated cluster (comm::simulated), for world sizes and buffer
// sizes no development machine has, each against its alpha-beta model (the schedule's cost() with the network's
// alpha and beta, gamma 0: the simulator charges no time for combining; on --topology nodes, the two-level model
// with the fabric's alpha and beta inside a machine and the nic's between machines, allreduce/cost.hpp's cost_on).
//
//   hitch-simulate --ranks 2,4,...,1024 --bytes 1048576 --schedule ring,rabenseifner --topology single_switch
//   hitch-simulate --topology nodes --ranks-per-node 8 --intra-gbit 1200 --gbit 50 --compute-ms 100
//
// One JSON object per line:
//   {"bench":"simulate","topology":"single_switch","schedule":"ring","p":64,"bytes":1048576,
//    "virtual_s":...,"model_s":...,"step_s":...,"efficiency":...,"bytes_per_rank":...,
//    "bytes_across_nodes_per_rank":...,"ran":"ring","wall_s":...}
// virtual_s is the all-reduce's virtual time from a common start until the last rank has the result (automatic: its
// second call, after the first has calibrated); step_s adds
// --compute-ms of compute before it, and efficiency is compute / step_s (the scaling efficiency of a step whose
// gradients are all-reduced after the backward pass, without overlap). bytes_per_rank is the mean sent per rank
// (the group's setup, a few bytes, included); bytes_across_nodes_per_rank is what left the nodes through their NICs
// (topology nodes; 0 on the others), divided by p. ran is the schedule that carried the timed call (automatic: the
// one it picked, automatic::chosen). automatic_model is automatic given the network's alpha and beta as its constants
// and no re-ranking: it chooses by its models without measuring, which is affordable at any p; automatic_rerank is
// the same re-ranking online from its own calls' times, timed after 32 calls.
// The results are checked on every rank against the exact sum, except with --timing-only (every rank works in one
// buffer, messages from it carry no bytes: for sizes whose copies per rank would not fit in memory).
//
// --model resnet50 | resnet101 | inception_v3 simulates whole training steps instead (simulate_step.hpp): a backward
// pass of --compute-ms x --backward-share spread over the model's layers, each gradient bucket (--bucket-mb)
// exchanged with the schedule on a thread of the rank as soon as its layers are done (off with --no-overlap), then
// the step's agreement; timing only (one buffer shared by every rank) unless --real-data; --engine data_parallel runs
// hitch::data_parallel itself (p of a few tens at most):
//   {"bench":"simulate_step","model":"resnet50","topology":"nodes","schedule":"ring","p":64,"bucket_bytes":...,
//    "buckets":...,"overlap":true,"compute_s":...,"step_s":...,"exposed_s":...,"efficiency":...,
//    "relative_efficiency":...,"wall_s":...}
// efficiency is compute / step (against one rank that never communicates); relative_efficiency is the first p's step
// time over this one's (weak scaling from the first p, as Goyal et al. 2017 count from one server).
//
// --compare-local runs each schedule on comm::local as well (threads of this process, the message path) and on a
// single switch with the alpha, beta and gamma measured there as automatic's calibration measures them
// (simulate_calibrate.hpp), and prints the measured time per call (back-to-back calls, slowest rank, median of 7
// rounds) and two predictions with their relative errors: the network model alone, and with the combines charged
// at gamma (simulated_options::combine_s_per_byte):
//   {"bench":"simulate_vs_local","schedule":"ring","p":2,"bytes":1048576,"calls":64,"alpha_s":...,
//    "beta_s_per_byte":...,"gamma_s_per_byte":...,"measured_s":...,"predicted_network_s":...,"predicted_s":...,
//    "error_network":...,"error":...}

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/comm/simulated.hpp"
#include "hitch/compress/bf16.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/randomk.hpp"
#include "hitch/compress/terngrad.hpp"
#include "hitch/compress/topk.hpp"
#include "simulate_calibrate.hpp"
#include "simulate_step.hpp"

namespace {

namespace ar = hitch::allreduce;
using hitch::comm::simulated;

struct settings {
    std::string topology = "single_switch";
    std::string switching = "circuit";
    double latency_us = 5.0;
    double gbit = 100.0;
    int ranks_per_leaf = 16;
    double oversubscription = 1.0;
    double spine_latency_us = 1.0;
    int ranks_per_node = 8;
    double intra_latency_us = 2.0;
    double intra_gbit = 1200.0;
    std::vector<int> ranks{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    std::vector<std::size_t> bytes{std::size_t{1} << 20};
    std::vector<std::string> schedules{"ring", "recursive_doubling", "rabenseifner", "double_binary_tree"};
    double compute_ms = 0.0;
    // --model
    std::string model;
    double backward_share = 2.0 / 3.0;
    double bucket_mb = 25.0;
    bool no_overlap = false;
    bool real_data = false;
    int steps = 2;
    std::string engine = "model";
    double jitter_cv = 0.0;
    std::vector<std::string> compressors{"none"};
    std::vector<std::string> policies{"hard"};
    double straggler = 1.0;
    std::string sharding = "layer";  // the parameter-server policies' shards: layer or range
    bool timing_only = false;        // schedules: one buffer shared by every rank, messages from it carry no bytes
};

hitch::comm::simulated_network network_shape(const settings& s) {
    const hitch::comm::link_model nic{s.latency_us * 1e-6, s.gbit * 1e9 / 8};
    if (s.topology == "single_switch") return hitch::comm::simulated_network::single_switch(nic);
    if (s.topology == "fat_tree")
        return hitch::comm::simulated_network::fat_tree(nic, s.ranks_per_leaf, s.oversubscription,
                                                        s.spine_latency_us * 1e-6);
    if (s.topology == "nodes")
        return hitch::comm::simulated_network::nodes(s.ranks_per_node,
                                                     {s.intra_latency_us * 1e-6, s.intra_gbit * 1e9 / 8}, nic);
    throw hitch::config_error("hitch-simulate: --topology " + s.topology +
                              " is not one of single_switch, fat_tree, nodes");
}

hitch::comm::simulated_network network_of(const settings& s) {
    auto net = network_shape(s);
    if (s.switching == "buffered")
        net.mode = hitch::comm::simulated_network::switching::buffered;
    else if (s.switching != "circuit")
        throw hitch::config_error("hitch-simulate: --switching " + s.switching + " is not one of circuit, buffered");
    return net;
}

/// The network's constants as the schedules' models take them: alpha and beta of a rank's link, and on --topology
/// nodes the fabric's inside a machine with the nic's between machines; no combining (gamma 0, which the
/// simulator does not charge here).
hitch::cost_constants model_constants(const settings& s) {
    hitch::cost_constants k{s.latency_us * 1e-6, 8.0 / (s.gbit * 1e9), 0.0};
    if (s.topology == "nodes") {
        k.inter_alpha_s = k.alpha_s;
        k.inter_beta_s_per_byte = k.beta_s_per_byte;
        k.alpha_s = s.intra_latency_us * 1e-6;
        k.beta_s_per_byte = 8.0 / (s.intra_gbit * 1e9);
    }
    return k;
}

/// Runs `f(schedule)` with the schedule named `name`. automatic_model is automatic given the network's constants
/// (automatic::options_type::constants) without re-ranking: it measures nothing and chooses by its models alone.
template <class F>
void with_schedule(const std::string& name, F&& f, const settings* s = nullptr) {
    if ((name == "automatic_model" || name == "automatic_rerank") && s != nullptr) {
        ar::automatic::options_type o;
        o.constants = model_constants(*s);
        o.constants->gamma_s_per_byte = 1e-15;  // a constant must be positive; this one changes nothing
        // automatic_model: the model's pick on every call; automatic_rerank: the pick its online ranking has
        // settled on after settle_calls calls (run_one), from the model's pick and first tries of the runners-up.
        o.rerank = name == "automatic_rerank";
        return f(ar::automatic{o});
    }
    if (name == "parameter_server") return f(ar::parameter_server{});
    if (name == "ring") return f(ar::ring{});
    if (name == "recursive_doubling") return f(ar::recursive_doubling{});
    if (name == "rabenseifner") return f(ar::rabenseifner{});
    if (name == "binary_tree") return f(ar::binary_tree{});
    if (name == "double_binary_tree") return f(ar::double_binary_tree{});
    if (name == "hierarchical") return f(ar::hierarchical{});
    if (name == "hierarchical_rabenseifner") return f(ar::hierarchical<ar::binary_tree, ar::rabenseifner>{});
    if (name == "automatic") return f(ar::automatic{});
    throw hitch::config_error("hitch-simulate: --schedule " + name +
                              " is not one of ring, recursive_doubling, rabenseifner, binary_tree, "
                              "double_binary_tree, parameter_server, hierarchical, hierarchical_rabenseifner, "
                              "automatic, automatic_model, automatic_rerank");
}

/// automatic, reporting the schedule its last call on rank 0 ran (automatic::chosen): a schedule in its own right.
struct reporting_automatic {
    using options_type = ar::automatic::options_type;
    static constexpr std::string_view name = ar::automatic::name;
    reporting_automatic() = default;
    explicit reporting_automatic(const options_type& o) : inner(o) {}
    [[nodiscard]] const options_type& options() const noexcept { return inner.options(); }
    [[nodiscard]] hitch::cost_estimate cost(int p, std::size_t n, const hitch::cost_constants& k) const {
        return inner.cost(p, n, k);
    }
    template <hitch::communicator C, hitch::floating_element T>
    void run(ar::transport<C>& t, std::span<T> data, ar::reduce_op op) const {
        inner.run(t, data, op);
        if (t.comm().rank() == 0) *ran = inner.chosen(t, data.size_bytes());
    }

    ar::automatic inner;
    std::shared_ptr<std::string> ran = std::make_shared<std::string>();
};

template <class Schedule>
void run_one(const settings& s, const hitch::comm::simulated_network& net, const std::string& name,
             const Schedule& schedule, int p, std::size_t bytes) {
    const std::size_t count = bytes / sizeof(float);
    const double compute_s = s.compute_ms * 1e-3;
    // After the group's setup, on an idle network; automatic first calibrates (its first call, timed apart).
    constexpr bool calibrates = std::is_same_v<Schedule, ar::automatic>;
    const double start_s = calibrates ? 1000.0 : 1.0;
    // automatic_rerank: calls before the timed one, for its online ranking to try the runners-up and settle.
    constexpr int settle_calls = 32;
    const int settle = name == "automatic_rerank" ? settle_calls : 0;
    const auto wall_start = std::chrono::steady_clock::now();
    reporting_automatic reporting;  // automatic's runs, to name the schedule it took
    if constexpr (calibrates) reporting.inner = schedule;
    std::vector<float> shared;
    hitch::comm::simulated_options options;
    if (s.timing_only) {
        shared.assign(count, 1.0f);
        options.timing_only_memory.push_back(std::as_bytes(std::span<const float>(shared)));
    }
    const auto report = hitch::comm::simulate(
        p, net,
        [&](simulated& comm) {
            ar::group g(comm);
            std::vector<float> own;
            if (!s.timing_only) own.assign(count, static_cast<float>(comm.rank() % 4));
            const hitch::tensor_view<float> data(s.timing_only ? shared.data() : own.data(), count);
            ar::call_options o;
            o.check = false;
            if constexpr (calibrates) {
                comm.advance_to(hitch::seconds_f(1.0));
                for (int c = 0; c <= settle; ++c) ar::allreduce(g, data, ar::reduce_op::sum, reporting, o);
                if (!s.timing_only) std::fill(own.begin(), own.end(), static_cast<float>(comm.rank() % 4));
            }
            comm.advance_to(hitch::seconds_f(start_s));
            comm.compute(hitch::seconds_f(compute_s));
            if constexpr (calibrates)
                ar::allreduce(g, data, ar::reduce_op::sum, reporting, o);
            else
                ar::allreduce(g, data, ar::reduce_op::sum, schedule, o);
            const float want = static_cast<float>(6 * (p / 4) + (p % 4 > 1 ? 1 : 0) + (p % 4 > 2 ? 2 : 0));
            for (std::size_t i = 0; !s.timing_only && i < count; i += 4099)
                if (own[i] != want)
                    throw hitch::comm_error("hitch-simulate: wrong sum on rank " + std::to_string(comm.rank()));
            return 0;
        },
        options);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    if (auto e = report.first_error()) std::rethrow_exception(e);
    double last = 0, sent = 0, across = 0;
    for (const auto& r : report.ranks) {
        last = std::max(last, r.finish_s);
        sent += static_cast<double>(r.bytes_sent);
    }
    for (const auto& l : report.links)  // what left each node through its NIC (topology nodes)
        if (l.name.ends_with(" nic up")) across += static_cast<double>(l.bytes);
    const double step = last - start_s;
    const hitch::cost_constants k = model_constants(s);
    hitch::node_layout layout;
    for (int r = 0; r < p; ++r) layout.node_of_rank.push_back(s.topology == "nodes" ? r / s.ranks_per_node : r);
    layout.nodes = layout.node_of_rank.back() + 1;
    const double model = ar::cost_on(schedule, ar::level_shape::of(layout), bytes, k).seconds(k);
    std::printf(
        "{\"bench\":\"simulate\",\"topology\":\"%s\",\"switching\":\"%s\",\"schedule\":\"%s\",\"p\":%d,\"bytes\":%zu,"
        "\"virtual_s\":%.9g,"
        "\"model_s\":%.9g,\"step_s\":%.9g,\"efficiency\":%.6g,\"bytes_per_rank\":%.9g,"
        "\"bytes_across_nodes_per_rank\":%.9g,\"ran\":\"%s\",\"wall_s\":%.3f}\n",
        s.topology.c_str(), s.switching.c_str(), name.c_str(), p, bytes, step - compute_s, model, step,
        compute_s > 0 ? compute_s / step : 0.0, sent / p, across / p,
        calibrates ? reporting.ran->c_str() : name.c_str(), wall);
    std::fflush(stdout);
}

template <class F>
void with_codec(const std::string& name, F&& f) {
    namespace cx = hitch::compress;
    if (name == "none") return f(cx::none{});
    if (name == "fp16") return f(cx::fp16{});
    if (name == "bf16") return f(cx::bf16{});
    if (name == "onebit") return f(cx::onebit{});
    if (name == "qsgd") return f(cx::qsgd{});
    if (name == "terngrad") return f(cx::terngrad{});
    if (name == "topk") return f(cx::topk{});
    if (name == "randomk") return f(cx::randomk{});
    throw hitch::config_error("hitch-simulate: --compressor " + name +
                              " is not one of none, fp16, bf16, onebit, qsgd, terngrad, topk, randomk");
}

/// Whole training steps of a model (--model): one line per (compressor, schedule, p).
void run_steps(const settings& s, const hitch::comm::simulated_network& net) {
    hitch_bench::step_settings st;
    st.model = hitch_bench::model_named(s.model);
    if (st.model.tensors.empty())
        throw hitch::config_error("hitch-simulate: --model " + s.model +
                                  " is not one of resnet50, resnet101, inception_v3, uniform:N");
    if (!(s.compute_ms > 0)) throw hitch::config_error("hitch-simulate: --model needs --compute-ms > 0");
    st.compute_s = s.compute_ms * 1e-3;
    st.backward_share = s.backward_share;
    st.bucket_bytes = static_cast<std::size_t>(s.bucket_mb * (1 << 20));
    st.overlap = !s.no_overlap;
    st.steps = s.steps;
    st.timing_only = !s.real_data;
    st.jitter_cv = s.jitter_cv;
    if (s.engine == "data_parallel") {
        st.engine = hitch_bench::step_settings::engine_kind::data_parallel;
    } else if (s.engine != "model") {
        throw hitch::config_error("hitch-simulate: --engine " + s.engine + " is not one of model, data_parallel");
    }
    if (s.sharding == "range")
        st.sharding = hitch::sync::shard_by::range;
    else if (s.sharding != "layer")
        throw hitch::config_error("hitch-simulate: --sharding " + s.sharding + " is not one of layer, range");
    using policy = hitch_bench::step_settings::policy_kind;
    const auto policy_of = [](const std::string& name) {
        if (name == "hard") return policy::hard;
        if (name == "local_sgd") return policy::local_sgd;
        if (name == "ssp") return policy::ssp;
        if (name == "backup_workers") return policy::backup_workers;
        throw hitch::config_error("hitch-simulate: --policy " + name +
                                  " is not one of hard, local_sgd, ssp, backup_workers");
    };
    for (const auto& policy_name : s.policies)
        for (const auto& codec_name : s.compressors) {
            st.policy = policy_of(policy_name);
            if (st.policy != policy::hard && st.engine != hitch_bench::step_settings::engine_kind::data_parallel)
                throw hitch::config_error("hitch-simulate: --policy " + policy_name + " needs --engine data_parallel");
            for (const auto& name : s.schedules) {
                if (codec_name != "none" && name != "automatic")
                    throw hitch::config_error(
                        "hitch-simulate: a --compressor other than none exchanges as automatic picks "
                        "for it (compress::aggregate): use --schedule automatic");
                double first = 0;
                for (int p : s.ranks) {
                    st.faults.slow.clear();
                    if (s.straggler != 1.0) st.faults.slow.push_back({p - 1, s.straggler});  // the last rank
                    const auto one = [&](const auto& schedule, const auto& codec) {
                        const auto wall_start = std::chrono::steady_clock::now();
                        const auto r = hitch_bench::simulate_step(p, net, st, schedule, codec);
                        const double wall =
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
                        if (first == 0) first = r.step_s;
                        std::printf(
                            "{\"bench\":\"simulate_step\",\"model\":\"%s\",\"engine\":\"%s\",\"topology\":\"%s\","
                            "\"gbit\":%g,\"policy\":\"%s\",\"straggler\":%g,\"sharding\":\"%s\",\"compressor\":\"%s\","
                            "\"schedule\":\"%s\","
                            "\"p\":%d,\"bucket_bytes\":%zu,\"buckets\":%zu,\"overlap\":%s,\"jitter_cv\":%g,"
                            "\"compute_s\":%.9g,\"step_s\":%.9g,\"rank0_step_s\":%.9g,\"exposed_s\":%.9g,"
                            "\"efficiency\":%.6g,\"relative_efficiency\":%.6g,\"wall_s\":%.3f}\n",
                            s.model.c_str(), s.engine.c_str(), s.topology.c_str(), s.gbit, policy_name.c_str(),
                            s.straggler, s.sharding.c_str(), codec_name.c_str(), name.c_str(), p, st.bucket_bytes,
                            r.buckets, st.overlap ? "true" : "false", st.jitter_cv, st.compute_s, r.step_s,
                            r.rank0_step_s, r.exposed_s, st.compute_s / r.step_s, first / r.step_s, wall);
                        std::fflush(stdout);
                    };
                    if (codec_name == "none")
                        with_schedule(name, [&](const auto& schedule) { one(schedule, hitch::compress::none{}); });
                    else
                        with_codec(codec_name, [&](const auto& codec) { one(ar::automatic{}, codec); });
                }
            }
        }
}

}  // namespace

int main(int argc, char** argv) {
    settings s;
    CLI::App app("hitch-simulate: hitch's all-reduce schedules on a simulated cluster");
    app.add_option("--topology", s.topology, "single_switch, fat_tree or nodes");
    app.add_option("--switching", s.switching,
                   "circuit (a message holds its whole route) or buffered (switches queue it hop by hop)");
    app.add_option("--latency-us", s.latency_us, "nic latency (alpha), microseconds");
    app.add_option("--gbit", s.gbit, "nic bandwidth, Gbit/s");
    app.add_option("--ranks-per-leaf", s.ranks_per_leaf, "fat_tree: ranks per leaf switch");
    app.add_option("--oversubscription", s.oversubscription, "fat_tree: leaf down/up capacity ratio");
    app.add_option("--spine-latency-us", s.spine_latency_us, "fat_tree: latency added across the spine");
    app.add_option("--ranks-per-node", s.ranks_per_node, "nodes: ranks per machine");
    app.add_option("--intra-latency-us", s.intra_latency_us, "nodes: latency inside a machine");
    app.add_option("--intra-gbit", s.intra_gbit, "nodes: each rank's bandwidth inside a machine, Gbit/s");
    app.add_option("--ranks", s.ranks, "world sizes")->delimiter(',');
    app.add_option("--bytes", s.bytes, "buffer sizes in bytes")->delimiter(',');
    app.add_option("--schedule", s.schedules,
                   "schedules: ring, recursive_doubling, rabenseifner, binary_tree, double_binary_tree, "
                   "parameter_server, hierarchical, hierarchical_rabenseifner, automatic (calibrates on the "
                   "simulated network), automatic_model (given the network's constants, measures nothing), "
                   "automatic_rerank (the same, re-ranking online; timed after 32 calls)")
        ->delimiter(',');
    app.add_option("--compute-ms", s.compute_ms, "compute per step before the all-reduce, ms");
    app.add_flag("--timing-only", s.timing_only,
                 "schedules: one buffer shared by every rank, messages from it carry no bytes, sums unchecked");
    app.add_option("--model", s.model, "simulate training steps of resnet50, resnet101 or inception_v3");
    app.add_option("--backward-share", s.backward_share, "--model: the backward pass's share of --compute-ms");
    app.add_option("--bucket-mb", s.bucket_mb, "--model: gradient bucket size, MiB");
    app.add_flag("--no-overlap", s.no_overlap, "--model: exchange the buckets after the backward pass");
    app.add_flag("--real-data", s.real_data, "--model: every rank its own buffers, messages carry their bytes");
    app.add_option("--steps", s.steps, "--model: steps to run (all but the first are timed, their mean printed)");
    app.add_option("--compressor", s.compressors,
                   "--model: none, fp16, bf16, onebit, qsgd, terngrad, topk, randomk (with --schedule automatic)")
        ->delimiter(',');
    app.add_option("--policy", s.policies,
                   "--model with --engine data_parallel: hard, local_sgd (period 4), ssp (bound 3), backup_workers "
                   "(1 backup)")
        ->delimiter(',');
    app.add_option("--straggler", s.straggler, "--model: the last rank computes this many times slower");
    app.add_option("--sharding", s.sharding,
                   "--engine data_parallel, --policy ssp or backup_workers: the servers' shards, layer (whole layers, "
                   "the default) or range (equal ranges of the parameters)");
    app.add_option("--jitter-cv", s.jitter_cv,
                   "--model: each rank's compute per step scaled by 1 + cv z (z standard normal, seeded)");
    app.add_option("--engine", s.engine,
                   "--model: model (the step re-enacted) or data_parallel (hitch::data_parallel)");
    bool versus_local = false;
    app.add_flag("--compare-local", versus_local,
                 "run each schedule on comm::local too and predict it from the constants measured there");
    CLI11_PARSE(app, argc, argv);
    try {
        if (versus_local) {
            for (std::size_t bytes : s.bytes) {
                const hitch::cost_constants k = hitch_bench::measure_local_constants(bytes / 2);
                for (int p : s.ranks)
                    for (const auto& name : s.schedules)
                        with_schedule(name, [&](const auto& schedule) {
                            hitch_bench::compare_local(name, schedule, p, bytes, k);
                        });
            }
            return 0;
        }
        const auto net = network_of(s);
        if (!s.model.empty()) {
            run_steps(s, net);
            return 0;
        }
        for (std::size_t bytes : s.bytes)
            for (int p : s.ranks)
                for (const auto& name : s.schedules)
                    with_schedule(name, [&](const auto& schedule) { run_one(s, net, name, schedule, p, bytes); }, &s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hitch-simulate: %s\n", e.what());
        return 1;
    }
    return 0;
}
