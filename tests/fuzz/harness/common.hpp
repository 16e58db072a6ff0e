#pragma once
// What the reader harnesses share: the input as bytes, checksums recomputed so the fuzzer reaches the fields behind
// them, and the one place that decides which exceptions are answers (hitch's documented errors) and which are
// findings (anything else escapes, and libFuzzer reports the uncaught exception as a crash).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"

namespace hitch_fuzz {

[[nodiscard]] inline std::vector<std::byte> bytes_of(const std::uint8_t* data, std::size_t size) {
    std::vector<std::byte> out(size);
    for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>(data[i]);
    return out;
}

/// Makes a core/binary.hpp frame's length and CRC32C agree with its bytes (no-op when shorter than a header).
inline void reseal_frame(std::vector<std::byte>& b) {
    if (b.size() < hitch::frame_header_bytes) return;
    hitch::store_le<std::uint64_t>(b.data() + 12, b.size());
    hitch::store_le<std::uint32_t>(b.data() + 20, hitch::detail::frame_checksum(b));
}

/// Reseals an aggregation-state blob (exchange/state_blob.hpp: a frame whose payload is u64 count, 4 header bytes,
/// u64 residual length, the residual, u64 codec blob length, the codec's state frame) inside and out, so the
/// fuzzer reaches the codec's own state fields.
inline void reseal_aggregation_state(std::vector<std::byte>& b) {
    constexpr std::size_t residual_at = hitch::frame_header_bytes + 12;
    if (b.size() >= residual_at + 8) {
        const auto n = hitch::load_le<std::uint64_t>(b.data() + residual_at);
        const std::size_t inner_length_at = residual_at + 8 + static_cast<std::size_t>(n % (1u << 20)) * 4;
        if (n < (1u << 20) && b.size() >= inner_length_at + 8) {
            const std::size_t inner_at = inner_length_at + 8;
            std::vector<std::byte> inner(b.begin() + static_cast<std::ptrdiff_t>(inner_at), b.end());
            reseal_frame(inner);
            hitch::store_le<std::uint64_t>(b.data() + inner_length_at, inner.size());
            std::copy(inner.begin(), inner.end(), b.begin() + static_cast<std::ptrdiff_t>(inner_at));
        }
    }
    reseal_frame(b);
}

/// With HITCH_FUZZ_VERBOSE set, what each answer said (to see how far a replayed input or a seed gets).
inline void note(const char* kind, const std::exception& e) {
    static const bool verbose = std::getenv("HITCH_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "%s: %s\n", kind, e.what());
}

/// Runs `read`; hitch's documented answers to bad bytes end it quietly, anything else escapes.
template <class Read>
void expect_documented(Read&& read) {
    try {
        read();
        note("loaded", std::runtime_error("no error"));
    } catch (const hitch::corrupt_message_error& e) {
        note("corrupt_message_error", e);
    } catch (const hitch::mismatch_error& e) {
        note("mismatch_error", e);
    } catch (const hitch::config_error& e) {
        note("config_error", e);
    }
}

}  // namespace hitch_fuzz
