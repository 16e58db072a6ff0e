#pragma once
// How the ranks of a compressed exchange learn that one of them could not encode its bucket: each reports a code
// through the exchange's first collective, the healthy ranks take back their encode, and every rank throws, so no
// rank waits for a deadline and no state changes.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "hitch/allreduce/collectives.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/exchange/aggregation.hpp"

namespace hitch::compress {

namespace detail {

/// Codes a rank reports about its own encode.
inline constexpr std::uint8_t encode_ok = 0;
inline constexpr std::uint8_t encode_non_finite = 1;
inline constexpr std::uint8_t encode_failed = 2;

/// Runs f(), turning its exception into a code (and keeping it to rethrow).
template <class F>
std::uint8_t attempt(F&& f, std::exception_ptr& error) {
    try {
        f();
        return encode_ok;
    } catch (const non_finite_error&) {
        error = std::current_exception();
        return encode_non_finite;
    } catch (...) {
        error = std::current_exception();
        return encode_failed;
    }
}

/// After the ranks exchanged their codes: if any failed, the healthy ranks take back their encode and every rank
/// throws (the failing one its own error, the others one naming the failing ranks).
template <class Codec>
void settle(const Codec& codec, typename Codec::state& state, std::span<const std::uint8_t> codes, int me,
            std::exception_ptr error) {
    std::string failed;
    bool non_finite = true;
    for (std::size_t r = 0; r < codes.size(); ++r)
        if (codes[r] != encode_ok) {
            failed += hitch::detail::concat(failed.empty() ? "" : ", ", r);
            non_finite = non_finite && codes[r] == encode_non_finite;
        }
    if (failed.empty()) return;
    if (codes[static_cast<std::size_t>(me)] == encode_ok) {
        if constexpr (requires { codec.undo(state); }) codec.undo(state);
    } else {
        std::rethrow_exception(error);
    }
    const std::string text = hitch::detail::concat(
        aggregate_who, ": rank(s) ", failed, " could not encode their bucket",
        non_finite ? " (NaN or an infinity)" : "", "; every rank stops here and no state changed");
    if (non_finite) throw non_finite_error(text);
    throw hitch::error(text);
}

/// Exchanges one status byte per rank (sequenced with the group's other calls) and returns all of them.
template <communicator C>
std::vector<std::uint8_t> exchange_codes(allreduce::group<C>& g, std::uint8_t mine, std::size_t count,
                                         const allreduce::call_options& options) {
    std::vector<std::uint8_t> all(static_cast<std::size_t>(g.size()));
    allreduce::call_options o = options;
    o.fingerprint ^= 0x9e3779b97f4a7c15ull * (count + 1);  // ranks with different bucket sizes fail the check
    allreduce::allgather(g, tensor_view<const std::uint8_t>(&mine, 1), tensor_view<std::uint8_t>(all), o);
    return all;
}

}  // namespace detail

}  // namespace hitch::compress
