// What data_parallel refuses on a GPU, checked on the host (train/device_training.hpp): each refusal is
// config_error naming the option, the policy or the codec and schedule, and what works; the exchanges the device path
// runs for each codec path and schedule shape; a host device refuses a compute stream; and the layer checks name the
// memory a layer is in.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/allreduce/hierarchical.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/fp16.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/data_parallel.hpp"
#include "hitch/train/device_training.hpp"
#include "hitch/train/layer_agreement.hpp"

namespace {

namespace td = hitch::train::detail;
using hitch::compress::aggregation_path;
using hitch::compress::exchange_kind;
using hitch::compress::exchange_shape;

template <class O, class X, class P, class S>
std::string refusal(const hitch::data_parallel_options<O, X, P, S>& o) {
    try {
        td::check_device_options(o, "cuda");
    } catch (const hitch::config_error& e) {
        return e.what();
    }
    return {};
}

template <class O, class X = hitch::compress::none, class P = hitch::sync::hard, class S = hitch::allreduce::ring>
using opts = hitch::data_parallel_options<O, X, P, S>;

}  // namespace

TEST_CASE("the device path runs hard and local_sgd; the server and shared-memory policies are refused by name",
          "[cuda][train][refusals]") {
    CHECK(refusal(opts<hitch::optim::sgd>{}).empty());
    CHECK(refusal(opts<hitch::optim::adam, hitch::compress::none, hitch::sync::local_sgd>{}).empty());
    const std::string async = refusal(opts<hitch::optim::sgd, hitch::compress::none, hitch::sync::async>{});
    CHECK_THAT(async, Catch::StartsWith("hitch::data_parallel on cuda: the sync policy 'async' exchanges with a "
                                        "parameter server, whose shards are host code; on the GPU the sync policies "
                                        "are hard and local_sgd (train 'async' with hitch::cpu)"));
    CHECK_THAT(refusal(opts<hitch::optim::sgd, hitch::compress::none, hitch::sync::ssp>{}),
               Catch::Contains("the sync policy 'ssp' exchanges with a parameter server"));
    // Elastic averaging refuses in both forms: its step asks for the server context.
    auto elastic = opts<hitch::optim::sgd, hitch::compress::none, hitch::sync::easgd>{};
    elastic.sync.kind = hitch::sync::easgd::form::synchronous;
    CHECK_THAT(refusal(elastic), Catch::Contains("the sync policy 'easgd' exchanges with a parameter server"));
    CHECK_THAT(refusal(opts<hitch::optim::sgd, hitch::compress::none, hitch::sync::hogwild>{}),
               Catch::Contains("the sync policy 'hogwild' updates one parameter array in host memory shared by the "
                               "ranks' threads; on the GPU the sync policies are hard and local_sgd"));
}

TEST_CASE("zero_stage and check_gradient_contract are refused on the GPU, naming the option",
          "[cuda][train][refusals]") {
    opts<hitch::optim::adam> o;
    o.zero_stage = 1;
    CHECK(refusal(o) ==
          "hitch::data_parallel on cuda: option zero_stage = 1 shards the optimizer state in host memory; on the GPU "
          "every rank keeps the whole state (zero_stage = 0)");
    o.zero_stage = 0;
    o.check_gradient_contract = true;
    CHECK_THAT(refusal(o), Catch::StartsWith("hitch::data_parallel on cuda: option check_gradient_contract = true "
                                             "takes a CRC32C of each gradient on the host"));
    CHECK_THAT(refusal(o), Catch::EndsWith("set it to false"));
    // What the device path runs is not refused.
    opts<hitch::optim::adam> all;
    all.accumulation_steps = 4;
    all.clip_grad_norm = 1.0;
    all.find_unused_layers = true;
    all.uneven_inputs = true;
    all.loss_scaling = true;
    all.replica_check_interval = 3;
    all.overlap = false;
    CHECK(refusal(all).empty());
}

TEST_CASE("codecs re-encoded or gathered in transit run the ring on the GPU; other shapes are refused",
          "[cuda][train][refusals]") {
    // Additive and low-rank codecs: every schedule (the schedule's own all-reduce, on GPU buffers).
    CHECK(refusal(
              opts<hitch::optim::sgd, hitch::compress::fp16, hitch::sync::hard, hitch::allreduce::recursive_doubling>{})
              .empty());
    CHECK(
        refusal(opts<hitch::optim::sgd, hitch::compress::powersgd, hitch::sync::hard, hitch::allreduce::rabenseifner>{})
            .empty());
    // The ring and automatic.
    using ef_topk = hitch::compress::error_feedback<hitch::compress::topk>;
    CHECK(refusal(opts<hitch::optim::sgd, ef_topk>{}).empty());
    CHECK(refusal(opts<hitch::optim::sgd, ef_topk, hitch::sync::hard, hitch::allreduce::automatic>{}).empty());
    CHECK(refusal(opts<hitch::optim::sgd, hitch::compress::onebit, hitch::sync::local_sgd>{}).empty());
    // Recursive doubling merges sparse sets on the host; halving-doubling and hierarchical re-encode on host memory.
    CHECK(refusal(opts<hitch::optim::sgd, ef_topk, hitch::sync::hard, hitch::allreduce::recursive_doubling>{}) ==
          "hitch::data_parallel on cuda: the codec 'ef_topk' is exchanged by the ring all-gather of its messages "
          "on the GPU; the schedule 'recursive_doubling' selects sparse_recursive_doubling, which merges on "
          "host memory: use allreduce::ring or allreduce::automatic");
    CHECK(
        refusal(opts<hitch::optim::sgd, hitch::compress::qsgd, hitch::sync::hard, hitch::allreduce::rabenseifner>{}) ==
        "hitch::data_parallel on cuda: the codec 'qsgd' is re-encoded at every hop of the compression-aware ring on "
        "the GPU; the schedule 'rabenseifner' selects compressed_halving_doubling, which re-encodes on host memory: "
        "use allreduce::ring or allreduce::automatic");
    using hier = hitch::allreduce::hierarchical<hitch::allreduce::ring, hitch::allreduce::ring>;
    CHECK_THAT(refusal(opts<hitch::optim::sgd, hitch::compress::onebit, hitch::sync::hard, hier>{}),
               Catch::Contains("selects compressed_hierarchical, which re-encodes on host memory"));
}

TEST_CASE("the exchange the device runs for each codec path and schedule shape", "[cuda][train][refusals]") {
    using td::device_exchange_for;
    for (const auto shape :
         {exchange_shape::none, exchange_shape::ring, exchange_shape::recursive_doubling,
          exchange_shape::halving_doubling, exchange_shape::hierarchical, exchange_shape::automatic}) {
        CHECK(device_exchange_for(aggregation_path::allreduce, shape) == exchange_kind::allreduce);
        CHECK(device_exchange_for(aggregation_path::low_rank, shape) == exchange_kind::low_rank);
        const bool ring = shape == exchange_shape::ring || shape == exchange_shape::automatic;
        CHECK(device_exchange_for(aggregation_path::compressed_ring, shape) ==
              (ring ? std::optional(exchange_kind::compressed_ring) : std::nullopt));
        CHECK(device_exchange_for(aggregation_path::allgather, shape) ==
              (ring ? std::optional(exchange_kind::allgather_ring) : std::nullopt));
    }
}

TEST_CASE("a host device refuses a compute stream at construction", "[cuda][train][refusals]") {
    hitch::comm::run_local(1, [](hitch::comm::local& comm) {
        std::vector<float> w(8, 1.0f), g(8, 0.0f);
        hitch::cpu dev;
        hitch::data_parallel<hitch::optim::sgd>::options o;
        int not_a_stream = 0;
        o.compute_stream = &not_a_stream;
        CHECK_THROWS_WITH(
            (hitch::data_parallel<hitch::optim::sgd>(comm, dev, {{"w", hitch::view(w), hitch::view(g)}}, o)),
            "hitch::data_parallel on cpu: option compute_stream names a stream, and this device has "
            "none (it is for hitch::cuda::device): leave it null");
    });
}

TEST_CASE("the layer checks name the memory a layer is in", "[cuda][train][refusals]") {
    auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x1000});
    const std::vector<hitch::layer> gpu{{"fc.weight", hitch::tensor_view<float>(fake, 4, hitch::memory_space::cuda),
                                         hitch::tensor_view<float>(fake, 4, hitch::memory_space::cuda)}};
    CHECK_THROWS_WITH(td::check_layers_locally(std::span<const hitch::layer>(gpu)),
                      "hitch::data_parallel: layer 0 ('fc.weight') is not in host memory");
    CHECK_NOTHROW(td::check_layers_locally(std::span<const hitch::layer>(gpu), hitch::memory_space::cuda, "cuda"));
    std::vector<float> host(4);
    const std::vector<hitch::layer> mixed{
        {"fc.bias", hitch::tensor_view<float>(fake, 4, hitch::memory_space::cuda), hitch::view(host)}};
    CHECK_THROWS_WITH(td::check_layers_locally(std::span<const hitch::layer>(mixed), hitch::memory_space::cuda, "cuda"),
                      "hitch::data_parallel: layer 0 ('fc.bias') has its parameters in cuda memory and its gradients "
                      "in host memory; on the device 'cuda' both must be in cuda memory");
}
