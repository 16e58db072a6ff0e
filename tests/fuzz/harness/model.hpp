#pragma once
// The small configuration every checkpoint harness loads into, and make_seeds saves from: two layers, the
// codecs, sync policies, optimizers and schedule whose states a checkpoint carries. HITCH_FUZZ_READER (the
// harness binary) picks which section the fuzzer's bytes go to.
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "hitch/allreduce/automatic.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/exchange/state_blob.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/engine_checkpoint.hpp"

namespace hitch_fuzz {

namespace hc = hitch::compress;

/// Which section each harness binary feeds.
enum reader : int { whole_file = 0, optimizer_state = 1, codec_state = 2, sync_state = 3 };

struct model {
    std::vector<float> w = std::vector<float>(6, 0.5f), b = std::vector<float>(2, -0.25f);
    std::vector<float> gw = std::vector<float>(6, 0.0f), gb = std::vector<float>(2, 0.0f);
    std::vector<hitch::layer> layers;

    model() {
        layers.push_back({"fc.weight", hitch::tensor_view<float>(w), hitch::tensor_view<float>(gw), {}, 2});
        layers.push_back({"fc.bias", hitch::tensor_view<float>(b), hitch::tensor_view<float>(gb),
                          hitch::layer_flags::bias_or_norm(), 0});
    }
    model(const model&) = delete;
    model& operator=(const model&) = delete;

    [[nodiscard]] hitch::train::detail::checkpoint_identity identity() const {
        hitch::train::detail::checkpoint_identity id;
        id.ranks = 2;
        id.rank = 1;
        id.optimizer = "adam";
        id.compressor = "onebit";
        id.sync = "hard";
        id.buckets = 2;
        id.bucket_bytes = 16;
        id.loss_scaling = true;
        id.layers = layers;
        return id;
    }
};

inline constexpr std::size_t bucket_elements[2] = {6, 2};

inline hitch::amp::loss_scaler_options scaler_options() { return {}; }

/// The codecs whose aggregation states hitch.compressor holds (one harness input picks one).
using codecs = std::tuple<hc::onebit, hc::topk, hc::qsgd, hc::powersgd, hc::error_feedback<hc::onebit>>;
inline constexpr std::size_t codec_count = std::tuple_size_v<codecs>;

inline hitch::sync::local_sgd block_momentum_sgd() {
    hitch::sync::local_sgd::options_type o;
    o.period = 4;
    o.block_momentum = 0.5;
    return hitch::sync::local_sgd(o);
}
inline hitch::sync::local_sgd plain_sgd() {
    hitch::sync::local_sgd::options_type o;
    o.period = 4;
    return hitch::sync::local_sgd(o);
}
inline hitch::sync::easgd easgd_policy() { return hitch::sync::easgd(hitch::sync::easgd::options_type{}); }
inline hitch::sync::async async_policy() { return hitch::sync::async(hitch::sync::async::options_type{}); }
inline hitch::sync::ssp ssp_policy() { return hitch::sync::ssp(hitch::sync::ssp_options{}); }

}  // namespace hitch_fuzz
