#pragma once
// What the sparse codecs (threshold, topk, dgc) share: the scan that collects the elements at or above a
// magnitude, exact and sampled top-k selection, and the sparse payload (values, then delta-varint indices).
//
// Top-k by sampling (Lin et al. 2018, "Deep Gradient Compression", section 3 "Implementation"): estimate the
// magnitude threshold from a random sample of |v|, collect everything at or above it in one vectorised pass, and
// if that selected more than k, finish with an exact selection among the few selected ("hierarchical
// selection"). The sample's rank is set a few standard deviations above its expected value, so the pass almost
// always selects a superset of the true top-k, and the result then equals exact top-k; if it selects too few or
// far too many, the rank is corrected and the pass repeated, and after a few tries exact selection takes over.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/compress/detail/parallel.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/detail/simd.hpp"
#include "hitch/compress/tuning.hpp"
#include "hitch/compress/wire.hpp"

namespace hitch::compress::detail {

/// The elements a sparse codec sends: ascending indices and their values.
struct sparse_selection {
    std::vector<std::uint64_t> index;
    std::vector<float> value;
    void clear() noexcept {
        index.clear();
        value.clear();
    }
    [[nodiscard]] std::size_t size() const noexcept { return index.size(); }
};

HITCH_COMPRESS_STRICT_FP_BEGIN
HITCH_COMPRESS_ALWAYS_INLINE float magnitude(float x) noexcept { return std::fabs(x); }

/// Appends every i in [0, n) with |v[i]| >= t (in index order) while fewer than `cap` are stored; returns how many
/// there are in all (possibly more than cap). Clears `finite` if it meets NaN or an infinity.
inline std::size_t collect_portable(const float* v, std::size_t n, float t, sparse_selection& out, std::size_t cap,
                                    bool& finite) {
    std::size_t count = 0;
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
        const float m = magnitude(v[i]);
        ok = ok && m <= 3.40282347e38f;
        if (m >= t) {
            if (out.size() < cap) {
                out.index.push_back(i);
                out.value.push_back(v[i]);
            }
            ++count;
        }
    }
    finite = finite && ok;
    return count;
}

#if HITCH_COMPRESS_X86
/// Appends the elements i + j of v whose bit j is set in `mask` (in order, while out holds fewer than `cap`);
/// returns how many bits are set.
HITCH_COMPRESS_ALWAYS_INLINE std::size_t append_selected(std::uint32_t mask, const float* v, std::size_t i,
                                                         sparse_selection& out, std::size_t cap) {
    const auto count = static_cast<std::size_t>(std::popcount(mask));
    while (mask != 0 && out.size() < cap) {
        const auto j = static_cast<std::size_t>(std::countr_zero(mask));
        out.index.push_back(i + j);
        out.value.push_back(v[i + j]);
        mask &= mask - 1;
    }
    return count;
}

/// The first n - n % 32 elements of the scan.
HITCH_TARGET_AVX2 inline std::size_t collect_avx2(const float* v, std::size_t n, float t, sparse_selection& out,
                                                  std::size_t cap, bool& finite) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 vt = _mm256_set1_ps(t);
    const __m256 inf = _mm256_set1_ps(__builtin_huge_valf());
    __m256 bad = _mm256_setzero_ps();
    std::size_t count = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        // Four vectors per step: the common case (nothing selected) costs one test.
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + i), abs_mask);
        const __m256 b = _mm256_and_ps(_mm256_loadu_ps(v + i + 8), abs_mask);
        const __m256 c = _mm256_and_ps(_mm256_loadu_ps(v + i + 16), abs_mask);
        const __m256 d = _mm256_and_ps(_mm256_loadu_ps(v + i + 24), abs_mask);
        // NaN or infinity: "not less than infinity", unordered counts as true.
        bad = _mm256_or_ps(
            bad, _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ), _mm256_cmp_ps(b, inf, _CMP_NLT_UQ)),
                              _mm256_or_ps(_mm256_cmp_ps(c, inf, _CMP_NLT_UQ), _mm256_cmp_ps(d, inf, _CMP_NLT_UQ))));
        const auto ma = static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, vt, _CMP_GE_OQ)));
        const auto mb = static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(b, vt, _CMP_GE_OQ)));
        const auto mc = static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(c, vt, _CMP_GE_OQ)));
        const auto md = static_cast<std::uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(d, vt, _CMP_GE_OQ)));
        const std::uint32_t mask = ma | mb << 8 | mc << 16 | md << 24;
        if (mask != 0) count += append_selected(mask, v, i, out, cap);
    }
    finite = finite && _mm256_movemask_ps(bad) == 0;
    return count;  // the caller handles the last n % 32 elements
}

/// collect_avx2 with AVX-512: comparisons straight into mask registers, two vectors per 32 elements.
HITCH_TARGET_AVX512 inline std::size_t collect_avx512(const float* v, std::size_t n, float t, sparse_selection& out,
                                                      std::size_t cap, bool& finite) {
    const __m512 vt = _mm512_set1_ps(t);
    const __m512 inf = _mm512_set1_ps(__builtin_huge_valf());
    __mmask16 bad = 0;
    std::size_t count = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v + i));
        const __m512 b = _mm512_abs_ps(_mm512_loadu_ps(v + i + 16));
        // NaN or infinity: "not less than infinity", unordered counts as true.
        bad = static_cast<__mmask16>(bad | _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ) |
                                     _mm512_cmp_ps_mask(b, inf, _CMP_NLT_UQ));
        const std::uint32_t mask = static_cast<std::uint32_t>(_mm512_cmp_ps_mask(a, vt, _CMP_GE_OQ)) |
                                   static_cast<std::uint32_t>(_mm512_cmp_ps_mask(b, vt, _CMP_GE_OQ)) << 16;
        if (mask != 0) count += append_selected(mask, v, i, out, cap);
    }
    finite = finite && bad == 0;
    return count;  // the caller handles the last n % 32 elements
}
#endif

/// Collects the elements with |v[i]| >= t into `out` (cleared first), storing at most `cap`; returns the total count.
/// `finite` becomes false if any element is NaN or infinite (the scan sees every element anyway).
inline std::size_t collect_at_least(const float* v, std::size_t n, float t, sparse_selection& out, bool& finite,
                                    std::size_t cap = ~std::size_t{0}) {
    out.clear();
#if HITCH_COMPRESS_X86
    if (use_wide()) {
        const std::size_t body = n - n % 32;
        const std::size_t count =
            use_avx512() ? collect_avx512(v, body, t, out, cap, finite) : collect_avx2(v, body, t, out, cap, finite);
        const std::size_t stored = out.size();
        const std::size_t tail = collect_portable(v + body, n - body, t, out, cap, finite);
        for (std::size_t j = stored; j < out.size(); ++j) out.index[j] += body;
        return count + tail;
    }
#endif
    return collect_portable(v, n, t, out, cap, finite);
}

HITCH_COMPRESS_STRICT_FP_END

/// collect_at_least over chunks of the bucket on the thread pool, the chunks' selections joined in order (the same
/// selection as one thread's; no cap).
inline std::size_t collect_at_least_parallel(const float* v, std::size_t n, float t, sparse_selection& out,
                                             bool& finite, const parallelism& how) {
    const chunk_plan plan = plan_chunks(n, 4096, how);
    if (plan.count == 1) return collect_at_least(v, n, t, out, finite);
    std::vector<sparse_selection> parts(plan.count);
    std::vector<unsigned char> ok(plan.count, 1);
    run_chunks(plan, [&](std::size_t c, std::size_t lo, std::size_t hi) {
        bool f = true;
        collect_at_least(v + lo, hi - lo, t, parts[c], f);
        for (auto& i : parts[c].index) i += lo;
        ok[c] = f ? 1 : 0;
    });
    out.clear();
    std::size_t total = 0;
    for (std::size_t c = 0; c < plan.count; ++c) total += parts[c].size();
    out.index.reserve(total);
    out.value.reserve(total);
    for (std::size_t c = 0; c < plan.count; ++c) {
        out.index.insert(out.index.end(), parts[c].index.begin(), parts[c].index.end());
        out.value.insert(out.value.end(), parts[c].value.begin(), parts[c].value.end());
        finite = finite && ok[c] != 0;
    }
    return total;
}

/// Keeps the k largest magnitudes of a selection that is in index order: all strictly above the k-th largest
/// magnitude, then ties at it in index order. The same rule as exact top-k, so the result does not depend on how
/// the candidates were found.
inline void keep_top(sparse_selection& sel, std::size_t k, std::vector<float>& scratch) {
    if (sel.size() <= k) return;
    scratch.resize(sel.size());
    for (std::size_t i = 0; i < sel.size(); ++i) scratch[i] = magnitude(sel.value[i]);
    const std::size_t at = sel.size() - k;
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(at), scratch.end());
    const float t = scratch[at];
    std::size_t above = 0;
    for (float x : sel.value) above += magnitude(x) > t;
    std::size_t ties = k - above, w = 0;
    for (std::size_t i = 0; i < sel.size(); ++i) {
        const float m = magnitude(sel.value[i]);
        if (m > t || (m == t && ties > 0)) {
            if (m == t) --ties;
            sel.index[w] = sel.index[i];
            sel.value[w] = sel.value[i];
            ++w;
        }
    }
    sel.index.resize(w);
    sel.value.resize(w);
}

/// Exact top-k by magnitude: the k-th largest |v| by std::nth_element over a copy of the magnitudes, then one
/// collecting pass. Returns false, selecting nothing, if v holds NaN or an infinity.
[[nodiscard]] inline bool topk_exact(const float* v, std::size_t n, std::size_t k, sparse_selection& out,
                                     std::vector<float>& scratch) {
    out.clear();
    bool finite = true;
    if (k >= n) {
        collect_at_least(v, n, 0.0f, out, finite);
        if (!finite) out.clear();
        return finite;
    }
    scratch.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
        scratch[i] = magnitude(v[i]);
        finite = finite && scratch[i] <= 3.40282347e38f;
    }
    if (!finite) return false;  // before nth_element, which needs a strict weak order
    if (k == 0) return true;
    const std::size_t at = n - k;
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(at), scratch.end());
    collect_at_least(v, n, scratch[at], out, finite);
    keep_top(out, k, scratch);
    return true;
}

struct sampling {
    double fraction = tuning::topk_sample_fraction;    // of the bucket sampled
    std::size_t min_sample = tuning::topk_min_sample;  // never fewer
    int attempts = tuning::topk_sample_attempts;       // passes before exact selection takes over
};

/// Sampled top-k (see the file comment). Selects exactly the same elements as topk_exact; `passes` reports how
/// many collecting passes it took (0 when it fell back to exact selection or did not need to sample). Returns
/// false, selecting nothing, if v holds NaN or an infinity.
[[nodiscard]] inline bool topk_sampled(const float* v, std::size_t n, std::size_t k, std::uint64_t key,
                                       const sampling& how, sparse_selection& out, std::vector<float>& scratch,
                                       int* passes = nullptr) {
    if (passes != nullptr) *passes = 0;
    out.clear();
    std::size_t s = static_cast<std::size_t>(std::llround(static_cast<double>(n) * how.fraction));
    s = std::max(s, how.min_sample);
    // Sampling pays only when the sample is much smaller than the bucket and k is a small part of it.
    if (k == 0 || s * tuning::topk_sample_share > n || k * tuning::topk_selected_share > n)
        return topk_exact(v, n, k, out, scratch);
    std::vector<float> sample(s);
    xoshiro256ss rng(key);
    for (auto& x : sample) {
        x = magnitude(v[rng.below(n)]);
        if (!(x <= 3.40282347e38f)) x = __builtin_huge_valf();  // keeps nth_element's order; the scan reports it
    }
    const double expected = static_cast<double>(s) * static_cast<double>(k) / static_cast<double>(n);
    double rank = expected + 3.0 * std::sqrt(expected) + 2.0;
    for (int attempt = 0; attempt < how.attempts; ++attempt) {
        const auto m = static_cast<std::size_t>(std::clamp(std::ceil(rank), 1.0, static_cast<double>(s)));
        // The m-th largest of the sample: position s - m in ascending order.
        std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(s - m), sample.end());
        const float t = sample[s - m];
        const std::size_t cap = std::max<std::size_t>(4 * k, k + 4096);
        bool finite = true;
        const std::size_t count = collect_at_least(v, n, t, out, finite, cap);
        if (passes != nullptr) *passes = attempt + 1;
        if (!finite) {
            out.clear();
            return false;
        }
        if (count >= k && count <= cap) {
            keep_top(out, k, scratch);
            return true;
        }
        // Too few: lower the threshold (a higher rank); too many: scale the rank to aim at 1.5 k.
        if (count < k)
            rank = std::max(rank * 2.0, rank + 2.0 * std::sqrt(expected) + 4.0);
        else
            rank = std::max(1.0, std::floor(rank * 1.5 * static_cast<double>(k) / static_cast<double>(count)));
    }
    if (passes != nullptr) *passes = 0;
    return topk_exact(v, n, k, out, scratch);
}

// ---- payload: u64 k | k x f32 values | k varints: first index, then (index - previous index - 1) ---------------

[[nodiscard]] inline std::size_t sparse_payload_bytes(const sparse_selection& sel) {
    std::size_t bytes = 8 + 4 * sel.size();
    std::uint64_t prev = 0;
    for (std::size_t j = 0; j < sel.size(); ++j) {
        bytes += wire::varint_size(j == 0 ? sel.index[j] : sel.index[j] - prev - 1);
        prev = sel.index[j];
    }
    return bytes;
}

/// Writes the payload at `at` (room for sparse_payload_bytes) and returns its size.
inline std::size_t write_sparse(std::byte* at, const sparse_selection& sel) {
    std::byte* p = at;
    wire::store_le<std::uint64_t>(p, sel.size());
    p += 8;
    for (float x : sel.value) {
        wire::store_le(p, x);
        p += 4;
    }
    std::uint64_t prev = 0;
    for (std::size_t j = 0; j < sel.size(); ++j) {
        p = wire::put_varint(p, j == 0 ? sel.index[j] : sel.index[j] - prev - 1);
        prev = sel.index[j];
    }
    return static_cast<std::size_t>(p - at);
}

/// Parses and validates a sparse payload for a bucket of n elements: k <= n, finite values, strictly increasing
/// indices below n, nothing left over. Fills `sel`; nothing is written to any bucket until all of it checked out.
inline void read_sparse(std::span<const std::byte> payload, std::size_t n, std::string_view who,
                        sparse_selection& sel) {
    wire::reader r(payload, who);
    const std::uint64_t k = r.count("selected count", n);
    const auto values = r.take(4 * k, "values");
    const auto rest = r.rest();
    if (k > rest.size()) r.fail(hitch::detail::concat("truncated: ", k, " indices in ", rest.size(), " bytes"));
    sel.clear();
    sel.index.resize(static_cast<std::size_t>(k));
    sel.value.resize(static_cast<std::size_t>(k));
    for (std::size_t j = 0; j < k; ++j) {
        sel.value[j] = wire::load_le<float>(values.data() + 4 * j);
        if (!std::isfinite(sel.value[j])) r.fail(hitch::detail::concat("value ", j, " is not finite"));
    }
    wire::varint_reader vr(rest.data(), rest.data() + rest.size(), who);
    std::uint64_t next = 0;  // the smallest index the next entry may have
    for (std::size_t j = 0; j < k; ++j) {
        const std::uint64_t delta = vr.next();
        if (delta >= n || next + delta >= n)
            r.fail(hitch::detail::concat("index of entry ", j, " is outside the bucket of ", n, " elements"));
        sel.index[j] = next + delta;
        next = sel.index[j] + 1;
    }
    if (!vr.done())
        r.fail(hitch::detail::concat(rest.data() + rest.size() - vr.position(), " unexpected bytes after the indices"));
}

/// out = scatter(sel) (zeros elsewhere) or out += scatter(sel).
template <bool Add>
inline void scatter(const sparse_selection& sel, std::span<float> out) {
    if constexpr (!Add) std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t j = 0; j < sel.size(); ++j) out[sel.index[j]] += sel.value[j];
}

}  // namespace hitch::compress::detail
