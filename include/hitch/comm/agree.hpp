#pragma once
// Small collectives every part of hitch uses to check that ranks agree before they move data:
//
//   allgather_value(comm, v)   every rank learns every rank's v (Bruck et al. 1997: ceil(lg p) rounds, any p)
//   agree(comm, v, what)       allgather, then mismatch_error on every rank if any value differs, naming them all
//   any_of(comm, flag)         true on every rank if any rank's flag is true
//
// Values are trivially copyable and travel as bytes on a reserved tag (see collective_tag_base), so they never
// match user traffic. Every call has the communicator's deadline.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/comm/detail/roll_call.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"

namespace hitch::comm {

/// Offsets, within hitch's reserved tag range, of the agreement messages and of the roll call that names the ranks
/// that did not come when a gather times out (comm/detail/roll_call.hpp).
inline constexpr int agree_tag_offset = 0;
inline constexpr int agree_roll_call_tag_offset = 1;
/// Offset of the roll call a collective call takes when its deadline passes (allreduce/group.hpp).
inline constexpr int call_roll_call_tag_offset = 2;

/// Returns every rank's `value`, indexed by rank. Collective: every rank of `comm` calls it.
template <communicator C, class T>
    requires std::is_trivially_copyable_v<T>
[[nodiscard]] std::vector<T> allgather_value(C& comm, const T& value) {
    const int p = comm.size();
    const int me = comm.rank();
    const int tag = collective_tag_base(comm) + agree_tag_offset;
    // Bruck: block j of `blocks` holds rank (me + j) % p's value; after round k the first min(2^(k+1), p) are known.
    std::vector<std::byte> blocks(static_cast<std::size_t>(p) * sizeof(T));
    std::memcpy(blocks.data(), &value, sizeof(T));
    const deadline limit = deadline_for(comm, comm.timeout());
    for (int have = 1; have < p; have *= 2) {
        const int count = std::min(have, p - have);
        const int to = (me - have + p) % p;
        const int from = (me + have) % p;
        const std::span<const std::byte> out(blocks.data(), static_cast<std::size_t>(count) * sizeof(T));
        const std::span<std::byte> in(blocks.data() + static_cast<std::size_t>(have) * sizeof(T),
                                      static_cast<std::size_t>(count) * sizeof(T));
        auto r = comm.irecv(in, from, tag);
        auto s = comm.isend(out, to, tag);
        try {
            r.wait(limit);
            s.wait(limit);
        } catch (const timeout_error&) {
            // The values of ranks me ... me+have-1 are here: those ranks came. Ask the others.
            std::vector<bool> present(static_cast<std::size_t>(p), false);
            for (int j = 0; j < have; ++j) present[static_cast<std::size_t>((me + j) % p)] = true;
            const int call = collective_tag_base(comm) + agree_roll_call_tag_offset;
            const seconds_f waited = limit.waited();
            const std::vector<int> absent = detail::roll_call(
                me, p, std::move(present), detail::deadline_like(limit, detail::roll_call_grace(waited)),
                [&](int peer) { return comm.isend(std::span<const std::byte>(), peer, call); },
                [&](int peer) { return comm.irecv(std::span<std::byte>(), peer, call); });
            throw timeout_error(std::string(C::name) + " agreement",
                                hitch::detail::concat("allgather on rank ", me, " of ", p), waited,
                                detail::describe_absent(absent, from));
        }
    }
    std::vector<T> result(static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j) {
        const std::byte* from = blocks.data() + static_cast<std::size_t>(j) * sizeof(T);
        if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: a byte other than 0 is true
            result[static_cast<std::size_t>((me + j) % p)] = *from != std::byte{0};
        } else {
            std::memcpy(static_cast<void*>(&result[static_cast<std::size_t>((me + j) % p)]), from, sizeof(T));
        }
    }
    return result;
}

namespace detail {

template <class T>
inline constexpr bool is_char_like_v =
    std::is_same_v<std::remove_cv_t<T>, char> || std::is_same_v<std::remove_cv_t<T>, signed char> ||
    std::is_same_v<std::remove_cv_t<T>, unsigned char>;

/// Writes a value another rank sent, whatever its bytes: numbers as numbers (characters and bools as their
/// numeric value, enums as their underlying value, read through memcpy so that no byte pattern is an invalid load),
/// character arrays as a quoted string bounded by the array (they need not end in NUL; other bytes shown as
/// \xNN), other types with operator<<, and pointers and everything else as their bytes in hex: a pointer from
/// another process means nothing here, and following it would read memory at random.
template <class T>
void write_value(std::ostream& os, const T& v) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
    const auto hex = [&] {
        static constexpr char digits[] = "0123456789abcdef";
        os << "0x";
        for (std::size_t i = 0; i < sizeof(T); ++i) os << digits[bytes[i] >> 4] << digits[bytes[i] & 15u];
    };
    if constexpr (std::is_array_v<T> && is_char_like_v<std::remove_extent_t<T>> && std::rank_v<T> == 1) {
        os << '"';
        for (std::size_t i = 0; i < sizeof(T) && bytes[i] != 0; ++i) {
            const unsigned char c = bytes[i];
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                os << static_cast<char>(c);
            } else {
                static constexpr char digits[] = "0123456789abcdef";
                os << "\\x" << digits[c >> 4] << digits[c & 15u];
            }
        }
        os << '"';
    } else if constexpr (std::is_pointer_v<T> || std::is_array_v<T> || std::is_member_pointer_v<T>) {
        hex();
    } else if constexpr (std::is_same_v<std::remove_cv_t<T>, bool> || is_char_like_v<T>) {
        unsigned char c = 0;
        std::memcpy(&c, &v, 1);
        if constexpr (std::is_same_v<std::remove_cv_t<T>, signed char> ||
                      (std::is_same_v<std::remove_cv_t<T>, char> && std::is_signed_v<char>))
            os << static_cast<int>(static_cast<signed char>(c));
        else
            os << static_cast<int>(c);
    } else if constexpr (std::is_enum_v<T>) {
        std::underlying_type_t<T> u{};
        std::memcpy(&u, &v, sizeof u);
        if constexpr (sizeof(u) == 1)
            os << static_cast<int>(u);
        else
            os << u;
    } else if constexpr (requires { os << v; }) {
        os << v;
    } else {
        hex();
    }
}

/// Whether two values another rank sent are equal: with == where T has it (not for bool or enums, whose every byte
/// pattern is not a valid value), else bytewise.
template <class T>
[[nodiscard]] bool same_value(const T& a, const T& b) {
    if constexpr (!std::is_same_v<std::remove_cv_t<T>, bool> && !std::is_enum_v<T> && !std::is_array_v<T> && requires {
                      { a == b } -> std::convertible_to<bool>;
                  })
        return static_cast<bool>(a == b);
    else
        return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace detail

/// Checks that every rank passed an equal `value` (compared with == when T has it, else bytewise). On any
/// difference every rank throws mismatch_error: "<what>: rank 0 has <v0>, rank 1 has <v1>, ...", each value written
/// by `format(os, value)` (default: detail::write_value).
template <class C, class T, class Format>
    requires std::is_trivially_copyable_v<T>
void agree(C& comm, const T& value, std::string_view what, Format&& format) {
    static_assert(check_communicator<C>());
    const std::vector<T> all = allgather_value(comm, value);
    if (std::all_of(all.begin(), all.end(), [&](const T& v) { return detail::same_value(v, all.front()); })) return;
    std::ostringstream s;
    s << what << ": ";
    for (std::size_t r = 0; r < all.size(); ++r) {
        if (r != 0) s << ", ";
        s << "rank " << r << " has ";
        format(s, all[r]);
    }
    throw mismatch_error(s.str());
}

template <class C, class T>
    requires std::is_trivially_copyable_v<T>
void agree(C& comm, const T& value, std::string_view what) {
    static_assert(check_communicator<C>());
    agree(comm, value, what, [](std::ostream& os, const T& v) { detail::write_value(os, v); });
}

/// True on every rank when `flag` is true on at least one (e.g. "some rank saw an inf").
template <communicator C>
[[nodiscard]] bool any_of(C& comm, bool flag) {
    const std::vector<unsigned char> all = allgather_value(comm, static_cast<unsigned char>(flag ? 1 : 0));
    return std::any_of(all.begin(), all.end(), [](unsigned char f) { return f != 0; });
}

}  // namespace hitch::comm
