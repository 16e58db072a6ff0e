#pragma once
// What data_parallel writes into a checkpoint and reads back, one section at a time (the file itself:
// hitch/train/checkpoint.hpp). Each read_* checks its section and returns the state it holds without touching the
// engine, so load() validates everything before it changes anything.
//
//   hitch.meta        the step and the save's generation, then the configuration the checkpoint belongs to (text,
//                     one item per line)
//   hitch.params      every FP32 parameter (the masters under mixed precision), in layer order
//   hitch.optimizer   the optimizer's state (optim::model_optimizer::save)
//   hitch.compressor  per bucket: u64 length, then the codec's state and its residual
//   hitch.scaler      the loss scaler's state, with loss scaling only
//   hitch.sync        the sync policy's state
//   hitch.schedule    the all-reduce schedule's state, for a stateful_schedule only (older files lack it)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/amp/loss_scaler.hpp"
#include "hitch/concepts/compressor.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregate.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/stateful_schedule.hpp"

namespace hitch::train::detail {

using hitch::detail::concat;

/// The configuration a checkpoint must match to be loaded.
struct checkpoint_identity {
    int ranks = 1;
    int rank = 0;
    std::string_view optimizer;
    std::string_view compressor;
    std::string_view sync;
    dtype parameters = dtype::f32;
    std::size_t buckets = 0;
    std::size_t bucket_bytes = 0;
    bool loss_scaling = false;
    std::span<const hitch::layer> layers;
};

[[nodiscard]] inline std::string load_error(std::string_view path, std::string_view what) {
    return concat("hitch::data_parallel::load: ", path, ": ", what);
}

/// Where a save was taken: the step, and the save's generation (a number all ranks of one save share, drawn by
/// rank 0; 0 in files written before generations were recorded).
struct checkpoint_position {
    std::uint64_t step = 0;
    std::uint64_t generation = 0;
    friend bool operator==(const checkpoint_position&, const checkpoint_position&) = default;
};

/// One item per line; with a position, the first lines are "step <n>" and "generation <g>".
[[nodiscard]] inline std::string meta_text(const checkpoint_identity& id, std::optional<checkpoint_position> position) {
    std::ostringstream s;
    if (position) s << "step " << position->step << "\ngeneration " << position->generation << '\n';
    s << "hitch checkpoint 1\n"
      << "ranks " << id.ranks << " rank " << id.rank << '\n'
      << "optimizer " << id.optimizer << '\n'
      << "compressor " << id.compressor << '\n'
      << "sync " << id.sync << '\n'
      << "parameters " << name(id.parameters) << '\n'
      << "buckets " << id.buckets << " of " << id.bucket_bytes << " bytes\n"
      << "loss_scaling " << (id.loss_scaling ? "on" : "off") << '\n';
    for (const hitch::layer& l : id.layers) s << "layer " << l.name << ' ' << l.size() << '\n';
    return s.str();
}

inline void write_meta(checkpoint_writer& w, const checkpoint_identity& id, const checkpoint_position& position) {
    const std::string text = meta_text(id, position);
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    w.add("hitch.meta", std::vector<std::byte>(p, p + text.size()));
}

/// The saved step and generation, once the saved configuration is found equal to `id` (else mismatch_error).
[[nodiscard]] inline checkpoint_position read_meta(const checkpoint_reader& r, const checkpoint_identity& id) {
    const auto meta = r.section("hitch.meta");
    std::string saved(reinterpret_cast<const char*>(meta.data()), meta.size());
    checkpoint_position at;
    const auto number = [&](std::string_view key, std::uint64_t& into) {
        if (saved.rfind(key, 0) != 0) return false;
        const std::size_t end = saved.find('\n');
        try {
            std::size_t used = 0;
            const std::string digits = saved.substr(key.size(), end - key.size());
            into = std::stoull(digits, &used);
            if (used != digits.size()) throw std::invalid_argument("trailing characters");
        } catch (const std::logic_error&) {
            throw corrupt_message_error(load_error(r.path(), concat("the ", key, "number is unreadable")));
        }
        saved.erase(0, end == std::string::npos ? saved.size() : end + 1);
        return true;
    };
    if (!number("step ", at.step)) throw corrupt_message_error(load_error(r.path(), "the step number is missing"));
    (void)number("generation ", at.generation);  // older files have none
    const std::string expected = meta_text(id, std::nullopt);
    if (saved != expected) {
        const auto one_line = [](std::string s) {
            std::replace(s.begin(), s.end(), '\n', ' ');
            return s;
        };
        throw mismatch_error(concat("hitch::data_parallel::load: ", r.path(),
                                    " was written by another configuration.\n  saved:    ", one_line(saved),
                                    "\n  this run: ", one_line(expected)));
    }
    return at;
}

/// Copies between host memory and host memory (the parameter sections' default); a device the host cannot read
/// passes its own copies.
struct memcpy_copies {
    void to_host(void* dst, const void* src, std::size_t bytes) const {
        if (bytes != 0) std::memcpy(dst, src, bytes);
    }
    void from_host(void* dst, const void* src, std::size_t bytes) const {
        if (bytes != 0) std::memcpy(dst, src, bytes);
    }
};

template <class Copies = memcpy_copies>
void write_parameters(checkpoint_writer& w, std::span<const hitch::layer> layers, const Copies& copies = {}) {
    std::size_t total = 0;
    for (const hitch::layer& l : layers) total += l.size();
    std::vector<std::byte> params(total * sizeof(float));
    std::size_t at = 0;
    for (const hitch::layer& l : layers) {
        copies.to_host(params.data() + at, l.params.data(), l.size() * sizeof(float));
        at += l.size() * sizeof(float);
    }
    w.add("hitch.params", std::move(params));
}

/// The saved parameters, checked to be as many as `layers` hold.
[[nodiscard]] inline std::span<const std::byte> read_parameters(const checkpoint_reader& r,
                                                                std::span<const hitch::layer> layers) {
    const auto params = r.section("hitch.params");
    std::size_t total = 0;
    for (const hitch::layer& l : layers) total += l.size();
    if (params.size() != total * sizeof(float))
        throw corrupt_message_error(load_error(
            r.path(), concat("parameters section has ", params.size(), " bytes, expected ", total * sizeof(float))));
    return params;
}

template <class Copies = memcpy_copies>
void restore_parameters(std::span<const std::byte> params, std::span<const hitch::layer> layers,
                        const Copies& copies = {}) {
    std::size_t at = 0;
    for (const hitch::layer& l : layers) {
        copies.from_host(l.params.data(), params.data() + at, l.size() * sizeof(float));
        at += l.size() * sizeof(float);
    }
}

/// Under ZeRO with an FP16 or BF16 model, the model's own parameters (every layer; the FP32 masters saved are this
/// rank's pieces only).
template <class Low>
void write_model_parameters(checkpoint_writer& w, const std::vector<tensor_view<Low>>& params) {
    std::vector<std::byte> blob;
    for (const tensor_view<Low>& v : params) {
        const auto bytes = std::as_bytes(std::span<const Low>(v.data(), v.size()));
        blob.insert(blob.end(), bytes.begin(), bytes.end());
    }
    w.add("hitch.model_params", std::move(blob));
}

template <class Low>
[[nodiscard]] std::span<const std::byte> read_model_parameters(const checkpoint_reader& r,
                                                               const std::vector<tensor_view<Low>>& params) {
    const auto blob = r.section("hitch.model_params");
    std::size_t total = 0;
    for (const tensor_view<Low>& v : params) total += v.size();
    if (blob.size() != total * sizeof(Low))
        throw corrupt_message_error(load_error(
            r.path(), concat("model parameters section has ", blob.size(), " bytes, expected ", total * sizeof(Low))));
    return blob;
}

template <class Low>
void restore_model_parameters(std::span<const std::byte> blob, const std::vector<tensor_view<Low>>& params) {
    std::size_t at = 0;
    for (const tensor_view<Low>& v : params) {
        std::memcpy(v.data(), blob.data() + at, v.size() * sizeof(Low));
        at += v.size() * sizeof(Low);
    }
}

/// The codec section from `save(b, blob)`, which appends bucket b's aggregation-state blob (compress::save_state's
/// form, whichever memory the state lives in).
template <class SaveBlob>
void write_codec_blobs(checkpoint_writer& w, std::size_t buckets, SaveBlob&& save) {
    std::vector<std::byte> blob;
    for (std::size_t b = 0; b < buckets; ++b) {
        std::vector<std::byte> one;  // the codec's state and the compressed ring's residual, checksummed
        save(b, one);
        const std::uint64_t n = one.size();
        const auto* p = reinterpret_cast<const std::byte*>(&n);
        blob.insert(blob.end(), p, p + sizeof(n));
        blob.insert(blob.end(), one.begin(), one.end());
    }
    w.add("hitch.compressor", std::move(blob));
}

/// Hands bucket b's saved blob to `load(b, bytes)`, which checks it (corrupt_message_error) and keeps what it read
/// aside; the section's framing is checked here.
template <class LoadBlob>
void read_codec_blobs(const checkpoint_reader& r, std::size_t buckets, LoadBlob&& load) {
    const auto blob = r.section("hitch.compressor");
    std::size_t at = 0;
    const auto take = [&](std::uint64_t n) {
        if (blob.size() - at < n) throw corrupt_message_error(load_error(r.path(), "compressor section is truncated"));
        const auto part = blob.subspan(at, static_cast<std::size_t>(n));
        at += static_cast<std::size_t>(n);
        return part;
    };
    for (std::size_t b = 0; b < buckets; ++b) {
        std::uint64_t n = 0;
        const auto length = take(sizeof(n));
        std::memcpy(&n, length.data(), sizeof(n));
        try {
            load(b, take(n));
        } catch (const corrupt_message_error& e) {
            throw corrupt_message_error(load_error(r.path(), concat("bucket ", b, " compressor state: ", e.what())));
        }
    }
    if (at != blob.size()) throw corrupt_message_error(load_error(r.path(), "compressor section has trailing bytes"));
}

/// `state_of(b)` is bucket b's aggregation state.
template <compressor X, class StateOf>
void write_codec_states(checkpoint_writer& w, const X& codec, std::size_t buckets, StateOf&& state_of) {
    write_codec_blobs(
        w, buckets, [&](std::size_t b, std::vector<std::byte>& one) { compress::save_state(codec, state_of(b), one); });
}

/// Every bucket's saved aggregation state, each loaded into a fresh `make_state(b)`.
template <compressor X, class MakeState>
[[nodiscard]] std::vector<std::optional<compress::aggregation_state<X>>> read_codec_states(const checkpoint_reader& r,
                                                                                           const X& codec,
                                                                                           std::size_t buckets,
                                                                                           MakeState&& make_state) {
    std::vector<std::optional<compress::aggregation_state<X>>> states(buckets);
    read_codec_blobs(r, buckets, [&](std::size_t b, std::span<const std::byte> bytes) {
        states[b].emplace(make_state(b));
        compress::load_state(codec, bytes, *states[b]);
    });
    return states;
}

inline void write_scaler(checkpoint_writer& w, const amp::loss_scaler_state& s) {
    std::vector<std::byte> blob(sizeof(s));
    std::memcpy(blob.data(), &s, sizeof(s));
    w.add("hitch.scaler", std::move(blob));
}

/// The saved loss scaler state, checked against this run's scaler options.
[[nodiscard]] inline amp::loss_scaler_state read_scaler(const checkpoint_reader& r,
                                                        const amp::loss_scaler_options& options) {
    const auto blob = r.section("hitch.scaler");
    if (blob.size() != sizeof(amp::loss_scaler_state))
        throw corrupt_message_error(load_error(r.path(), "bad scaler section"));
    amp::loss_scaler_state s;
    std::memcpy(&s, blob.data(), sizeof(s));
    option_validator("hitch::data_parallel::load (loss scaler)")
        .closed("scale", s.scale, options.min_scale, options.max_scale)
        .half_open("good_steps", s.good_steps, std::uint64_t{0}, options.growth_interval);
    return s;
}

template <class P>
void write_sync(checkpoint_writer& w, const P& policy) {
    std::vector<std::byte> blob;
    policy.save_state(blob);
    w.add("hitch.sync", std::move(blob));
}

/// A copy of `policy` with the saved state.
template <class P>
[[nodiscard]] P read_sync(const checkpoint_reader& r, const P& policy) {
    P loaded = policy;
    loaded.load_state(r.section("hitch.sync"));
    return loaded;
}

template <class S>
void write_schedule(checkpoint_writer& w, const S& schedule) {
    if constexpr (stateful_schedule<S>) {
        std::vector<std::byte> blob;
        schedule.save_state(blob);
        w.add("hitch.schedule", std::move(blob));
    }
}

/// The saved schedule state, in a copy of `schedule`; nothing when the schedule has no state or the checkpoint
/// (an older file) holds none, and the current state stays.
template <class S>
[[nodiscard]] std::optional<S> read_schedule(const checkpoint_reader& r, const S& schedule) {
    if constexpr (stateful_schedule<S>) {
        if (!r.has("hitch.schedule")) return std::nullopt;
        std::optional<S> loaded(schedule);
        loaded->load_state(r.section("hitch.schedule"));
        return loaded;
    } else {
        return std::nullopt;
    }
}

}  // namespace hitch::train::detail
