#pragma once
// The checks data_parallel's constructor makes on the model's layers: locally (gradients as large as parameters,
// host memory), then across ranks (the same count, names, sizes, element types, matrix rows and flags everywhere:
// two ranks that differ only in a layer's shape or its weight-decay flag would train different models), naming the
// ranks and layers that differ.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/comm/agree.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/hash.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::train::detail {

/// What every rank must agree on about one layer.
struct layer_descriptor {
    std::uint64_t name_hash = 0;
    std::uint64_t size = 0;
    std::uint64_t rows = 0;
    std::uint8_t type = 0;
    std::uint8_t flags = 0;  // bit 0: exclude_from_adaptation, bit 1: exclude_from_weight_decay
    char name[46] = {};      // for the message only: two layers differ by the fields above

    friend bool operator==(const layer_descriptor& a, const layer_descriptor& b) noexcept {
        return a.name_hash == b.name_hash && a.size == b.size && a.rows == b.rows && a.type == b.type &&
               a.flags == b.flags;
    }
};

[[nodiscard]] inline layer_descriptor describe_layer(std::string_view name, std::size_t size, dtype type,
                                                     std::size_t rows = 0, layer_flags flags = {}) {
    layer_descriptor d;
    d.name_hash = fnv1a(name);
    d.size = size;
    d.rows = rows;
    d.type = static_cast<std::uint8_t>(type);
    d.flags =
        static_cast<std::uint8_t>((flags.exclude_from_adaptation ? 1 : 0) | (flags.exclude_from_weight_decay ? 2 : 0));
    std::memcpy(d.name, name.data(), std::min(name.size(), sizeof(d.name) - 1));
    return d;
}

/// "'fc.weight' (20 x float)", with the rows and flags when they tell the layer apart from `other`.
[[nodiscard]] inline std::string describe_for_message(const layer_descriptor& d, const layer_descriptor& other) {
    // Another rank's name need not end in NUL (a damaged message): read at most the field.
    const std::string_view layer_name(d.name, ::strnlen(d.name, sizeof(d.name)));
    std::string s = hitch::detail::concat("'", layer_name, "' (", d.size, " x ", name(static_cast<dtype>(d.type)));
    if (d.rows != other.rows) s += hitch::detail::concat(", rows ", d.rows);
    if (d.flags != other.flags)
        s += hitch::detail::concat(", exclude_from_adaptation ", (d.flags & 1) != 0 ? "true" : "false",
                                   ", exclude_from_weight_decay ", (d.flags & 2) != 0 ? "true" : "false");
    return s + ")";
}

/// This rank's layers are usable: there is at least one, each has as many gradients as parameters, in the memory of
/// the device data_parallel runs on (`space`, named `device`).
template <class Layer>
void check_layers_locally(std::span<const Layer> layers, memory_space space = memory_space::host,
                          std::string_view device = "cpu") {
    if (layers.empty()) throw config_error("hitch::data_parallel: the model has no layers");
    for (std::size_t k = 0; k < layers.size(); ++k) {
        const Layer& l = layers[k];
        if (l.params.size() != l.grads.size())
            throw config_error(hitch::detail::concat("hitch::data_parallel: layer ", k, " ('", l.name, "') has ",
                                                     l.params.size(), " parameters but ", l.grads.size(),
                                                     " gradient elements"));
        if (l.params.space() != space || l.grads.space() != space) {
            if (space == memory_space::host)
                throw config_error(hitch::detail::concat("hitch::data_parallel: layer ", k, " ('", l.name,
                                                         "') is not in host memory"));
            throw config_error(hitch::detail::concat(
                "hitch::data_parallel: layer ", k, " ('", l.name, "') has its parameters in ", name(l.params.space()),
                " memory and its gradients in ", name(l.grads.space()), " memory; on the device '", device,
                "' both must be in ", name(space), " memory"));
        }
    }
}

/// Every rank must have the same layers: count, then each layer's name, size and element type. One fingerprint
/// is exchanged when they agree; only when they differ is every layer compared, to name the differences.
/// Collective over `control`. `noun` names what is compared in messages ("layers", "buffers").
template <communicator C, class Layer>
void agree_on_layers(C& control, std::span<const Layer> layers, dtype type, std::string_view noun = "layers") {
    comm::agree(control, static_cast<std::uint64_t>(layers.size()),
                hitch::detail::concat("hitch::data_parallel: number of ", noun));
    std::uint64_t fingerprint = fnv1a_basis;
    std::vector<layer_descriptor> mine;
    for (const Layer& l : layers) {
        if constexpr (requires {
                          l.rows;
                          l.flags;
                      })
            mine.push_back(describe_layer(l.name, l.params.size(), type, l.rows, l.flags));
        else
            mine.push_back(describe_layer(l.name, l.params.size(), type));
        const auto* bytes = reinterpret_cast<const std::byte*>(&mine.back());
        fingerprint = fnv1a(std::span<const std::byte>(bytes, offsetof(layer_descriptor, flags) + 1), fingerprint);
    }
    const auto fingerprints = comm::allgather_value(control, fingerprint);
    if (std::all_of(fingerprints.begin(), fingerprints.end(), [&](std::uint64_t f) { return f == fingerprints[0]; }))
        return;
    std::ostringstream s;
    s << "hitch::data_parallel: ranks have different " << noun << ":";
    for (std::size_t k = 0; k < mine.size(); ++k) {
        const auto all = comm::allgather_value(control, mine[k]);
        if (std::all_of(all.begin(), all.end(), [&](const layer_descriptor& d) { return d == all[0]; })) continue;
        s << ' ' << noun.substr(0, noun.size() - 1) << ' ' << k << ":";
        // A rank's entry shows the rows and flags when they differ from some other rank's.
        for (std::size_t r = 0; r < all.size(); ++r) {
            const auto differs = std::find_if(all.begin(), all.end(), [&](const layer_descriptor& d) {
                return d.rows != all[r].rows || d.flags != all[r].flags;
            });
            s << (r == 0 ? " " : ", ") << "rank " << r << " has "
              << describe_for_message(all[r], differs == all.end() ? all[r] : *differs);
        }
        s << ';';
    }
    std::string text = s.str();
    if (text.back() == ';') text.pop_back();
    throw mismatch_error(text);
}

}  // namespace hitch::train::detail
