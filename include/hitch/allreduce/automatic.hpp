#pragma once
// hitch::allreduce::automatic: picks a schedule per call from the world size and the byte count with the
// alpha-beta-gamma cost model (hitch/allreduce/cost.hpp): the candidate with the smallest predicted time wins.
// Candidates: recursive_doubling, ring, rabenseifner, binary_tree, double_binary_tree, parameter_server (one shard
// per rank, which on a shared address space reads and writes each element once), and the communicator's own
// all-reduce (native) where it has one and hitch/allreduce/native.hpp is included.
//
// The constants are measured once per group by the first call that needs them: a ping-pong for alpha, a 1 MiB
// exchange for beta, a 1 MiB combine for gamma, two native all-reduces where available. A transport has costs the
// three constants cannot express (MPI switches to a rendezvous protocol above some message size; pipelined
// segments overlap their latencies; a buffer larger than the cache costs more per byte), so the same first call
// also times every candidate at seven probe sizes (4 KiB to 16 MiB, about a tenth of a second on one node), the
// first call larger than 16 MiB adds a probe at 64 MiB, and a prediction is the model times the measured-to-modelled
// ratio of that candidate, interpolated in log(n) between probes and held beyond them. Every rank adopts the maximum over ranks of every measurement, so all predict the same and pick the same
// schedule. group::set_constants() or options::constants replaces the measurements with the user's constants and
// the pure model (the same on every rank). A group remembers the choices made on it, so later calls of a size cost
// a lookup.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/allreduce/cost.hpp"
#include "hitch/allreduce/double_binary_tree.hpp"
#include "hitch/allreduce/parameter_server.hpp"
#include "hitch/allreduce/rabenseifner.hpp"
#include "hitch/allreduce/recursive_doubling.hpp"
#include "hitch/allreduce/reduce_op.hpp"
#include "hitch/allreduce/ring.hpp"
#include "hitch/allreduce/schedule.hpp"
#include "hitch/allreduce/transport.hpp"
#include "hitch/comm/agree.hpp"
#include "hitch/comm/local.hpp"
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

/// Measured times of the candidates at the probe sizes: how far each schedule's model is off on this
/// communicator. The same on every rank.
struct automatic_profile {
    static constexpr int probes = 8;         // 4 KiB, 16 KiB, ... 64 MiB
    static constexpr int first_probes = 7;   // measured by the first call: up to 16 MiB
    static constexpr int candidates = 7;     // recursive_doubling, ring, rabenseifner, binary_tree, double_binary_tree,
                                             // parameter_server, native
    std::array<double, probes> bytes{};
    std::array<std::array<double, probes>, candidates> seconds{};  // 0: not measured (native unavailable)
    int measured = 0;                                               // probes measured: bytes[0, measured)

    [[nodiscard]] static constexpr std::size_t probe_bytes(int i) noexcept { return std::size_t{4096} << (2 * i); }
};

class automatic {
public:
    struct options_type {
        /// Use these constants instead of measuring (the same on every rank).
        std::optional<cost_constants> constants;
        ::hitch::allreduce::ring::options_type ring{};
        ::hitch::allreduce::recursive_doubling::options_type recursive_doubling{};
        ::hitch::allreduce::rabenseifner::options_type rabenseifner{};
        ::hitch::allreduce::binary_tree::options_type binary_tree{};
        ::hitch::allreduce::double_binary_tree::options_type double_binary_tree{};
        /// The parameter-server candidate is sharded over every rank (servers is capped at the world size).
        ::hitch::allreduce::parameter_server::options_type parameter_server{.servers = 1 << 20};

        void validate() const {
            if (constants) constants->validate();
            ring.validate();
            recursive_doubling.validate();
            rabenseifner.validate();
            binary_tree.validate();
            double_binary_tree.validate();
            parameter_server.validate();
        }

        friend bool operator==(const options_type&, const options_type&) = default;
    };

    static constexpr std::string_view name = "automatic";
    static constexpr int calibration_channel = 60;

    automatic() = default;
    explicit automatic(const options_type& o)
        : options_(o),
          ring_(o.ring),
          recursive_doubling_(o.recursive_doubling),
          rabenseifner_(o.rabenseifner),
          binary_tree_(o.binary_tree),
          double_binary_tree_(o.double_binary_tree),
          parameter_server_(o.parameter_server) {
        options_.validate();
    }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }

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
    /// order of candidate_names); with a profile, each model is first scaled by its measured ratio.
    [[nodiscard]] std::string_view choose(int p, std::size_t n_bytes, const cost_constants& k,
                                          const automatic_profile* profile = nullptr) const {
        return candidate_names[static_cast<std::size_t>(choose_index(p, n_bytes, k, profile))];
    }

    /// The candidates in the order choose() weighs them (native last).
    static constexpr std::array<std::string_view, automatic_profile::candidates> candidate_names{
        recursive_doubling::name, ring::name,        rabenseifner::name, binary_tree::name, double_binary_tree::name,
        parameter_server::name,   std::string_view("native")};

    template <communicator C, floating_element T>
    void run(transport<C>& t, std::span<T> data, reduce_op op) const {
        if (t.size() <= 1) return;
        switch (pick(t, data.size_bytes())) {
            case 0: return recursive_doubling_.run(t, data, op);
            case 1: return ring_.run(t, data, op);
            case 2: return rabenseifner_.run(t, data, op);
            case 3: return binary_tree_.run(t, data, op);
            case 4: return double_binary_tree_.run(t, data, op);
            case 5: return parameter_server_.run(t, data, op);
            default: break;
        }
        if constexpr (has_native_allreduce<C>::value) {
            return typename detail::native_for<C>::type{}.run(t, data, op);
        }
        throw config_error("hitch::allreduce::automatic: the model picked native, which this communicator lacks");
    }

    /// Where a group keeps the choices automatic made on it (group::set_constants() drops them with the rest).
    static constexpr std::string_view decisions_key = "automatic/decisions";

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
        const auto prof = std::make_shared<automatic_profile>(measure_profile(t, automatic_profile{}, automatic_profile::first_probes));
        std::lock_guard lock(t.state().m);
        if (!t.state().constants) {
            t.state().constants = k;
            t.state().cache.insert_or_assign(std::string(profile_key), prof);
        }
        return *t.state().constants;
    }

    /// The measured profile of this communicator, or null when the constants come from the user. Measured with
    /// the constants, by the first call that needs them.
    template <communicator C>
    [[nodiscard]] std::shared_ptr<automatic_profile> profile_for(transport<C>& t) const {
        if (options_.constants) return nullptr;
        return measured_profile(t.state());
    }

    /// The profile measured on a communicator (group::state()), or null before the first automatic call or
    /// after group::set_constants().
    template <communicator C>
    [[nodiscard]] static std::shared_ptr<automatic_profile> measured_profile(shared_state<C>& state) {
        std::lock_guard lock(state.m);
        auto it = state.cache.find(profile_key);
        if (it == state.cache.end()) return nullptr;
        return std::static_pointer_cast<automatic_profile>(it->second);
    }

    /// Where the profile is kept in a group's shared state (group::set_constants() drops it).
    static constexpr std::string_view profile_key = "automatic/profile";

    /// `base` with every candidate timed at the probes from base.measured up to `upto` (collective); the result
    /// is the same on every rank.
    template <communicator C>
    [[nodiscard]] automatic_profile measure_profile(transport<C>& t, const automatic_profile& base, int upto) const {
        using clock = std::chrono::steady_clock;
        automatic_profile prof = base;
        const int first = base.measured;
        const std::size_t largest = automatic_profile::probe_bytes(upto - 1);
        const std::size_t held = t.scratch_mark();
        std::span<float> data = t.template scratch<float>(largest / sizeof(float));
        std::fill(data.begin(), data.end(), 1e-30f);
        for (int i = first; i < upto; ++i) {
            const std::size_t bytes = automatic_profile::probe_bytes(i);
            prof.bytes[static_cast<std::size_t>(i)] = static_cast<double>(bytes);
            const std::span<float> probe = data.subspan(0, bytes / sizeof(float));
            // The minimum of several runs (preemption by other processes only ever adds time), after one run of
            // each that is not counted (first touches of buffers and connections). Small probes are cheap and the
            // noisiest, so they get the most runs.
            const int repeats = bytes <= (std::size_t{64} << 10) ? 31 : bytes <= (std::size_t{1} << 20) ? 9 : 5;
            for (int rep = -1; rep < repeats; ++rep) {  // interleaved, best of the repeats
                int c = 0;
                const auto time = [&](auto&& run_once) {
                    const std::size_t mark = t.scratch_mark();
                    const auto start = clock::now();
                    run_once();
                    const double s = std::chrono::duration<double>(clock::now() - start).count();
                    t.release_scratch(mark);  // the next run reuses this memory, as later calls of a size do
                    double& slot = prof.seconds[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)];
                    if (rep >= 0) slot = rep == 0 ? s : std::min(slot, s);
                    ++c;
                };
                time([&] { recursive_doubling_.run(t, probe, reduce_op::sum); });
                time([&] { ring_.run(t, probe, reduce_op::sum); });
                time([&] { rabenseifner_.run(t, probe, reduce_op::sum); });
                time([&] { binary_tree_.run(t, probe, reduce_op::sum); });
                time([&] { double_binary_tree_.run(t, probe, reduce_op::sum); });
                time([&] { parameter_server_.run(t, probe, reduce_op::sum); });
                if constexpr (has_native_allreduce<C>::value)
                    time([&] { typename detail::native_for<C>::type{}.run(t, probe, reduce_op::sum); });
            }
        }
        t.release_scratch(held);
        prof.measured = upto;
        const std::vector<automatic_profile> all = comm::allgather_value(t.comm(), prof);
        for (const automatic_profile& o : all)
            for (std::size_t c = 0; c < prof.seconds.size(); ++c)
                for (auto i = static_cast<std::size_t>(first); i < static_cast<std::size_t>(upto); ++i)
                    prof.seconds[c][i] = std::max(prof.seconds[c][i], o.seconds[c][i]);
        return prof;
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
    /// Index into candidate_names of the cheapest candidate (the first of equally cheap ones).
    [[nodiscard]] int choose_index(int p, std::size_t n_bytes, const cost_constants& k,
                                   const automatic_profile* profile) const {
        int best = 0, index = 0;
        double best_s = -1;
        visit_candidates(k, [&](std::string_view, const auto& s) {
            double c = s.cost(p, n_bytes, k).seconds(k);
            if (profile != nullptr) c *= measured_ratio(*profile, index, p, n_bytes, k, s);
            if (best_s < 0 || c < best_s) {
                best = index;
                best_s = c;
            }
            ++index;
        });
        return best;
    }

    /// choose_index() takes about 0.7 us (every candidate's model at n and at the probes around it), as long as a
    /// small all-reduce itself; a group remembers its recent answers, which depend on nothing else than these
    /// inputs (the profile is immutable once measured; a new one is a new object).
    struct decision {
        options_type settings;
        int p = 0;
        std::size_t n = 0;
        cost_constants k;
        const automatic_profile* profile = nullptr;
        int pick = 0;
    };
    /// Guarded by the group state's mutex.
    struct decision_memo {
        static constexpr std::size_t capacity = 64;
        std::vector<decision> entries;
        std::size_t next = 0;  // the entry replaced next once full

        /// The remembered pick for these inputs, or -1.
        [[nodiscard]] int find(const options_type& o, int p, std::size_t n, const cost_constants& k,
                               const automatic_profile* profile) const {
            for (const decision& d : entries)
                if (d.n == n && d.p == p && d.profile == profile && d.k == k && d.settings == o) return d.pick;
            return -1;
        }
    };

    /// The candidate for this call. A call of a size seen before costs one lock of the group's state and a scan
    /// of the remembered choices; otherwise the constants (and profile) are looked up, or measured, and weighed.
    template <communicator C>
    [[nodiscard]] int pick(transport<C>& t, std::size_t n_bytes) const {
        auto& state = t.state();
        {
            std::lock_guard lock(state.m);
            const cost_constants* k = options_.constants ? &*options_.constants : state.constants ? &*state.constants : nullptr;
            const auto memo = state.cache.find(decisions_key);
            if (k != nullptr && memo != state.cache.end()) {
                const automatic_profile* profile = nullptr;
                if (!options_.constants)
                    if (auto it = state.cache.find(profile_key); it != state.cache.end())
                        profile = static_cast<const automatic_profile*>(it->second.get());
                const int hit = static_cast<const decision_memo*>(memo->second.get())->find(options_, t.size(), n_bytes, *k, profile);
                if (hit >= 0) return hit;
            }
        }
        const cost_constants k = constants_for(t);
        std::shared_ptr<automatic_profile> profile = profile_for(t);
        if (profile && profile->measured < automatic_profile::probes &&
            static_cast<double>(n_bytes) > profile->bytes[static_cast<std::size_t>(profile->measured - 1)]) {
            // Larger than any probe: time the candidates at the probes up to this size (up to 64 MiB) first, once
            // per group, so caches the smaller probes fitted in do not decide. Collective: every rank makes this call
            // with the same size and the same profile.
            int upto = profile->measured;
            while (upto < automatic_profile::probes && automatic_profile::probe_bytes(upto - 1) < n_bytes) ++upto;
            auto longer = std::make_shared<automatic_profile>(measure_profile(t, *profile, upto));
            std::lock_guard lock(t.state().m);
            if (auto it = t.state().cache.find(profile_key); it != t.state().cache.end() && it->second == profile)
                it->second = longer;
            profile = std::move(longer);
        }
        return remembered_choice(t, n_bytes, k, profile.get());
    }

    template <communicator C>
    [[nodiscard]] int remembered_choice(transport<C>& t, std::size_t n_bytes, const cost_constants& k,
                                        const automatic_profile* profile) const {
        const int p = t.size();
        const auto memo = t.state().template cached<decision_memo>(decisions_key,
                                                                    [] { return std::make_shared<decision_memo>(); });
        {
            std::lock_guard lock(t.state().m);
            if (const int hit = memo->find(options_, p, n_bytes, k, profile); hit >= 0) return hit;
        }
        const int pick = choose_index(p, n_bytes, k, profile);
        std::lock_guard lock(t.state().m);
        decision d{options_, p, n_bytes, k, profile, pick};
        if (memo->entries.size() < decision_memo::capacity) {
            memo->entries.push_back(d);
        } else {
            memo->entries[memo->next] = d;
            memo->next = (memo->next + 1) % decision_memo::capacity;
        }
        return pick;
    }

    /// Measured over modelled time for candidate `c` at n bytes: interpolated in log(n) between the two probes
    /// around n, held constant beyond the first and last probe. 1 when the candidate was not measured.
    template <class S>
    static double measured_ratio(const automatic_profile& prof, int c, int p, std::size_t n, const cost_constants& k,
                                 const S& s) {
        const auto& times = prof.seconds[static_cast<std::size_t>(c)];
        const auto ratio_at = [&](std::size_t i) {
            const double model = s.cost(p, static_cast<std::size_t>(prof.bytes[i]), k).seconds(k);
            return model > 0 && times[i] > 0 ? times[i] / model : 1.0;
        };
        const double x = static_cast<double>(std::max<std::size_t>(n, 1));
        const std::size_t last = static_cast<std::size_t>(std::max(prof.measured, 1)) - 1;
        if (x <= prof.bytes[0]) return ratio_at(0);
        if (x >= prof.bytes[last]) return ratio_at(last);
        std::size_t i = 0;
        while (prof.bytes[i + 1] < x) ++i;
        const double w = std::log(x / prof.bytes[i]) / std::log(prof.bytes[i + 1] / prof.bytes[i]);
        return std::exp((1 - w) * std::log(ratio_at(i)) + w * std::log(ratio_at(i + 1)));
    }

    template <class F>
    void visit_candidates(const cost_constants& k, F&& f) const {
        f(recursive_doubling::name, recursive_doubling_);
        f(ring::name, ring_);  // before rabenseifner: on a tie (p = 2) the wavefront ring overlaps its two phases
        f(rabenseifner::name, rabenseifner_);
        f(binary_tree::name, binary_tree_);
        f(double_binary_tree::name, double_binary_tree_);
        f(parameter_server::name, parameter_server_);
        if (k.has_native()) f(std::string_view("native"), native_model{});
    }
    /// The native all-reduce as measured.
    struct native_model {
        [[nodiscard]] cost_estimate cost(int p, std::size_t n, const cost_constants& k) const {
            return native_cost(p, n, k);
        }
    };

    options_type options_{};
    ring ring_{};
    recursive_doubling recursive_doubling_{};
    rabenseifner rabenseifner_{};
    binary_tree binary_tree_{};
    double_binary_tree double_binary_tree_{};
    parameter_server parameter_server_{parameter_server::options_type{.servers = 1 << 20}};
};

static_assert(schedule_for<automatic, comm::local>,
              "hitch::allreduce::automatic must model hitch::allreduce_schedule on comm::local");

}  // namespace hitch::allreduce
