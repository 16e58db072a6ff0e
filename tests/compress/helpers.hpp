#pragma once
// Shared helpers of the compression tests: seeded gradients with realistic magnitudes, and checks that a decoder
// refuses a message with corrupt_message_error.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/wire.hpp"
#include "hitch/core/error.hpp"

namespace hitch_test {

/// n gradient-like values: normal with the given scale, a few larger outliers, some exact zeros.
inline std::vector<float> gradients(std::size_t n, std::uint64_t seed, float scale = 1e-3f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> g(n);
    for (auto& x : g) {
        const float r = u(rng);
        if (r < 0.02f)
            x = 0.0f;
        else if (r < 0.03f)
            x = normal(rng) * 20.0f;
        else
            x = normal(rng);
    }
    return g;
}

/// Selects the widest kernel build the codecs may use: 2 everything (AVX-512 where present), 1 AVX2 at most, 0 the
/// baseline build only. Tests compare the builds' results bit for bit.
inline void set_isa(int tier) {
    hitch::compress::detail::wide_paths_enabled = tier >= 1;
    hitch::compress::detail::avx512_paths_enabled = tier >= 2;
}

/// Calls f and reports whether it threw corrupt_message_error whose text contains `fragment`.
inline bool throws_corrupt(const std::function<void()>& f, const std::string& fragment = "") {
    try {
        f();
    } catch (const hitch::corrupt_message_error& e) {
        if (std::string(e.what()).find(fragment) != std::string::npos) return true;
        FAIL_CHECK("corrupt_message_error without \"" << fragment << "\": " << e.what());
        return false;
    } catch (const std::exception& e) {
        FAIL_CHECK("expected corrupt_message_error, got: " << e.what());
        return false;
    }
    return false;
}

/// Re-seals a message after a test modified its header or payload on purpose (to reach the checks behind the
/// checksum).
inline void reseal(std::vector<std::byte>& m) { hitch::compress::wire::seal(m); }
/// Recomputes the checksum of a blob in the common frame (version 2 state blobs).
inline void reseal_frame(std::vector<std::byte>& b) {
    hitch::store_le(b.data() + hitch::frame_checksum_offset, hitch::detail::frame_checksum(b));
}

}  // namespace hitch_test

#include "hitch/compress/error_feedback.hpp"

namespace hitch_test {

/// Error feedback conserves mass: after T steps, everything decoded plus the final residual equals the sum of the
/// inputs, up to the rounding of the float additions (bounded element by element from the values involved).
template <class Codec>
void check_conservation(const Codec& codec, std::size_t n, int steps, float scale = 1e-3f) {
    const hitch::compress::error_feedback<Codec> ef(codec);
    auto s = ef.make_state(n);
    std::vector<double> inputs(n, 0.0), sent(n, 0.0), bound(n, 0.0);
    std::vector<float> decoded(n);
    std::vector<std::byte> m;
    const double eps = std::ldexp(1.0, -24);
    for (int t = 0; t < steps; ++t) {
        const auto g = gradients(n, 1000 + static_cast<std::uint64_t>(t), scale);
        const std::vector<float> before = s.residual;
        const std::size_t size = ef.encode(hitch::tensor_view<const float>(g), s, m);
        REQUIRE(size == m.size());
        ef.decode(m, hitch::tensor_view<float>(decoded));
        for (std::size_t i = 0; i < n; ++i) {
            inputs[i] += g[i];
            sent[i] += decoded[i];
            // v = g + r rounds once, r' = v - d rounds once: each error is at most eps times the result.
            const double v = std::fabs(static_cast<double>(g[i]) + before[i]);
            bound[i] += 2 * eps * (v + std::fabs(static_cast<double>(decoded[i])) + std::fabs(s.residual[i])) + 1e-38;
        }
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double err = std::fabs(sent[i] + s.residual[i] - inputs[i]);
        if (err > bound[i]) {
            if (bad++ < 5) FAIL_CHECK("element " << i << ": sent + residual - inputs = " << err << " > " << bound[i]);
        }
    }
    CHECK(bad == 0);
}

}  // namespace hitch_test
