#pragma once
// The sparse set the sparse exchanges (SparCML, Renggli et al. SC'19) move between ranks: the nonzeros of a decoded
// message as ascending uint32 indices and float values, merged by the union of the indices (a + b where both), and
// switched for good to a dense array of n floats once its sparse form is no smaller than the dense one. Its wire
// form and the checks a received one passes live here too, so the exchanges and the tests read one definition.
//
// Wire form (native byte order: both ends are ranks of one job): a dense set is its n floats (4 n bytes); a sparse
// set of k entries is k uint32 indices then k floats (8 k bytes, always < 4 n, since a set that large is dense). So
// the size alone tells the form apart and nothing else is framed.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "hitch/core/error.hpp"

namespace hitch::compress::detail {

struct sparse_set {
    /// Dense: value holds all n elements and index is empty. Sparse: index ascending, value[j] at index[j].
    bool dense = false;
    std::vector<std::uint32_t> index;
    std::vector<float> value;

    /// Bytes of the wire form.
    [[nodiscard]] std::size_t wire_bytes() const noexcept {
        return dense ? value.size() * sizeof(float) : index.size() * (sizeof(std::uint32_t) + sizeof(float));
    }
};

/// Whether k entries over n elements are still sparse: their sparse bytes (8 k) below the dense bytes (4 n).
[[nodiscard]] constexpr bool stays_sparse(std::size_t k, std::size_t n) noexcept { return 2 * k < n; }

/// Makes `s` dense over n elements (absent elements +0); a no-op for a dense set.
inline void make_dense(sparse_set& s, std::size_t n) {
    if (s.dense) return;
    std::vector<float> full(n, 0.0f);
    for (std::size_t j = 0; j < s.index.size(); ++j) full[s.index[j]] = s.value[j];
    s.value = std::move(full);
    s.index.clear();
    s.dense = true;
}

/// The nonzeros of `values` (+0 and -0 are left out: adding them changes no sum), dense if they are not sparse.
inline void sparse_from_dense(std::span<const float> values, sparse_set& out) {
    const std::size_t n = values.size();
    out.index.clear();
    out.value.clear();
    out.dense = false;
    for (std::size_t i = 0; i < n; ++i)
        if (values[i] != 0.0f) {
            out.index.push_back(static_cast<std::uint32_t>(i));
            out.value.push_back(values[i]);
        }
    if (!stays_sparse(out.index.size(), n)) {
        out.value.assign(values.begin(), values.end());
        out.index.clear();
        out.dense = true;
    }
}

/// out = a merged with b over n elements: the union of the indices, a + b where both hold one. Float addition is
/// commutative, so merge(a, b) and merge(b, a) are the same bits and both partners of a round hold the same set;
/// the dense form gives the same bits as the sparse one (x + 0 = x). `out` must be neither a nor b.
inline void merge(const sparse_set& a, const sparse_set& b, std::size_t n, sparse_set& out) {
    out.index.clear();
    out.value.clear();
    if (a.dense || b.dense) {
        const sparse_set& d = a.dense ? a : b;
        const sparse_set& o = a.dense ? b : a;
        out.dense = true;
        out.value = d.value;
        if (o.dense) {
            for (std::size_t i = 0; i < n; ++i) out.value[i] = d.value[i] + o.value[i];
        } else {
            for (std::size_t j = 0; j < o.index.size(); ++j) out.value[o.index[j]] = d.value[o.index[j]] + o.value[j];
        }
        return;
    }
    out.dense = false;
    out.index.reserve(a.index.size() + b.index.size());
    out.value.reserve(a.index.size() + b.index.size());
    std::size_t i = 0, j = 0;
    while (i < a.index.size() || j < b.index.size()) {
        if (j == b.index.size() || (i < a.index.size() && a.index[i] < b.index[j])) {
            out.index.push_back(a.index[i]);
            out.value.push_back(a.value[i++]);
        } else if (i == a.index.size() || b.index[j] < a.index[i]) {
            out.index.push_back(b.index[j]);
            out.value.push_back(b.value[j++]);
        } else {
            out.index.push_back(a.index[i]);
            out.value.push_back(a.value[i++] + b.value[j++]);
        }
    }
    if (!stays_sparse(out.index.size(), n)) make_dense(out, n);
}

/// The set written over n elements into `out` (wire form, see the file comment).
inline void write_sparse(const sparse_set& s, std::vector<std::byte>& out) {
    out.resize(s.wire_bytes());
    if (s.dense) {
        if (!s.value.empty()) std::memcpy(out.data(), s.value.data(), s.value.size() * sizeof(float));
        return;
    }
    const std::size_t k = s.index.size();
    if (k == 0) return;
    std::memcpy(out.data(), s.index.data(), k * sizeof(std::uint32_t));
    std::memcpy(out.data() + k * sizeof(std::uint32_t), s.value.data(), k * sizeof(float));
}

/// Whether a received size can be a set over n elements (checked before the payload is received).
[[nodiscard]] constexpr bool plausible_wire_bytes(std::uint64_t bytes, std::size_t n) noexcept {
    return bytes == std::uint64_t{4} * n || (bytes % 8 == 0 && bytes < std::uint64_t{4} * n);
}

/// Reads a set over n elements from its wire form; corrupt_message_error on a bad size or an index out of range or
/// not ascending.
inline void read_sparse(std::span<const std::byte> in, std::size_t n, sparse_set& out, const char* who) {
    out.index.clear();
    out.value.clear();
    if (in.size() == n * sizeof(float)) {
        out.dense = true;
        out.value.resize(n);
        if (n != 0) std::memcpy(out.value.data(), in.data(), n * sizeof(float));
        return;
    }
    if (!plausible_wire_bytes(in.size(), n))
        throw corrupt_message_error(hitch::detail::concat(who, ": a sparse set of ", in.size(), " bytes over ", n,
                                                          " elements: the size is neither 4 n (dense) "
                                                          "nor a multiple of 8 below it (sparse)"));
    const std::size_t k = in.size() / 8;
    out.dense = false;
    out.index.resize(k);
    out.value.resize(k);
    std::memcpy(out.index.data(), in.data(), k * sizeof(std::uint32_t));
    std::memcpy(out.value.data(), in.data() + k * sizeof(std::uint32_t), k * sizeof(float));
    for (std::size_t j = 0; j < k; ++j) {
        if (out.index[j] >= n)
            throw corrupt_message_error(hitch::detail::concat(who, ": a sparse set's index ", out.index[j],
                                                              " is out of range for ", n, " elements"));
        if (j > 0 && out.index[j] <= out.index[j - 1])
            throw corrupt_message_error(hitch::detail::concat(who, ": a sparse set's indices are not ascending (",
                                                              out.index[j - 1], " then ", out.index[j], ")"));
    }
}

/// out = the set as n floats.
inline void write_dense(const sparse_set& s, std::span<float> out) {
    if (s.dense) {
        std::memcpy(out.data(), s.value.data(), out.size() * sizeof(float));
        return;
    }
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t j = 0; j < s.index.size(); ++j) out[s.index[j]] = s.value[j];
}

}  // namespace hitch::compress::detail
