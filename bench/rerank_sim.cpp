// hitch-bench-rerank-sim: automatic's online ranking (allreduce/automatic/rerank.hpp) driven by simulated calls, to
// weigh its policy apart from a real host's noise. Seven candidates take fixed times (the fastest `--call-us`, the
// others 1.08, 1.15, 1.3, 1.5, 2 and 3 times it, in a random order per seed); the model's predictions are off by up
// to `--model-error` either way; each call also takes up to 3% of jitter. A load busy `--busy` of every 20 ms (a
// periodic one, as bench/duty_load.py runs beside hitch-bench-allreduce) multiplies the time of the calls that start
// while it is busy by `--slowdown`; other work takes 3 calls' time between two calls (the benchmark's other impls).
// `--random` makes each call meet the load with probability `--busy` instead. `--cold-runs N --cold-factor X`: each
// candidate's first N runs take X times as long (fresh memory at a new size).
// `--phase-calls L --phase-factor F --native-ratio R`: an eighth candidate, native (MPI's own all-reduce), takes R
// times the fastest; the host alternates between phases of random length (L calls on average, exponentially
// distributed) in which the seven schedules of the staged path take their times, and phases in which they take F
// times as long while native, which moves its bytes another way, keeps its time (dev-2c at 16-64 MiB: hitch's
// schedules 3-4x slower for a while, MPI_Allreduce unchanged).
// `--overlap`: the load slows a call by the share of it that overlaps the load's busy time (calls longer than the
// load's bursts, as at 64 MiB, all meet some of it) instead of by whether it starts in one. `--spread X`: each
// candidate feels the load differently, its slowdown `--slowdown` raised to a power drawn in [1-X, 1+X] (a schedule
// that serialises on one rank feels a busy core more). `--noise S`: each call's time is also multiplied by
// exp(N(0, S)). `--oracle`: every call runs the candidate with the lowest expected time instead of automatic's pick,
// a reference for what the noise alone costs the figure.
//
// The figure, per seed: the fastest candidate's time (with its median jitter) over the median of the last half of
// the calls, which is what hitch-bench-allreduce's ratio measures (with phases: the lowest of the candidates' medians
// over the same calls' phases, over automatic's median, both after the first 32 calls); printed: the mean, the worst,
// the 10th percentile and how many seeds fell below 0.9. With --overlap, --spread, --noise or --oracle the fastest is,
// as with phases, the lowest of the candidates' medians over the same calls.
//
//   hitch-bench-rerank-sim --call-us 3 --calls 20000 --busy 0.25 --slowdown 3

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hitch/allreduce/automatic/rerank.hpp"

namespace {

struct settings {
    double call_s = 3e-6;
    int calls = 20000;
    double busy = 0.25;
    double slowdown = 3.0;
    double model_error = 2.0;
    bool random = false;
    int seeds = 200;
    int cold_runs = 0;         // each candidate's first runs at a size ...
    double cold_factor = 1.0;  // ... take this many times as long (fresh memory, first use)
    double phase_calls = 0;    // mean length of the host's phases, in calls (0: no phases, no native)
    double phase_factor = 3.0;
    double native_ratio = 2.0;
    bool overlap = false;  // the load slows a call by the share of it that overlaps its busy time
    double spread = 0;     // each candidate's slowdown is --slowdown to a power in [1 - spread, 1 + spread]
    double noise = 0;      // each call's time is also multiplied by exp(N(0, noise))
    bool oracle = false;   // run the candidate with the lowest expected time in every call

    /// Whether the figure compares with every candidate's own calls (a candidate other than the one of `call_s` may
    /// be the fastest, or the calls are too noisy for its nominal time).
    [[nodiscard]] bool per_candidate() const noexcept {
        return phase_calls > 0 || overlap || spread > 0 || noise > 0 || oracle;
    }
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(
        stderr,
        "hitch-bench-rerank-sim: %s\nusage: hitch-bench-rerank-sim [--call-us X] [--calls N] [--busy F] "
        "[--slowdown X] [--model-error X] [--random] [--seeds N] [--cold-runs N --cold-factor X] "
        "[--phase-calls L --phase-factor F --native-ratio R] [--overlap] [--spread X] [--noise S] [--oracle]\n",
        why);
    std::exit(2);
}

settings parse(int argc, char** argv) {
    settings s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> double {
            if (i + 1 >= argc) usage(("option " + a + " needs a value").c_str());
            char* end = nullptr;
            const double v = std::strtod(argv[++i], &end);
            if (end == argv[i] || *end != '\0' || !std::isfinite(v)) usage(("option " + a + ": not a number").c_str());
            return v;
        };
        if (a == "--call-us")
            s.call_s = value() * 1e-6;
        else if (a == "--calls")
            s.calls = static_cast<int>(value());
        else if (a == "--busy")
            s.busy = value();
        else if (a == "--slowdown")
            s.slowdown = value();
        else if (a == "--model-error")
            s.model_error = value();
        else if (a == "--seeds")
            s.seeds = static_cast<int>(value());
        else if (a == "--random")
            s.random = true;
        else if (a == "--cold-runs")
            s.cold_runs = static_cast<int>(value());
        else if (a == "--cold-factor")
            s.cold_factor = value();
        else if (a == "--phase-calls")
            s.phase_calls = value();
        else if (a == "--phase-factor")
            s.phase_factor = value();
        else if (a == "--native-ratio")
            s.native_ratio = value();
        else if (a == "--overlap")
            s.overlap = true;
        else if (a == "--spread")
            s.spread = value();
        else if (a == "--noise")
            s.noise = value();
        else if (a == "--oracle")
            s.oracle = true;
        else
            usage(("unknown option " + a).c_str());
    }
    if (!(s.call_s > 0) || s.calls < 2 || s.busy < 0 || s.busy > 1 || s.slowdown < 1 || s.model_error < 1 ||
        s.seeds < 1 || s.cold_runs < 0 || s.cold_factor < 1 || s.phase_calls < 0 || s.phase_factor < 1 ||
        !(s.native_ratio > 0) || s.spread < 0 || s.spread >= 1 || s.noise < 0)
        usage(
            "--call-us > 0, --calls >= 2, --busy in [0, 1], --slowdown >= 1, --model-error >= 1, --seeds >= 1, "
            "--cold-runs >= 0, --cold-factor >= 1, --phase-calls >= 0, --phase-factor >= 1, --native-ratio > 0, "
            "--spread in [0, 1), --noise >= 0");
    return s;
}

/// One seed: the fastest candidate's median time over the median of the last half of the planned calls.
double run_seed(const settings& s, unsigned seed) {
    using hitch::allreduce::detail::online_ranking;
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    constexpr int n = 7;
    const double relative[n] = {1.0, 1.08, 1.15, 1.3, 1.5, 2.0, 3.0};
    std::vector<int> order(n);
    for (int c = 0; c < n; ++c) order[static_cast<std::size_t>(c)] = c;
    std::shuffle(order.begin(), order.end(), gen);
    const bool phases = s.phase_calls > 0;
    constexpr int native = online_ranking::candidates - 1;
    const int all = phases ? online_ranking::candidates : n;
    online_ranking::times truth{};
    truth.fill(-1.0);  // the eighth candidate (native) is one only with phases
    for (int c = 0; c < n; ++c)
        truth[static_cast<std::size_t>(order[static_cast<std::size_t>(c)])] = s.call_s * relative[c];
    if (phases) truth[native] = s.call_s * s.native_ratio;
    online_ranking::times predicted = truth;
    for (int c = 0; c < all; ++c)
        predicted[static_cast<std::size_t>(c)] *= std::exp((2 * u(gen) - 1) * std::log(s.model_error));
    // Each candidate's slowdown under the load (drawn only with --spread, so the other figures keep their seeds).
    std::array<double, online_ranking::candidates> slowdown_of{};
    for (double& k : slowdown_of) k = s.slowdown;
    if (s.spread > 0)
        for (int c = 0; c < all; ++c)
            slowdown_of[static_cast<std::size_t>(c)] = std::pow(s.slowdown, 1 + s.spread * (2 * u(gen) - 1));
    std::normal_distribution<double> gauss(0.0, 1.0);
    int pick = 0;
    for (int c = 1; c < all; ++c)
        if (predicted[static_cast<std::size_t>(c)] < predicted[static_cast<std::size_t>(pick)]) pick = c;
    // The host's phases: slow (the staged path's schedules F times as long) or not, each of a random length.
    std::exponential_distribution<double> phase_length(phases ? 1.0 / s.phase_calls : 1.0);
    bool slow_phase = phases && u(gen) < 0.5;
    double phase_left = phase_length(gen);
    std::vector<std::vector<double>> each(static_cast<std::size_t>(all));  // every candidate's time in each call

    online_ranking ranking(predicted, pick);
    const hitch::allreduce::detail::rerank_settings rs{};
    constexpr double period_s = 0.02;
    double clock = u(gen) * period_s;
    std::vector<double> times;
    times.reserve(static_cast<std::size_t>(s.calls));
    std::array<int, online_ranking::candidates> runs{};
    for (int i = 0; i < s.calls; ++i) {
        const online_ranking::step step = ranking.plan(rs);
        if (phases && --phase_left <= 0) {
            slow_phase = !slow_phase;
            phase_left = phase_length(gen);
        }
        const auto phase_time = [&](int c) {
            const double base = truth[static_cast<std::size_t>(c)];
            return slow_phase && c != native ? base * s.phase_factor : base;
        };
        const double jitter = 1 + 0.03 * u(gen);
        const bool starts_loaded = s.random ? u(gen) < s.busy : std::fmod(clock, period_s) < s.busy * period_s;
        // A call of `base` seconds as the load slows it (the load's share of it with --overlap, counted in 16 steps).
        const auto under_load = [&](int c, double base) {
            const double k = slowdown_of[static_cast<std::size_t>(c)];
            if (!s.overlap) return starts_loaded ? base * k : base;
            int busy_steps = 0;
            for (int q = 0; q < 16; ++q)
                busy_steps += std::fmod(clock + base * (q + 0.5) / 16, period_s) < s.busy * period_s ? 1 : 0;
            return base * (1 + (k - 1) * busy_steps / 16.0);
        };
        const auto noisy = [&](double t) { return s.noise > 0 ? t * std::exp(s.noise * gauss(gen)) : t; };
        if (s.per_candidate())
            for (int c = 0; c < all; ++c)
                each[static_cast<std::size_t>(c)].push_back(noisy(under_load(c, phase_time(c))));
        int ran = step.pick;
        if (s.oracle) {
            const auto expected = [&](int c) {
                return phase_time(c) * (1 + (slowdown_of[static_cast<std::size_t>(c)] - 1) * s.busy);
            };
            for (int c = 0; c < all; ++c)
                if (expected(c) < expected(ran)) ran = c;
        }
        double t = phase_time(ran) * jitter;
        if (runs[static_cast<std::size_t>(ran)]++ < s.cold_runs) t *= s.cold_factor;
        t = noisy(under_load(ran, t));
        clock += t + 3 * s.call_s;
        times.push_back(t);
        if (step.timed && !s.oracle) ranking.note(step.pick, t);
        if (step.review) {
            hitch::allreduce::detail::review_summary agreed = ranking.summary();
            // A review of 2 ranks over comm::mpi: an all-gather of 64 bytes, 2-5 us on dev-2c.
            agreed.agreement_s = std::min(0.5 * s.call_s, 3e-6);
            ranking.review(agreed, rs, agreed.agreement_s);
        }
    }
    const auto median = [](std::vector<double> v) {
        const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
        std::nth_element(v.begin(), mid, v.end());
        return *mid;
    };
    if (s.per_candidate()) {  // after 32 calls, as hitch-bench-allreduce warms each impl up with 32
        const auto after = [&](const std::vector<double>& v) {
            return std::vector<double>(v.begin() + std::min<std::ptrdiff_t>(32, std::ssize(v) / 2), v.end());
        };
        double fastest = median(after(each[0]));
        for (const auto& e : each) fastest = std::min(fastest, median(after(e)));
        return fastest * 1.015 / median(after(times));
    }
    return s.call_s * 1.015 / median(std::vector<double>(times.end() - s.calls / 2, times.end()));
}

}  // namespace

int main(int argc, char** argv) {
    const settings s = parse(argc, argv);
    std::vector<double> ratios;
    for (int seed = 0; seed < s.seeds; ++seed) ratios.push_back(run_seed(s, static_cast<unsigned>(seed)));
    std::sort(ratios.begin(), ratios.end());
    double sum = 0;
    int below = 0;
    for (double r : ratios) {
        sum += r;
        below += r < 0.9 ? 1 : 0;
    }
    std::printf(
        "{\"bench\":\"rerank_sim\",\"call_us\":%g,\"calls\":%d,\"busy\":%g,\"slowdown\":%g,\"load\":\"%s\","
        "\"model_error\":%g,\"cold_runs\":%d,\"cold_factor\":%g,\"phase_calls\":%g,\"phase_factor\":%g,"
        "\"native_ratio\":%g,\"overlap\":%s,\"spread\":%g,\"noise\":%g,\"oracle\":%s,\"seeds\":%d,\"mean\":%.3f,"
        "\"worst\":%.3f,\"p10\":%.3f,\"below_0_9\":%d}\n",
        s.call_s * 1e6, s.calls, s.busy, s.slowdown, s.random ? "random" : "periodic", s.model_error, s.cold_runs,
        s.cold_factor, s.phase_calls, s.phase_factor, s.native_ratio, s.overlap ? "true" : "false", s.spread, s.noise,
        s.oracle ? "true" : "false", s.seeds, sum / static_cast<double>(ratios.size()), ratios.front(),
        ratios[ratios.size() / 10], below);
}
