#pragma once
// The versioned binary form of an optimizer's per-layer state, so a run resumes exactly:
//
//   "HITCHOPT"                 8 bytes, magic
//   u32 version                1
//   u32 byte-order mark        0x01020304 as written by the saving host
//   u32 n, n bytes             optimizer name (O::name, e.g. "lars<momentum>")
//   u64 layer count
//   per layer:  u32 n, n bytes (name), u64 parameter count, u64 steps, u32 buffer count, u64 size of each buffer
//   per layer, per buffer: size * 4 bytes of float
//   u64 checksum               FNV-1a (64 bit) of every byte above
//
// Loading reads and checks everything before it changes anything: a truncated or corrupt stream (magic, version,
// byte order, checksum) is corrupt_message_error; a well-formed state of another optimizer or another model
// (id, layer count, a layer's size, a buffer's size) is mismatch_error naming both sides. Integers are written in
// the host's byte order; a state saved on a host of the other order is refused by the byte-order mark.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hitch/concepts/device.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::optim {

inline constexpr char state_magic[8] = {'H', 'I', 'T', 'C', 'H', 'O', 'P', 'T'};
inline constexpr std::uint32_t state_version = 1;

namespace detail {

using hitch::detail::concat;

inline constexpr std::uint32_t byte_order_mark = 0x01020304u;
inline constexpr std::uint32_t max_id_bytes = 1024;
inline constexpr std::uint32_t max_name_bytes = 1u << 16;
inline constexpr std::uint32_t max_buffers = 64;

/// FNV-1a, 64 bit, fed incrementally.
class fnv1a64 {
public:
    void update(const void* data, std::size_t bytes) noexcept {
        const auto* p = static_cast<const unsigned char*>(data);
        std::uint64_t h = h_;
        for (std::size_t i = 0; i < bytes; ++i) {
            h ^= p[i];
            h *= 0x100000001b3ull;
        }
        h_ = h;
    }
    [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

private:
    std::uint64_t h_ = 0xcbf29ce484222325ull;
};

class state_writer {
public:
    explicit state_writer(std::ostream& out) : out_(out) {}
    void bytes(const void* p, std::size_t n) {
        sum_.update(p, n);
        out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
        if (!out_) throw error("hitch::optim::save_state: writing the optimizer state failed");
    }
    template <class T>
    void value(T v) {
        bytes(&v, sizeof v);
    }
    void text(std::string_view s) {
        value(static_cast<std::uint32_t>(s.size()));
        bytes(s.data(), s.size());
    }
    void finish() {
        const std::uint64_t c = sum_.value();
        out_.write(reinterpret_cast<const char*>(&c), sizeof c);
        if (!out_) throw error("hitch::optim::save_state: writing the optimizer state failed");
    }

private:
    std::ostream& out_;
    fnv1a64 sum_;
};

class state_reader {
public:
    explicit state_reader(std::istream& in) : in_(in) {}
    void bytes(void* p, std::size_t n, std::string_view what) {
        in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
        if (static_cast<std::size_t>(in_.gcount()) != n)
            throw corrupt_message_error(concat("hitch::optim::load_state: the state is truncated (reading ", what,
                                               ")"));
        sum_.update(p, n);
    }
    void skip(std::uint64_t n, std::string_view what) {
        char scratch[65536];
        while (n > 0) {
            const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, sizeof scratch));
            bytes(scratch, k, what);
            n -= k;
        }
    }
    template <class T>
    T value(std::string_view what) {
        T v{};
        bytes(&v, sizeof v, what);
        return v;
    }
    std::string text(std::uint32_t limit, std::string_view what) {
        const auto n = value<std::uint32_t>(what);
        if (n > limit)
            throw corrupt_message_error(concat("hitch::optim::load_state: ", what, " length ", n,
                                               " exceeds the limit of ", limit, " bytes"));
        std::string s(n, '\0');
        bytes(s.data(), n, what);
        return s;
    }
    void verify_checksum() {
        const std::uint64_t expected = sum_.value();
        std::uint64_t stored = 0;
        in_.read(reinterpret_cast<char*>(&stored), sizeof stored);
        if (in_.gcount() != sizeof stored)
            throw corrupt_message_error("hitch::optim::load_state: the state is truncated (reading the checksum)");
        if (stored != expected)
            throw corrupt_message_error("hitch::optim::load_state: checksum mismatch: the state is corrupt");
    }

private:
    std::istream& in_;
    fnv1a64 sum_;
};

}  // namespace detail

/// Writes the state of `layers` (one state per layer) to `out` in the form above. States live on `dev`.
template <class State, device D>
void save_state(std::ostream& out, std::string_view id, std::span<const layer> layers, std::span<State> states,
                D& dev) {
    if (layers.size() != states.size())
        throw config_error(detail::concat("hitch::optim::save_state: ", layers.size(), " layers but ", states.size(),
                                          " states"));
    detail::state_writer w(out);
    w.bytes(state_magic, sizeof state_magic);
    w.value(state_version);
    w.value(detail::byte_order_mark);
    w.text(id);
    w.value(static_cast<std::uint64_t>(layers.size()));
    for (std::size_t i = 0; i < layers.size(); ++i) {
        w.text(layers[i].name);
        w.value(static_cast<std::uint64_t>(layers[i].size()));
        w.value(static_cast<std::uint64_t>(states[i].steps));
        const auto buffers = states[i].buffers();
        w.value(static_cast<std::uint32_t>(std::ranges::size(buffers)));
        for (const tensor_view<float> b : buffers) w.value(static_cast<std::uint64_t>(b.size()));
    }
    std::vector<float> host;
    for (auto& s : states)
        for (const tensor_view<float> b : s.buffers()) {
            host.resize(b.size());
            dev.copy_to_host(host.data(), b.data(), b.size_bytes());
            w.bytes(host.data(), b.size_bytes());
        }
    w.finish();
}

/// Reads a state written by save_state into `states` (which must have the saved layout), or throws without
/// changing anything (see the file comment for which error says what).
template <class State, device D>
void load_state(std::istream& in, std::string_view id, std::span<const layer> layers, std::span<State> states,
                D& dev) {
    using detail::concat;
    if (layers.size() != states.size())
        throw config_error(concat("hitch::optim::load_state: ", layers.size(), " layers but ", states.size(),
                                  " states"));
    detail::state_reader r(in);
    char magic[sizeof state_magic];
    r.bytes(magic, sizeof magic, "the magic");
    if (std::memcmp(magic, state_magic, sizeof magic) != 0)
        throw corrupt_message_error("hitch::optim::load_state: not a hitch optimizer state (bad magic)");
    const auto version = r.value<std::uint32_t>("the version");
    if (version != state_version)
        throw corrupt_message_error(concat("hitch::optim::load_state: state format version ", version,
                                           " is not supported (this build reads version ", state_version, ")"));
    const auto bom = r.value<std::uint32_t>("the byte-order mark");
    if (bom != detail::byte_order_mark)
        throw corrupt_message_error("hitch::optim::load_state: the state was written with another byte order "
                                    "or is corrupt (bad byte-order mark)");
    const std::string saved_id = r.text(detail::max_id_bytes, "the optimizer id");
    const auto count = r.value<std::uint64_t>("the layer count");

    struct saved_layer {
        std::string name;
        std::uint64_t size = 0;
        std::uint64_t steps = 0;
        std::vector<std::uint64_t> buffers;
    };
    std::vector<saved_layer> saved;
    for (std::uint64_t i = 0; i < count; ++i) {
        saved_layer s;
        s.name = r.text(detail::max_name_bytes, "a layer name");
        s.size = r.value<std::uint64_t>("a layer size");
        s.steps = r.value<std::uint64_t>("a layer step count");
        const auto nb = r.value<std::uint32_t>("a buffer count");
        if (nb > detail::max_buffers)
            throw corrupt_message_error(concat("hitch::optim::load_state: layer ", i, " claims ", nb,
                                               " state buffers (corrupt)"));
        for (std::uint32_t b = 0; b < nb; ++b) s.buffers.push_back(r.value<std::uint64_t>("a buffer size"));
        saved.push_back(std::move(s));
    }

    // Stage the data that fits this model; skip (but checksum) what does not, so corruption is told apart from
    // a different model.
    const auto fits = [&](std::size_t i, std::size_t b) {
        if (i >= states.size()) return false;
        const auto buffers = states[i].buffers();
        if (b >= std::ranges::size(buffers)) return false;
        return std::ranges::begin(buffers)[static_cast<std::ptrdiff_t>(b)].size() == saved[i].buffers[b];
    };
    std::vector<std::vector<float>> staged;
    for (std::size_t i = 0; i < saved.size(); ++i)
        for (std::size_t b = 0; b < saved[i].buffers.size(); ++b) {
            const std::uint64_t n = saved[i].buffers[b];
            if (fits(i, b)) {
                staged.emplace_back(static_cast<std::size_t>(n));
                r.bytes(staged.back().data(), static_cast<std::size_t>(n) * sizeof(float), "state data");
            } else {
                if (n > (std::uint64_t{1} << 61))
                    throw corrupt_message_error("hitch::optim::load_state: a buffer size is impossibly large");
                r.skip(n * sizeof(float), "state data");
            }
        }
    r.verify_checksum();

    if (saved_id != id)
        throw mismatch_error(concat("hitch::optim::load_state: the state was saved by optimizer '", saved_id,
                                    "' but is being loaded into '", id, "'"));
    if (saved.size() != layers.size())
        throw mismatch_error(concat("hitch::optim::load_state: the state has ", saved.size(),
                                    " layers but the model has ", layers.size()));
    for (std::size_t i = 0; i < layers.size(); ++i) {
        if (saved[i].size != layers[i].size())
            throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " ('", layers[i].name, "') has ",
                                        layers[i].size(), " parameters but the saved layer ", i, " ('",
                                        saved[i].name, "') has ", saved[i].size));
        const auto buffers = states[i].buffers();
        if (saved[i].buffers.size() != std::ranges::size(buffers))
            throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " ('", layers[i].name, "') has ",
                                        std::ranges::size(buffers), " state buffers but the saved state has ",
                                        saved[i].buffers.size(), " (different options, e.g. amsgrad?)"));
        for (std::size_t b = 0; b < saved[i].buffers.size(); ++b)
            if (!fits(i, b))
                throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " ('", layers[i].name,
                                            "') state buffer ", b, " has ",
                                            std::ranges::begin(buffers)[static_cast<std::ptrdiff_t>(b)].size(),
                                            " elements but the saved one has ", saved[i].buffers[b],
                                            " (different options, e.g. amsgrad?)"));
    }

    std::size_t k = 0;
    for (std::size_t i = 0; i < layers.size(); ++i) {
        for (const tensor_view<float> b : states[i].buffers()) {
            dev.copy_from_host(b.data(), staged[k].data(), b.size_bytes());
            ++k;
        }
        states[i].steps = saved[i].steps;
    }
}

}  // namespace hitch::optim
