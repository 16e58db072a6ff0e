#pragma once
// automatic's decisions as a blob for checkpoints: the bytes save_state() writes and load_state() reads, in the
// common frame of core/binary.hpp.
//
//   frame "HAUT", version 2:  u32 flags (1 constants present, 2 profile present)
//     | constants: alpha, beta, gamma, native alpha, native beta, inter alpha, inter beta (7 x f64), when present
//     | profile: measured (i32), stopped_by_budget (i32), probe bytes (8 x f64), seconds (8 x 8 x f64: the
//       candidates in automatic's order, hierarchical seventh, native last), when present
//
//   version 1 (read): constants without the inter pair (5 x f64: one level, inter 0), and seconds of 7 candidates
//   (no hierarchical: its row reads 0, not measured; the seventh row is native's).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/allreduce/automatic/profile.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"

namespace hitch::allreduce::detail {

/// The decoded content of a state blob.
struct automatic_state {
    std::optional<cost_constants> constants;
    std::optional<automatic_profile> profile;
};

inline constexpr std::string_view automatic_state_magic = "HAUT";
inline constexpr std::uint32_t automatic_state_version = 2;

/// Replaces `out` with the blob of `s`.
inline void encode_automatic_state(const automatic_state& s, std::vector<std::byte>& out) {
    frame_writer f(out, automatic_state_magic, automatic_state_version);
    byte_writer& w = f.payload();
    w.put(static_cast<std::uint32_t>((s.constants ? 1u : 0u) | (s.profile ? 2u : 0u)));
    if (s.constants) {
        const cost_constants& k = *s.constants;
        for (double v : {k.alpha_s, k.beta_s_per_byte, k.gamma_s_per_byte, k.native_alpha_s, k.native_beta_s_per_byte,
                         k.inter_alpha_s, k.inter_beta_s_per_byte})
            w.put(v);
    }
    if (s.profile) {
        const automatic_profile& p = *s.profile;
        w.put(p.measured).put(p.stopped_by_budget).values(std::span<const double>(p.bytes));
        for (const auto& row : p.seconds) w.values(std::span<const double>(row));
    }
    f.finish();
}

/// The state in `blob`; corrupt_message_error says what is wrong with it (truncated, corrupt, foreign, newer).
[[nodiscard]] inline automatic_state decode_automatic_state(std::span<const std::byte> blob) {
    static constexpr std::string_view who = "hitch::allreduce::automatic::load_state";
    const frame_view frame =
        open_frame(blob, {automatic_state_magic, 1, automatic_state_version, who, "hitch automatic state"});
    byte_reader r(frame.payload, who, "corrupt");
    const bool v1 = frame.version == 1;
    const int rows = v1 ? automatic_profile::candidates - 1 : automatic_profile::candidates;
    const auto flags = r.get<std::uint32_t>("the flags");
    const std::size_t constants_bytes = (v1 ? 5 : 7) * sizeof(double);
    const std::size_t profile_bytes =
        2 * sizeof(std::int32_t) + sizeof(double) * automatic_profile::probes * (1 + static_cast<std::size_t>(rows));
    const std::size_t expected = ((flags & 1u) != 0 ? constants_bytes : 0) + ((flags & 2u) != 0 ? profile_bytes : 0);
    if ((flags & ~3u) != 0 || expected != r.remaining())
        r.fail(hitch::detail::concat("flags 0x", std::hex, flags, std::dec, " need ", expected,
                                     " payload bytes after them, the blob has ", r.remaining()));

    automatic_state s;
    if ((flags & 1u) != 0) {
        cost_constants k;
        k.alpha_s = r.get<double>("alpha");
        k.beta_s_per_byte = r.get<double>("beta");
        k.gamma_s_per_byte = r.get<double>("gamma");
        k.native_alpha_s = r.get<double>("native alpha");
        k.native_beta_s_per_byte = r.get<double>("native beta");
        if (!v1) {
            k.inter_alpha_s = r.get<double>("inter alpha");
            k.inter_beta_s_per_byte = r.get<double>("inter beta");
        }
        s.constants = k;
    }
    if ((flags & 2u) != 0) {
        automatic_profile p;
        p.measured = r.get<std::int32_t>("the measured probes");
        p.stopped_by_budget = r.get<std::int32_t>("stopped_by_budget");
        for (double& b : p.bytes) b = r.get<double>("a probe size");
        for (int c = 0; c < rows; ++c) {
            // Version 1 knew no hierarchical candidate: its seventh row is native's, now the last.
            const int at = v1 && c == rows - 1 ? automatic_profile::candidates - 1 : c;
            for (double& v : p.seconds[static_cast<std::size_t>(at)]) v = r.get<double>("a probe time");
        }
        if (p.measured < 0 || p.measured > automatic_profile::probes)
            r.fail(hitch::detail::concat(p.measured, " probes measured, at most ", automatic_profile::probes));
        // The ranking converts probe sizes to byte counts and interpolates between them: each must be a whole
        // number of bytes a size_t holds, the measured ones rising; a time is finite and not negative.
        constexpr double max_probe = 9007199254740992.0;  // 2^53
        for (int i = 0; i < automatic_profile::probes; ++i) {
            const double b = p.bytes[static_cast<std::size_t>(i)];
            const bool measured = i < p.measured;
            if (!(b >= (measured ? 1.0 : 0.0) && b <= max_probe && b == std::floor(b)) ||
                (measured && i > 0 && !(b > p.bytes[static_cast<std::size_t>(i - 1)])))
                r.fail(hitch::detail::concat("probe ", i, " has size ", b, " bytes"));
        }
        for (const auto& row : p.seconds)
            for (const double t : row)
                if (!(t >= 0.0 && t <= std::numeric_limits<double>::max()))
                    r.fail(hitch::detail::concat("a probe time is ", t, " seconds"));
        s.profile = p;
    }
    r.expect_end();
    return s;
}

}  // namespace hitch::allreduce::detail
