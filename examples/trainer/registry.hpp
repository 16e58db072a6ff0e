#pragma once
// Names on the command line -> hitch types, and the options each type takes from train_config. One list per
// template argument of hitch::data_parallel. The optimizer is chosen at run time (hitch::optim::one_of); the
// training loop is instantiated for every (compressor, sync policy) the lists allow (only hard sync exchanges
// gradients through a compressor: every other policy pairs with "none").

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/lamb.hpp"
#include "hitch/optim/lars.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/one_of.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/backup_workers.hpp"
#include "hitch/sync/easgd.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/hogwild.hpp"
#include "hitch/sync/local_sgd.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"
#include "option_values.hpp"
#include "train.hpp"

namespace hitch_examples {

template <class T>
struct tag {
    using type = T;
};

/// Throws usage_error: "--flag: 'x' is not one of a, b, c".
[[noreturn]] inline void unknown_name(std::string_view flag, std::string_view name,
                                      const std::vector<std::string>& valid) {
    throw usage_error(not_one_of(flag, name, valid));
}

// ---- optimizers -------------------------------------------------------------------------------------------------

/// Calls f(tag<O>{}) for the optimizer `name` names ("momentum" and "nesterov" share a type).
template <class F>
decltype(auto) with_optimizer(std::string_view name, F&& f) {
    namespace o = hitch::optim;
    if (name == "sgd") return f(tag<o::sgd>{});
    if (name == "momentum" || name == "nesterov") return f(tag<o::momentum>{});
    if (name == "adam") return f(tag<o::adam>{});
    if (name == "adamw") return f(tag<o::adamw>{});
    if (name == "lars") return f(tag<o::lars<o::momentum>>{});
    if (name == "lamb") return f(tag<o::lamb>{});
    unknown_name("--optimizer", name, optimizer_names());
}

template <class O>
typename O::options_type optimizer_options(const train_config& c) {
    namespace o = hitch::optim;
    typename O::options_type opts{};
    const auto wd = static_cast<float>(c.weight_decay);
    if constexpr (std::is_same_v<O, o::sgd>) {
        opts.weight_decay = wd;
    } else if constexpr (std::is_same_v<O, o::momentum>) {
        opts.momentum = static_cast<float>(c.momentum);
        opts.nesterov = c.optimizer == "nesterov";
        opts.weight_decay = wd;
    } else if constexpr (std::is_same_v<O, o::lars<o::momentum>>) {
        opts.base.momentum = static_cast<float>(c.momentum);
        opts.trust_coefficient = static_cast<float>(c.lars_eta);
        opts.weight_decay = wd;
    } else {  // adam, adamw, lamb
        opts.weight_decay = wd;
    }
    return opts;
}

/// Every rule --optimizer names, behind one type that holds the chosen one: the training loop is compiled once
/// for all of them, not once per rule (that product made the trainers take many minutes to build).
using any_optimizer =
    hitch::optim::one_of<hitch::optim::sgd, hitch::optim::momentum, hitch::optim::adam, hitch::optim::adamw,
                         hitch::optim::lars<hitch::optim::momentum>, hitch::optim::lamb>;

/// The optimizer the run steps with: --optimizer, except under --compressor dgc, which keeps the momentum itself
/// and runs plain SGD (registry.cpp).
std::string optimizer_type_name(const train_config& c);

/// The options of the rule the run uses (optimizer_type_name: dgc runs plain SGD).
inline any_optimizer::options_type any_optimizer_options(const train_config& c) {
    return with_optimizer(optimizer_type_name(c), [&](auto o) -> any_optimizer::options_type {
        return optimizer_options<typename decltype(o)::type>(c);
    });
}

// ---- compressors ------------------------------------------------------------------------------------------------

/// Calls f(tag<X>{}) for the codec `name` names; biased codecs come wrapped in error feedback, as their papers use
/// them.
template <class F>
decltype(auto) with_compressor(std::string_view name, F&& f) {
    namespace x = hitch::compress;
    if (name == "none") return f(tag<x::none>{});
    if (name == "fp16") return f(tag<x::fp16>{});
    if (name == "bf16") return f(tag<x::bf16>{});
    if (name == "onebit") return f(tag<x::error_feedback<x::onebit>>{});
    if (name == "threshold") return f(tag<x::error_feedback<x::threshold>>{});
    if (name == "topk") return f(tag<x::error_feedback<x::topk>>{});
    if (name == "dgc") return f(tag<x::dgc>{});
    if (name == "randomk") return f(tag<x::error_feedback<x::randomk>>{});  // with memory (Stich et al. 2018)
    if (name == "qsgd") return f(tag<x::qsgd>{});
    if (name == "terngrad") return f(tag<x::terngrad>{});
    if (name == "powersgd") return f(tag<x::powersgd>{});
    unknown_name("--compressor", name, compressor_names());
}

template <class X>
X make_compressor(const train_config& c, std::size_t steps_per_epoch, int ranks) {
    namespace x = hitch::compress;
    if constexpr (std::is_same_v<X, x::error_feedback<x::threshold>>) {
        x::threshold_options t;
        t.tau = static_cast<float>(c.threshold_tau);
        return X(x::threshold(t));
    } else if constexpr (std::is_same_v<X, x::error_feedback<x::onebit>>) {
        x::onebit_options o;
        o.group_size = c.onebit_group;
        return X(x::onebit(o));
    } else if constexpr (std::is_same_v<X, x::error_feedback<x::topk>>) {
        x::topk_options t;
        t.density = c.density;
        return X(x::topk(t));
    } else if constexpr (std::is_same_v<X, x::dgc>) {
        // The paper's recipe: the optimizer's momentum as the momentum correction (plain SGD then applies what
        // arrives), the sparsity warm-up over the first four epochs, one stage per epoch.
        x::dgc_options d;
        d.momentum = c.optimizer == "sgd" ? 0.0 : c.momentum;
        d.nesterov = c.optimizer == "nesterov";
        d.final_density = c.density;
        d.warmup_steps = steps_per_epoch;
        d.ranks = ranks;
        return X(d);
    } else if constexpr (std::is_same_v<X, x::error_feedback<x::randomk>>) {
        // Sparsified SGD with memory (Stich, Cordonnier and Jaggi 2018): unscaled values, the rest kept in the
        // residual. The unbiased n/k scaling without memory multiplies the variance by n/k and costs accuracy.
        x::randomk_options r;
        r.density = c.density;
        r.scale = false;
        return X(x::randomk(r));
    } else if constexpr (std::is_same_v<X, x::terngrad>) {
        x::terngrad_options t;
        t.clip_sigmas = c.terngrad_clip;
        return X(t);
    } else if constexpr (std::is_same_v<X, x::qsgd>) {
        x::qsgd_options q;
        q.levels = c.qsgd_levels;
        return X(q);
    } else if constexpr (std::is_same_v<X, x::powersgd>) {
        x::powersgd_options p;
        p.rank = c.powersgd_rank;
        return X(p);
    } else {
        return X{};
    }
}

// ---- sync policies ----------------------------------------------------------------------------------------------

template <class F>
decltype(auto) with_sync(std::string_view name, F&& f) {
    namespace s = hitch::sync;
    if (name == "hard") return f(tag<s::hard>{});
    if (name == "local_sgd") return f(tag<s::local_sgd>{});
    if (name == "soft") return f(tag<s::soft>{});
    if (name == "async") return f(tag<s::async>{});
    if (name == "ssp") return f(tag<s::ssp>{});
    if (name == "easgd") return f(tag<s::easgd>{});
    if (name == "backup") return f(tag<s::backup_workers>{});
    if (name == "hogwild") return f(tag<s::hogwild>{});
    unknown_name("--sync", name, sync_names());
}

/// A policy whose options include a parameter server's (hitch::sync::server_options).
template <class P>
concept has_server_options = requires(typename P::options_type o) { o.server; };

template <class P>
typename P::options_type sync_options(const train_config& c) {
    namespace s = hitch::sync;
    typename P::options_type o{};
    if constexpr (has_server_options<P>) {
        o.server.placement =
            c.server_placement == "dedicated" ? s::server_placement::dedicated : s::server_placement::colocated;
        o.server.dedicated_servers = c.dedicated_servers;
        o.server.sharding = c.shard_by == "range" ? s::shard_by::range : s::shard_by::layer;
        o.server.deterministic = c.deterministic;
    }
    if constexpr (std::is_same_v<P, s::local_sgd>) {
        o.period = c.local_sgd_period;
        o.block_momentum = c.block_momentum;
        o.block_learning_rate = c.block_lr;
        o.nesterov = c.block_nesterov == "on";
    } else if constexpr (std::is_same_v<P, s::soft>) {
        o.gradients_per_update = c.soft_c;
        o.scale_by_staleness = c.staleness_scaling == "on";
    } else if constexpr (std::is_same_v<P, s::async>) {
        o.fetch_every = c.fetch_every;
        o.push_every = c.push_every;
    } else if constexpr (std::is_same_v<P, s::ssp>) {
        o.staleness_bound = c.ssp_bound;
    } else if constexpr (std::is_same_v<P, s::easgd>) {
        o.period = c.easgd_period;
        o.alpha = c.easgd_alpha;
        o.kind = c.easgd_form == "synchronous" ? s::easgd::form::synchronous : s::easgd::form::asynchronous;
    } else if constexpr (std::is_same_v<P, s::backup_workers>) {
        o.backups = c.backups;
    }
    return o;
}

/// The options the policy runs with, as the JSON line reports them ("sync_options"): the fields of
/// P::options_type that the command line sets, read back from what sync_options<P> built.
template <class P>
nlohmann::ordered_json sync_options_json(const typename P::options_type& o) {
    namespace s = hitch::sync;
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if constexpr (std::is_same_v<P, s::local_sgd>) {
        j["period"] = o.period;
        j["average_optimizer_state"] = o.average_optimizer_state;
        j["block_momentum"] = o.block_momentum;
        if (o.block_momentum > 0.0) {
            j["block_learning_rate"] = o.block_learning_rate;
            j["nesterov"] = o.nesterov;
        }
    } else if constexpr (std::is_same_v<P, s::soft>) {
        j["gradients_per_update"] = o.gradients_per_update;
        j["scale_by_staleness"] = o.scale_by_staleness;
    } else if constexpr (std::is_same_v<P, s::async>) {
        j["fetch_every"] = o.fetch_every;
        j["push_every"] = o.push_every;
    } else if constexpr (std::is_same_v<P, s::ssp>) {
        j["staleness_bound"] = o.staleness_bound;
    } else if constexpr (std::is_same_v<P, s::easgd>) {
        j["period"] = o.period;
        j["alpha"] = o.alpha;
        j["form"] = o.kind == s::easgd::form::synchronous ? "synchronous" : "asynchronous";
    } else if constexpr (std::is_same_v<P, s::backup_workers>) {
        j["backups"] = o.backups;
    }
    if constexpr (has_server_options<P>) {
        bool server = true;  // easgd's synchronous form averages over all ranks and runs no server
        if constexpr (std::is_same_v<P, s::easgd>) server = o.kind == s::easgd::form::asynchronous;
        if (server) {
            j["placement"] = std::string(s::to_string(o.server.placement));
            if (o.server.placement == s::server_placement::dedicated) j["servers"] = o.server.dedicated_servers;
            j["sharding"] = std::string(s::to_string(o.server.sharding));
            j["deterministic"] = o.server.deterministic;
        }
    }
    return j;
}

/// sync_options_json for the policy --sync names.
inline nlohmann::ordered_json sync_options_json(const train_config& c) {
    return with_sync(c.sync, [&](auto p) {
        using P = typename decltype(p)::type;
        return sync_options_json<P>(sync_options<P>(c));
    });
}

}  // namespace hitch_examples
