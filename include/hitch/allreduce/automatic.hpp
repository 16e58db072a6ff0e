#pragma once
// hitch::allreduce::automatic: picks a schedule per call from the world size and the byte count with the
// alpha-beta-gamma cost model (hitch/allreduce/cost.hpp): the candidate with the smallest predicted time wins.
// Candidates: recursive_doubling, ring, rabenseifner, binary_tree, double_binary_tree, and the communicator's own
// all-reduce (native) where it has one and hitch/allreduce/native.hpp is included.
//
// The constants are measured once per group by the first call that needs them (a few milliseconds: a ping-pong
// for alpha, a 1 MiB exchange for beta, a 1 MiB combine for gamma, two native all-reduces where available), taken
// as the maximum over ranks so every rank predicts the same and picks the same schedule, and cached in the group.
// group::set_constants() (or options::constants) overrides them; every rank must then use the same values.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/double_binary_tree.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/concepts/allreduce_schedule.hpp"
#include "hitch/core/options.hpp"

namespace hitch::allreduce {

/// Capability trait: C has an all-reduce of its own that allreduce::native can call. Specialised by the header
/// that implements it (hitch/allreduce/native.hpp for comm::mpi).
template <class C>
struct has_native_allreduce : std::false_type {};

/// A communicator that exposes a native handle is expected to have a native all-reduce; automatic then insists on
/// seeing it (so every translation unit makes the same choice).
template <class C>
concept exposes_native_handle = requires(const C& c) { c.native_handle(); };

class native;

namespace detail {

/// `native`, made dependent on C so it must be complete only when a communicator that has one is used.
template <class C>
struct native_for {
    using type = native;
};

}  // namespace detail

class automatic {
public:
    struct options {
        /// Use these constants instead of measuring (the same on every rank).
        std::optional<cost_constants> constants;
        ::hitch::allreduce::ring::options ring{};
        ::hitch::allreduce::recursive_doubling::options recursive_doubling{};
        ::hitch::allreduce::rabenseifner::options rabenseifner{};
        ::hitch::allreduce::binary_tree::options binary_tree{};
        ::hitch::allreduce::double_binary_tree::options double_binary_tree{};

        void validate() const {
            if (constants) constants->validate();
            ring.validate();
            recursive_doubling.validate();
            rabenseifner.validate();
            binary_tree.validate();
            double_binary_tree.validate();
        }
    };

    static constexpr std::string_view name = "automatic";
    static constexpr int calibration_channel = 60;

    automatic() = default;
    explicit automatic(const options& o)
        : options_(o),
          ring_(o.ring),
          recursive_doubling_(o.recursive_doubling),
          rabenseifner_(o.rabenseifner),
          binary_tree_(o.binary_tree),
          double_binary_tree_(o.double_binary_tree) {
        options_.validate();
    }
    [[nodiscard]] const options& settings() const noexcept { return options_; }

    /// The cost of the schedule the model picks.
    [[nodiscard]] cost_estimate cost(int p, std::size_t n_bytes, const cost_constants& k) const {
        cost_estimate best;
        double best_s = -1;
        visit_candidates(k, [&](std::string_view, const auto& s) {
            const cost_estimate c = s.cost(p, n_bytes, k);
            if (best_s < 0 || c.seconds(k) < best_s) {
                best = c;
                best_s = c.seconds(k);
            }
        });
        return best;
    }

    /// The name of the schedule the model picks for p ranks and n bytes (the first of equally cheap ones, in the
    /// order recursive_doubling, ring, rabenseifner, binary_tree, double_binary_tree, native).
    [[nodiscard]] std::string_view choose(int p, std::size_t n_bytes, const cost_constants& k) const {
        std::string_view best = recursive_doubling::name;
        double best_s = -1;
        visit_candidates(k, [&](std::string_view nm, const auto& s) {
            const double c = s.cost(p, n_bytes, k).seconds(k);
            if (best_s < 0 || c < best_s) {
                best = nm;
                best_s = c;
            }
        });
        return best;
    }

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        const cost_constants k = constants_for(t);
        const std::string_view pick = choose(t.size(), data.size_bytes(), k);
        if (pick == ring::name) return ring_.run(t, data, op);
        if (pick == recursive_doubling::name) return recursive_doubling_.run(t, data, op);
        if (pick == rabenseifner::name) return rabenseifner_.run(t, data, op);
        if (pick == binary_tree::name) return binary_tree_.run(t, data, op);
        if (pick == double_binary_tree::name) return double_binary_tree_.run(t, data, op);
        if constexpr (has_native_allreduce<C>::value) {
            return typename detail::native_for<C>::type{}.run(t, data, op);
        }
        throw config_error(detail::concat("hitch::allreduce::automatic: no candidate named ", pick));
    }

    /// The constants for this communicator: the options', else the group's, else measured now (collective) and
    /// cached in the group.
    template <communicator C>
    [[nodiscard]] cost_constants constants_for(transport<C>& t) const {
        if constexpr (exposes_native_handle<C>)
            static_assert(has_native_allreduce<C>::value,
                          "hitch::allreduce::automatic on a communicator with a native handle (comm::mpi) also weighs "
                          "its native all-reduce: #include \"hitch/allreduce/native.hpp\" (and link hitch::mpi)");
        if (options_.constants) return *options_.constants;
        {
            std::lock_guard lock(t.state().m);
            if (t.state().constants) return *t.state().constants;
        }
        const cost_constants k = calibrate(t);
        std::lock_guard lock(t.state().m);
        if (!t.state().constants) t.state().constants = k;
        return *t.state().constants;
    }

    /// Measures the constants (collective over t's communicator); the result is the same on every rank.
    template <communicator C>
    [[nodiscard]] static cost_constants calibrate(transport<C>& t) {
        using clock = std::chrono::steady_clock;
        const int p = t.size(), me = t.rank();
        cost_constants k;
        if (p <= 1) return k;
        const int partner = (me ^ 1) < p ? (me ^ 1) : -1;
        const auto seconds_since = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };

        // alpha: half the round trip of a tiny message between partners (best of a few runs).
        double alpha = 1.0;
        float token = 0.0f;
        if (partner >= 0) {
            for (int attempt = 0; attempt < 3; ++attempt) {
                const auto start = clock::now();
                constexpr int trips = 8;
                for (int i = 0; i < trips; ++i) {
                    if (me < partner) {
                        t.template send<float>(partner, calibration_channel, std::span<const float>(&token, 1)).wait(t.limit());
                        t.template receive_into<float>(partner, calibration_channel, std::span<float>(&token, 1)).wait(t.limit());
                    } else {
                        t.template receive_into<float>(partner, calibration_channel, std::span<float>(&token, 1)).wait(t.limit());
                        t.template send<float>(partner, calibration_channel, std::span<const float>(&token, 1)).wait(t.limit());
                    }
                }
                alpha = std::min(alpha, seconds_since(start) / (2.0 * trips));
            }
        }
        // beta: a 1 MiB exchange between partners; gamma: combining 1 MiB of floats.
        constexpr std::size_t bytes = std::size_t{1} << 20;
        const std::size_t count = bytes / sizeof(float);
        std::span<float> a = t.template scratch<float>(count);
        std::span<float> b = t.template scratch<float>(count);
        std::fill(a.begin(), a.end(), 1.0f);
        std::fill(b.begin(), b.end(), 2.0f);
        double beta = 1.0;
        if (partner >= 0) {
            for (int attempt = 0; attempt < 3; ++attempt) {
                const auto start = clock::now();
                t.exchange_copy(partner, std::span<const float>(a), partner, b, count, calibration_channel + 1);
                beta = std::min(beta, std::max(seconds_since(start) - alpha, 1e-12) / static_cast<double>(bytes));
            }
        }
        double gamma = 1.0;
        for (int attempt = 0; attempt < 3; ++attempt) {
            const auto start = clock::now();
            combine(a.data(), a.data(), b.data(), count, reduce_op::sum);
            gamma = std::min(gamma, std::max(seconds_since(start), 1e-12) / static_cast<double>(bytes));
        }
        if (partner < 0) alpha = beta = 0.0;  // the odd rank out: the maximum over ranks decides
        k.alpha_s = alpha;
        k.beta_s_per_byte = beta;
        k.gamma_s_per_byte = gamma;
        if constexpr (has_native_allreduce<C>::value) {
            const auto time_native = [&](std::size_t n) {
                double best = 1.0;
                for (int attempt = 0; attempt < 3; ++attempt) {
                    const auto start = clock::now();
                    typename detail::native_for<C>::type{}.run(t, a.subspan(0, n), reduce_op::sum);
                    best = std::min(best, seconds_since(start));
                }
                return best;
            };
            const double small = time_native(1);
            const double large = time_native(count);
            k.native_alpha_s = small;
            k.native_beta_s_per_byte = std::max(large - small, 1e-12) / static_cast<double>(bytes);
        }
        // Every rank adopts the maximum of each constant, so all make the same choices.
        const std::vector<cost_constants> all = comm::allgather_value(t.comm(), k);
        for (const cost_constants& o : all) {
            k.alpha_s = std::max(k.alpha_s, o.alpha_s);
            k.beta_s_per_byte = std::max(k.beta_s_per_byte, o.beta_s_per_byte);
            k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, o.gamma_s_per_byte);
            k.native_alpha_s = std::max(k.native_alpha_s, o.native_alpha_s);
            k.native_beta_s_per_byte = std::max(k.native_beta_s_per_byte, o.native_beta_s_per_byte);
        }
        k.alpha_s = std::max(k.alpha_s, 1e-9);
        k.beta_s_per_byte = std::max(k.beta_s_per_byte, 1e-13);
        k.gamma_s_per_byte = std::max(k.gamma_s_per_byte, 1e-13);
        return k;
    }

private:
    template <class F>
    void visit_candidates(const cost_constants& k, F&& f) const {
        f(recursive_doubling::name, recursive_doubling_);
        f(ring::name, ring_);  // before rabenseifner: on a tie (p = 2) the wavefront ring overlaps its two phases
        f(rabenseifner::name, rabenseifner_);
        f(binary_tree::name, binary_tree_);
        f(double_binary_tree::name, double_binary_tree_);
        if (k.has_native()) f(std::string_view("native"), native_model{});
    }
    /// The native all-reduce as measured.
    struct native_model {
        [[nodiscard]] cost_estimate cost(int, std::size_t n, const cost_constants& k) const { return native_cost(n, k); }
    };

    options options_{};
    ring ring_{};
    recursive_doubling recursive_doubling_{};
    rabenseifner rabenseifner_{};
    binary_tree binary_tree_{};
    double_binary_tree double_binary_tree_{};
};

static_assert(hitch::allreduce_schedule<automatic, comm::local>,
              "hitch::allreduce::automatic must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
