#pragma once
// Checks of the compressed exchange (exchange/aggregate.hpp) written once against the communicator concept and
// run over comm::local (threads, 1 to 8 ranks) and comm::mpi (processes, 2 to 4 ranks). Each function is
// collective. Every rank can generate every rank's gradients (seeded by step and rank), so each rank computes the
// references itself:
//   - decode-then-sum: each rank's message encoded again with a state of its own, decoded and added in rank order;
//   - the compressed ring: the same algorithm run serially over p virtual ranks with the codec's own encode_ef;
//   - PowerSGD: the codec's two-round primitives called serially, sums in rank order.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <bit>

#include "../compress/helpers.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/allreduce/partition.hpp"
#include "hitch/compress/detail/random.hpp"
#include "hitch/compress/powersgd.hpp"
#include "hitch/concepts/communicator.hpp"
#include "hitch/exchange/aggregate.hpp"

namespace hitch_test {

namespace hc = hitch::compress;

inline void require(bool ok, const std::string& what) {
    if (!ok) throw std::runtime_error("check failed: " + what);
}

/// Gradients of `rank` at `step`. Exact data are small integers times 2^-4, so sums of up to 8 ranks are exact
/// in float, half and bfloat16 (the additive codecs' results are then independent of the summation order).
inline std::vector<float> data_of(std::size_t n, int step, int rank, bool exact) {
    if (!exact) return gradients(n, 7000 + 100 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank));
    std::vector<float> g(n);
    std::uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(step * 31 + rank + 1);
    for (auto& v : g) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = static_cast<float>(static_cast<int>(x >> 59) - 15) * 0.0625f;  // [-15, 16] / 16
    }
    return g;
}

template <class Codec>
typename Codec::state state_for_rank(const Codec& codec, std::size_t n, int rank) {
    auto s = codec.make_state(n);
    hc::detail::set_stream(s, rank);
    return s;
}

/// Sum over virtual ranks of decode(encode(g_r)), each rank's encode with its own persistent state.
template <class Codec>
std::vector<float> decode_then_sum(const Codec& codec, std::vector<typename Codec::state>& states, std::size_t n,
                                   int step, bool exact) {
    std::vector<float> ref(n, 0.0f);
    std::vector<std::byte> m;
    for (std::size_t r = 0; r < states.size(); ++r) {
        const auto g = data_of(n, step, static_cast<int>(r), exact);
        codec.encode(hitch::tensor_view<const float>(g), states[r], m);
        codec.decode_add(m, hitch::tensor_view<float>(ref));
    }
    return ref;
}

template <class State>
void set_step(State& s, std::uint64_t step) {
    if constexpr (requires { s.step; }) s.step = step;
}

/// The compressed ring over p virtual ranks, serially (see aggregate.hpp); residuals are updated in place (codecs
/// with hop feedback). With `bound` and `hop_bound`, hop_bound[i] receives the sum over element i's hops of the
/// codec's error bound for that hop's input (bound(chunk values) gives one bound per element of a chunk).
template <class Codec, class Bound = std::nullptr_t>
std::vector<float> simulate_ring(const Codec& codec, const std::vector<std::vector<float>>& inputs,
                                 std::vector<std::vector<float>>& residuals, std::uint64_t call,
                                 Bound&& bound = nullptr, std::vector<double>* hop_bound = nullptr) {
    using hop_t = typename hc::detail::ring_codec<Codec>::type;
    constexpr bool feedback = hc::ring_hop_feedback<Codec>;
    const hop_t& hop = [&]() -> const hop_t& {
        if constexpr (hc::detail::is_error_feedback<Codec>::value)
            return codec.inner();
        else
            return codec;
    }();
    const int p = static_cast<int>(inputs.size());
    const std::size_t n = inputs[0].size();
    if (hop_bound != nullptr) hop_bound->assign(n, 0.0);
    const auto chunk = [&](int c) { return hitch::allreduce::partition(n, p, ((c % p) + p) % p); };
    std::vector<std::vector<typename hop_t::state>> states(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r)
        for (int c = 0; c < p; ++c) {
            states[r].push_back(hop.make_state(chunk(c).count));
            set_step(states[r].back(), call * static_cast<std::uint64_t>(p) + static_cast<std::uint64_t>(c));
            hc::detail::set_stream(states[r].back(), r);
        }
    auto next_res = residuals;
    const auto encode = [&](int r, int c, const float* values, std::vector<std::byte>& out) {
        const auto b = chunk(c);
        const auto cc = static_cast<std::size_t>(((c % p) + p) % p);
        if constexpr (!std::is_same_v<std::remove_cvref_t<Bound>, std::nullptr_t>) {
            if (hop_bound != nullptr) {
                const auto e = bound(std::vector<float>(values, values + b.count));
                for (std::size_t i = 0; i < b.count; ++i) (*hop_bound)[b.offset + i] += e[i];
            }
        }
        if constexpr (feedback)
            hop.encode_ef(hitch::tensor_view<const float>(values, b.count),
                          std::span<const float>(residuals[r].data() + b.offset, b.count),
                          std::span<float>(next_res[r].data() + b.offset, b.count), states[r][cc], out);
        else
            hop.encode(hitch::tensor_view<const float>(values, b.count), states[r][cc], out);
    };
    std::vector<std::vector<std::byte>> msg(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) encode(r, r, inputs[r].data() + chunk(r).offset, msg[r]);
    std::vector<float> acc;
    for (int k = 0; k < p - 1; ++k) {
        const auto incoming = msg;
        for (int r = 0; r < p; ++r) {
            const int c = r - k - 1;
            const auto b = chunk(c);
            acc.assign(b.count, 0.0f);
            hop.decode(incoming[static_cast<std::size_t>((r - 1 + p) % p)], hitch::tensor_view<float>(acc));
            for (std::size_t i = 0; i < b.count; ++i) acc[i] += inputs[r][b.offset + i];
            encode(r, c, acc.data(), msg[r]);
        }
    }
    std::vector<float> result(n, 0.0f);
    for (int r = 0; r < p; ++r) {
        const auto b = chunk(r + 1);
        hop.decode(msg[r], hitch::tensor_view<float>(result.data() + b.offset, b.count));
    }
    if constexpr (feedback) residuals = next_res;
    return result;
}

/// Equal values everywhere (+0 and -0 are the same value: a sum that starts from +0 may differ from a single
/// contribution of -0 in the sign of zero only). The data are finite.
inline bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

inline std::string describe_difference(const std::vector<float>& got, const std::vector<float>& want) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) return hitch::detail::concat("element ", i, ": got ", got[i], ", want ", want[i]);
    return "sizes differ";
}

/// aggregate_allgather equals decode-then-sum, bit for bit, for any codec.
template <hitch::communicator C, class Codec>
void allgather_equals_reference(C& comm, const Codec& codec, std::size_t n, int steps = 3) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<typename Codec::state> ref_states;
    for (int r = 0; r < p; ++r) ref_states.push_back(state_for_rank(codec, n, r));
    for (int t = 0; t < steps; ++t) {
        auto bucket = data_of(n, t, me, false);
        const auto stats = hc::aggregate_allgather(g, codec, st, hitch::tensor_view<float>(bucket));
        const auto ref = decode_then_sum(codec, ref_states, n, t, false);
        require(same_values(bucket, ref), hitch::detail::concat(Codec::name, " allgather, p = ", p, ", step ", t, ": ",
                                                                describe_difference(bucket, ref)));
        require(stats.path == hc::aggregation_path::allgather, "path");
    }
}

/// aggregate() over an additive codec: exact data gives decode-then-sum bit for bit; gradient data within the
/// rounding of summing p values in the summed type (eps of the type times the sum of magnitudes).
template <hitch::communicator C, class Codec>
void allreduce_equals_reference(C& comm, const Codec& codec, std::size_t n, double eps) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<typename Codec::state> ref_states;
    for (int r = 0; r < p; ++r) ref_states.push_back(state_for_rank(codec, n, r));
    for (int t = 0; t < 4; ++t) {
        // With error feedback, inexact data would leave residuals that make the later "exact" steps inexact.
        const bool exact = t % 2 == 0 || hc::detail::is_error_feedback<Codec>::value;
        auto bucket = data_of(n, t, me, exact);
        const auto stats = hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));
        require(stats.path == hc::aggregation_path::allreduce, "path");
        const auto ref = decode_then_sum(codec, ref_states, n, t, exact);
        if (exact) {
            require(same_values(bucket, ref), hitch::detail::concat(Codec::name, " allreduce (exact data), p = ", p,
                                                                    ": ", describe_difference(bucket, ref)));
        } else {
            std::vector<float> magnitude(n, 0.0f), one(n);
            std::vector<std::byte> m;
            for (int r = 0; r < p; ++r) {  // sum of |decoded contributions|, for the rounding bound
                auto s = state_for_rank(codec, n, r);
                set_step(s, static_cast<std::uint64_t>(t));
                const auto gr = data_of(n, t, r, false);
                codec.encode(hitch::tensor_view<const float>(gr), s, m);
                codec.decode(m, hitch::tensor_view<float>(one));
                for (std::size_t i = 0; i < n; ++i) magnitude[i] += std::fabs(one[i]);
            }
            for (std::size_t i = 0; i < n; ++i)
                require(std::fabs(bucket[i] - ref[i]) <= eps * (p + 1) * magnitude[i] + 1e-30,
                        hitch::detail::concat(Codec::name, " allreduce, p = ", p, ", element ", i, ": ", bucket[i],
                                              " vs ", ref[i]));
        }
    }
}

/// aggregate() over powersgd equals its primitives called serially (P and Q summed in rank order), to float
/// reassociation of the sums.
template <hitch::communicator C>
void low_rank_equals_reference(C& comm, const hc::powersgd& codec, std::span<const hc::matrix_shape> shapes,
                               std::size_t n) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, codec.make_state(n, shapes), n);
    std::vector<hc::powersgd::state> ref(static_cast<std::size_t>(p), codec.make_state(n, shapes));
    for (int t = 0; t < 4; ++t) {
        auto bucket = data_of(n, t, me, false);
        const auto stats = hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));
        require(stats.path == hc::aggregation_path::low_rank, "path");
        std::vector<float> p_sum(codec.p_count(ref[0]), 0.0f), q_sum(codec.q_count(ref[0]), 0.0f), part;
        for (int r = 0; r < p; ++r) {
            const auto gr = data_of(n, t, r, false);
            part.assign(p_sum.size(), 0.0f);
            codec.compute_p(hitch::tensor_view<const float>(gr), ref[r], std::span<float>(part));
            for (std::size_t i = 0; i < part.size(); ++i) p_sum[i] += part[i];
        }
        for (int r = 0; r < p; ++r) {
            part.assign(q_sum.size(), 0.0f);
            codec.compute_q(std::span<const float>(p_sum), ref[r], std::span<float>(part));
            for (std::size_t i = 0; i < part.size(); ++i) q_sum[i] += part[i];
        }
        std::vector<float> want(n), scratch(n);
        for (int r = 0; r < p; ++r)
            codec.finish_low_rank(std::span<const float>(p_sum), std::span<const float>(q_sum), ref[r],
                                  hitch::tensor_view<float>(r == 0 ? want : scratch));
        double norm = 0;
        for (float x : want) norm = std::max(norm, std::fabs(static_cast<double>(x)));
        for (std::size_t i = 0; i < n; ++i)
            require(std::fabs(bucket[i] - want[i]) <= 1e-4 * norm + 1e-7,
                    hitch::detail::concat("powersgd, p = ", p, ", element ", i, ": ", bucket[i], " vs ", want[i]));
        require(std::fabs(st.codec.residual[7] - ref[static_cast<std::size_t>(me)].residual[7]) <= 1e-4 * norm + 1e-7,
                "powersgd residual");
    }
}

/// aggregate() over a ring codec equals the serial simulation bit for bit. With hop feedback it conserves (sum of
/// inputs and old residuals = result + sum of new residuals, to rounding); without, its error is within the sum of
/// the codec's bounds over each element's hops. Either way it stays within the codec's bounds of the all-gather
/// aggregation. per_element_bound(g) gives the codec's error bound for each element of an input g.
template <hitch::communicator C, class Codec, class Bound>
void ring_matches_references(C& comm, const Codec& codec, std::size_t n, Bound&& per_element_bound, int steps = 3) {
    constexpr bool feedback = hc::ring_hop_feedback<Codec>;
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    auto gather_state = hc::make_aggregation_state(codec, n);
    std::vector<std::vector<float>> residuals(static_cast<std::size_t>(p), std::vector<float>(feedback ? n : 0, 0.0f));
    for (int t = 0; t < steps; ++t) {
        std::vector<std::vector<float>> inputs;
        for (int r = 0; r < p; ++r) inputs.push_back(data_of(n, t, r, false));
        const auto old_res = residuals;
        auto bucket = inputs[static_cast<std::size_t>(me)];
        const auto stats = hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket), hitch::allreduce::ring{});
        require(stats.path == hc::aggregation_path::compressed_ring, "path");
        std::vector<double> hop_bound;
        const auto sim =
            simulate_ring(codec, inputs, residuals, static_cast<std::uint64_t>(t), per_element_bound, &hop_bound);
        require(same_values(bucket, sim), hitch::detail::concat(Codec::name, " ring, p = ", p, ", step ", t, ": ",
                                                                describe_difference(bucket, sim)));
        std::vector<double> ring_error(n, 0.0);  // a bound on |ring - sum of inputs|
        if constexpr (feedback) {
            const auto& mine_res = [&]() -> const std::vector<float>& {
                if constexpr (hc::detail::is_error_feedback<Codec>::value)
                    return st.codec.residual;
                else
                    return st.ring_residual;
            }();
            require(same_values(mine_res, residuals[static_cast<std::size_t>(me)]),
                    "ring residual equals the simulation's");
            // Conservation, with the rounding of 2 p additions per element bounded by the magnitudes involved.
            for (std::size_t i = 0; i < n; ++i) {
                double lhs = 0, rhs = bucket[i], scale = std::fabs(bucket[i]);
                for (int r = 0; r < p; ++r) {
                    lhs += static_cast<double>(inputs[r][i]) + old_res[r][i];
                    rhs += residuals[r][i];
                    scale += std::fabs(inputs[r][i]) + std::fabs(old_res[r][i]) + std::fabs(residuals[r][i]);
                    ring_error[i] += std::fabs(residuals[r][i]) + std::fabs(old_res[r][i]);
                }
                require(std::fabs(lhs - rhs) <= 4.0 * p * std::ldexp(scale, -23) + 1e-30,
                        hitch::detail::concat(Codec::name, " ring conservation, element ", i, ": ", lhs, " vs ", rhs));
            }
        } else {
            // No residual: each hop's error is within the codec's bound for that hop's input.
            for (std::size_t i = 0; i < n; ++i) {
                double truth = 0, scale = 0;
                for (int r = 0; r < p; ++r) truth += inputs[r][i], scale += std::fabs(inputs[r][i]);
                ring_error[i] = hop_bound[i] * (1 + 1e-5) + 4.0 * p * std::ldexp(scale + std::fabs(bucket[i]), -23);
                require(std::fabs(bucket[i] - truth) <= ring_error[i] + 1e-12,
                        hitch::detail::concat(Codec::name, " ring error, element ", i, ": ", bucket[i] - truth,
                                              " beyond the hops' bound ", ring_error[i]));
            }
        }
        // Within the codec's bound of the all-gather aggregation (both compared with the exact sum).
        auto gathered = inputs[static_cast<std::size_t>(me)];
        hc::aggregate_allgather(g, codec, gather_state, hitch::tensor_view<float>(gathered));
        // error_feedback's all-gather carries residuals of its own after the first step: compare then only.
        if (hc::detail::is_error_feedback<Codec>::value && t > 0) continue;
        std::vector<std::vector<double>> bounds;
        for (int r = 0; r < p; ++r) bounds.push_back(per_element_bound(inputs[r]));
        for (std::size_t i = 0; i < n; ++i) {
            double gather_bound = 0;
            for (int r = 0; r < p; ++r) gather_bound += bounds[r][i];
            const double limit = ring_error[i] + gather_bound;
            require(std::fabs(static_cast<double>(bucket[i]) - gathered[i]) <= limit * (1 + 1e-5) + 1e-12,
                    hitch::detail::concat(Codec::name, " ring vs allgather, element ", i, ": ", bucket[i], " vs ",
                                          gathered[i], " bound ", limit));
        }
    }
}

/// The ring over an unbiased codec is unbiased. Fixed inputs, fresh rounding every step: for three fixed random
/// sign vectors w, Z_t = sum_i w_i (result_t,i - sum of inputs_i) has mean 0, and Z is a sum of hundreds of
/// independent-given-the-past rounding errors, so the mean of T samples lies within 6 standard errors (estimated
/// from the same samples) of 0. (Element by element the rounding of a tiny value is a rare event whose variance T
/// samples cannot estimate; the weighted sums test every element at once.)
template <hitch::communicator C, class Codec>
void ring_is_unbiased(C& comm, const Codec& codec, std::size_t n, int steps) {
    hitch::allreduce::group g(comm);
    const int p = comm.size(), me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    std::vector<double> truth(n, 0.0);
    for (int r = 0; r < p; ++r) {
        const auto x = data_of(n, 0, r, false);
        for (std::size_t i = 0; i < n; ++i) truth[i] += x[i];
    }
    std::vector<std::vector<double>> w(3, std::vector<double>(n));
    hc::detail::xoshiro256ss rng(12345);
    for (auto& v : w)
        for (auto& x : v) x = (rng() & 1u) ? 1.0 : -1.0;
    std::vector<double> sum(3, 0.0), sum2(3, 0.0);
    for (int t = 0; t < steps; ++t) {
        auto bucket = data_of(n, 0, me, false);
        hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket), hitch::allreduce::ring{});
        for (std::size_t k = 0; k < 3; ++k) {
            double z = 0;
            for (std::size_t i = 0; i < n; ++i) z += w[k][i] * (bucket[i] - truth[i]);
            sum[k] += z;
            sum2[k] += z * z;
        }
    }
    for (std::size_t k = 0; k < 3; ++k) {
        const double mean = sum[k] / steps, var = std::max(0.0, sum2[k] / steps - mean * mean);
        require(var > 0, "the ring's result varies from step to step");
        require(std::fabs(mean) <= 6.0 * std::sqrt(var / steps),
                hitch::detail::concat(Codec::name, " ring bias: mean of the weighted error ", mean, " beyond 6 x ",
                                      std::sqrt(var / steps)));
    }
}

/// A rank whose bucket holds NaN: every rank throws (non_finite_error), promptly, and no rank's state changes.
template <hitch::communicator C, class Codec, class Residual>
void failure_reaches_every_rank(C& comm, const Codec& codec, std::size_t n, Residual&& residual_of) {
    hitch::allreduce::group g(comm);
    const int me = comm.rank();
    auto st = hc::make_aggregation_state(codec, n);
    auto bucket = data_of(n, 0, me, false);
    hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));  // one good step first
    const auto before = residual_of(st);
    bucket = data_of(n, 1, me, false);
    if (me == comm.size() - 1) bucket[n / 2] = std::numeric_limits<float>::quiet_NaN();
    bool threw = false;
    try {
        hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));
    } catch (const hc::non_finite_error& e) {
        threw = true;
        if (me != comm.size() - 1)
            require(std::string(e.what()).find(std::to_string(comm.size() - 1)) != std::string::npos,
                    std::string("the error names the failing rank: ") + e.what());
    }
    require(threw, hitch::detail::concat(Codec::name, ": rank ", me, " did not throw non_finite_error"));
    require(residual_of(st) == before, hitch::detail::concat(Codec::name, ": rank ", me, "'s state changed"));
    // The group still works: a good step afterwards agrees everywhere.
    bucket = data_of(n, 2, me, false);
    hc::aggregate(g, codec, st, hitch::tensor_view<float>(bucket));
    const auto all = hitch::comm::allgather_value(comm, bucket[n / 3]);
    for (float x : all)
        require(std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(all[0]), "same result everywhere");
}

}  // namespace hitch_test

namespace hitch_test {

/// max |g| for every element (onebit and terngrad over a whole bucket).
inline std::vector<double> max_abs_bound(const std::vector<float>& g) {
    double m = 0;
    for (float x : g) m = std::max(m, std::fabs(static_cast<double>(x)));
    return std::vector<double>(g.size(), m);
}

/// ||group||_2 / s for every element (QSGD with groups of `group`, 0 for one group).
inline auto qsgd_bound(std::size_t group, std::uint32_t s) {
    return [group, s](const std::vector<float>& g) {
        std::vector<double> out(g.size());
        const std::size_t size = group == 0 ? std::max<std::size_t>(g.size(), 1) : group;
        for (std::size_t b = 0; b < g.size(); b += size) {
            double norm2 = 0;
            const std::size_t e = std::min(g.size(), b + size);
            for (std::size_t j = b; j < e; ++j) norm2 += static_cast<double>(g[j]) * g[j];
            for (std::size_t j = b; j < e; ++j) out[j] = std::sqrt(norm2) / s;
        }
        return out;
    };
}

}  // namespace hitch_test
