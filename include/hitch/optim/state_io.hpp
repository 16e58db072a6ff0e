#pragma once
// The versioned binary form of an optimizer's per-layer state, so a run resumes exactly. Version 2 is the common
// frame of core/binary.hpp (magic "HITCHOPT", version, length, CRC32C) around:
//
//   u32 n, n bytes             optimizer name (O::name, e.g. "lars<momentum>")
//   u64 layer count
//   per layer:  u32 n, n bytes (name), u64 parameter count, u64 steps, u32 buffer count, u64 size of each buffer
//   per layer, per buffer: size * 4 bytes of float
//
// all little-endian. Version 1 (magic, u32 version, u32 byte-order mark, the same fields in host order, then a
// u64 FNV-1a of every byte before it) is still read.
//
// Loading reads and checks everything before it changes anything: a truncated or corrupt stream (magic, version,
// length, checksum) is corrupt_message_error saying which; a well-formed state of another optimizer or another
// model (id, layer count, a layer's size, a buffer's size, and a layer's name where asked) is mismatch_error
// naming both sides.

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
#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/hash.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::optim {

inline constexpr std::string_view state_magic = "HITCHOPT";
inline constexpr std::uint32_t state_version = 2;

/// Whether loading compares the saved layer names with the model's: a whole model's layers are matched by
/// position and size (a renamed layer still loads); the pieces of a sharded state also by name, whose range
/// tells one rank's shard from another's of the same size.
enum class layer_names { ignored, must_match };

namespace detail {

using hitch::detail::concat;

inline constexpr std::uint32_t byte_order_mark = 0x01020304u;
inline constexpr std::uint32_t max_id_bytes = 1024;
inline constexpr std::uint32_t max_name_bytes = 1u << 16;
inline constexpr std::uint32_t max_buffers = 64;

/// Reads version 1 from a stream whose first 12 bytes (magic and version) were already read as `start`.
class legacy_state_reader {
public:
    legacy_state_reader(std::istream& in, std::span<const std::byte> start) : in_(in) { sum_.update(start); }
    void bytes(void* p, std::size_t n, std::string_view what) {
        in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
        if (static_cast<std::size_t>(in_.gcount()) != n)
            throw corrupt_message_error(
                concat("hitch::optim::load_state: the state is truncated (reading ", what, ")"));
        sum_.update(std::span<const std::byte>(static_cast<const std::byte*>(p), n));
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
            throw corrupt_message_error(
                concat("hitch::optim::load_state: ", what, " length ", n, " exceeds the limit of ", limit, " bytes"));
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
    void finish() { verify_checksum(); }

private:
    std::istream& in_;
    fnv1a_hasher sum_;
};

/// Reads the payload of a version 2 frame with the calls legacy_state_reader offers.
class frame_state_reader {
public:
    explicit frame_state_reader(std::span<const std::byte> payload)
        : r_(payload, "hitch::optim::load_state", "corrupt") {}
    void bytes(void* p, std::size_t n, std::string_view what) {
        const auto b = r_.take(n, what);
        if (n != 0) std::memcpy(p, b.data(), n);
    }
    void skip(std::uint64_t n, std::string_view what) { r_.skip(n, what); }
    template <class T>
    T value(std::string_view what) {
        return r_.get<T>(what);
    }
    std::string text(std::uint32_t limit, std::string_view what) { return r_.text(limit, what); }
    void finish() const { r_.expect_end(); }

private:
    byte_reader r_;
};

inline constexpr frame_format state_format{state_magic, 1, state_version, "hitch::optim::load_state",
                                           "hitch optimizer state"};

/// Reads one frame from `in`: the header, then as many bytes as it announces, or what there is when the stream
/// ends first (open_frame then says how much is missing). Memory grows with the bytes read, not with the
/// length a damaged header claims.
[[nodiscard]] inline std::vector<std::byte> read_frame(std::istream& in, std::vector<std::byte> bytes) {
    const auto read_up_to = [&](std::size_t want) {
        while (bytes.size() < want) {
            const std::size_t at = bytes.size();
            const std::size_t n = std::min<std::size_t>(want - at, std::size_t{1} << 24);
            bytes.resize(at + n);
            in.read(reinterpret_cast<char*>(bytes.data() + at), static_cast<std::streamsize>(n));
            bytes.resize(at + static_cast<std::size_t>(in.gcount()));
            if (static_cast<std::size_t>(in.gcount()) != n) return;
        }
    };
    read_up_to(frame_header_bytes);
    if (bytes.size() == frame_header_bytes && frame_magic_matches(bytes, state_magic)) {
        const std::uint64_t length = frame_length(bytes);
        if (length <= (std::uint64_t{1} << 62)) read_up_to(static_cast<std::size_t>(length));
    }
    return bytes;
}

/// The fields after the header, read with either reader; nothing changes until all of it has been read and
/// checked.
template <class Reader, class State, device D>
void load_payload(Reader& r, std::string_view id, std::span<const layer> layers, std::span<State> states, D& dev,
                  layer_names names) {
    const std::string saved_id = r.text(detail::max_id_bytes, "the optimizer id");
    const auto count = r.template value<std::uint64_t>("the layer count");

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
        s.size = r.template value<std::uint64_t>("a layer size");
        s.steps = r.template value<std::uint64_t>("a layer step count");
        const auto nb = r.template value<std::uint32_t>("a buffer count");
        if (nb > detail::max_buffers)
            throw corrupt_message_error(
                concat("hitch::optim::load_state: layer ", i, " claims ", nb, " state buffers (corrupt)"));
        for (std::uint32_t b = 0; b < nb; ++b) s.buffers.push_back(r.template value<std::uint64_t>("a buffer size"));
        saved.push_back(std::move(s));
    }

    // Stage the data that fits this model; skip (but checksum) what does not, so corruption is told apart from
    // a different model.
    const auto fits = [&](std::size_t i, std::size_t b) {
        if (i >= states.size()) return false;
        const auto buffers = states[i].buffers();
        std::size_t buffer_count = std::ranges::size(buffers);  // 0 for a stateless rule: not a constant to compare
        if (b >= buffer_count) return false;
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
    r.finish();

    if (saved_id != id)
        throw mismatch_error(concat("hitch::optim::load_state: the state was saved by optimizer '", saved_id,
                                    "' but is being loaded into '", id, "'"));
    if (saved.size() != layers.size())
        throw mismatch_error(concat("hitch::optim::load_state: the state has ", saved.size(),
                                    " layers but the model has ", layers.size()));
    for (std::size_t i = 0; i < layers.size(); ++i) {
        if (saved[i].size != layers[i].size())
            throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " ('", layers[i].name, "') has ",
                                        layers[i].size(), " parameters but the saved layer ", i, " ('", saved[i].name,
                                        "') has ", saved[i].size));
        if (names == layer_names::must_match && saved[i].name != layers[i].name)
            throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " is '", layers[i].name,
                                        "' but the saved layer ", i, " is '", saved[i].name,
                                        "' (the state of another model or shard)"));
        const auto buffers = states[i].buffers();
        if (saved[i].buffers.size() != std::ranges::size(buffers))
            throw mismatch_error(concat("hitch::optim::load_state: layer ", i, " ('", layers[i].name, "') has ",
                                        std::ranges::size(buffers), " state buffers but the saved state has ",
                                        saved[i].buffers.size(), " (different options, e.g. amsgrad?)"));
        for (std::size_t b = 0; b < saved[i].buffers.size(); ++b)
            if (!fits(i, b))
                throw mismatch_error(concat(
                    "hitch::optim::load_state: layer ", i, " ('", layers[i].name, "') state buffer ", b, " has ",
                    std::ranges::begin(buffers)[static_cast<std::ptrdiff_t>(b)].size(),
                    " elements but the saved one has ", saved[i].buffers[b], " (different options, e.g. amsgrad?)"));
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

}  // namespace detail

/// Writes the state of `layers` (one state per layer) to `out` in the form above. States live on `dev`.
template <class State, device D>
void save_state(std::ostream& out, std::string_view id, std::span<const layer> layers, std::span<State> states,
                D& dev) {
    if (layers.size() != states.size())
        throw config_error(
            detail::concat("hitch::optim::save_state: ", layers.size(), " layers but ", states.size(), " states"));
    std::vector<std::byte> frame;
    frame_writer f(frame, state_magic, state_version);
    byte_writer& w = f.payload();
    w.text(id);
    w.put(static_cast<std::uint64_t>(layers.size()));
    for (std::size_t i = 0; i < layers.size(); ++i) {
        w.text(layers[i].name);
        w.put(static_cast<std::uint64_t>(layers[i].size()));
        w.put(static_cast<std::uint64_t>(states[i].steps));
        const auto buffers = states[i].buffers();
        w.put(static_cast<std::uint32_t>(std::ranges::size(buffers)));
        for (const tensor_view<float> b : buffers) w.put(static_cast<std::uint64_t>(b.size()));
    }
    std::vector<float> host;
    for (auto& s : states)
        for (const tensor_view<float> b : s.buffers()) {
            host.resize(b.size());
            dev.copy_to_host(host.data(), b.data(), b.size_bytes());
            w.values(std::span<const float>(host));
        }
    f.finish();
    out.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
    if (!out) throw error("hitch::optim::save_state: writing the optimizer state failed");
}

/// Reads a state written by save_state into `states` (which must have the saved layout), or throws without
/// changing anything (see the file comment for which error says what).
template <class State, device D>
void load_state(std::istream& in, std::string_view id, std::span<const layer> layers, std::span<State> states, D& dev,
                layer_names names = layer_names::ignored) {
    using detail::concat;
    if (layers.size() != states.size())
        throw config_error(
            concat("hitch::optim::load_state: ", layers.size(), " layers but ", states.size(), " states"));
    std::vector<std::byte> start(12);
    in.read(reinterpret_cast<char*>(start.data()), static_cast<std::streamsize>(start.size()));
    start.resize(static_cast<std::size_t>(in.gcount()));
    if (start.size() == 12 && frame_magic_matches(start, state_magic) &&
        load_le<std::uint32_t>(start.data() + 8) == 1) {
        detail::legacy_state_reader r(in, start);
        const auto bom = r.value<std::uint32_t>("the byte-order mark");
        if (bom != detail::byte_order_mark)
            throw corrupt_message_error(
                "hitch::optim::load_state: the state was written with another byte order "
                "or is corrupt (bad byte-order mark)");
        detail::load_payload(r, id, layers, states, dev, names);
        return;
    }
    const std::vector<std::byte> frame = detail::read_frame(in, std::move(start));
    detail::frame_state_reader r(open_frame(frame, detail::state_format).payload);
    detail::load_payload(r, id, layers, states, dev, names);
}

}  // namespace hitch::optim
