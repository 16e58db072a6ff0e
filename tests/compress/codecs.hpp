#pragma once
// Every codec hitch ships, in a few configurations, for the tests that run over all of them.
#include <tuple>

#include "hitch/compress/bf16.hpp"
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

namespace hitch_test {

namespace hc = hitch::compress;

/// Calls f(codec) for one instance of every codec configuration worth testing on its own.
template <class F>
void for_each_codec(F&& f) {
    f(hc::none{});
    f(hc::fp16{});
    f(hc::bf16{});
    f(hc::onebit{});
    f(hc::onebit({.group_size = 64}));
    f(hc::threshold({.tau = 1e-3f}));
    f(hc::topk({.density = 0.05}));
    f(hc::topk({.density = 0.05, .method = hc::topk_method::exact}));
    f(hc::dgc({.final_density = 0.05}));
    f(hc::randomk({.density = 0.05}));
    f(hc::qsgd{});
    f(hc::qsgd({.levels = 3, .group_size = 0, .coding = hc::qsgd_coding::elias_gamma}));
    f(hc::qsgd({.levels = 300, .group_size = 64}));
    f(hc::terngrad{});
    f(hc::terngrad({.clip_sigmas = 2.5}));
    f(hc::powersgd({.rank = 2}));
    f(hc::error_feedback<hc::onebit>{});
    f(hc::error_feedback<hc::topk>(hc::topk({.density = 0.05})));
}

}  // namespace hitch_test
