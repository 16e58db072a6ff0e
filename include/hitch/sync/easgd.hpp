#pragma once
// sync::easgd: elastic averaging SGD (Zhang, Choromanska, LeCun, NIPS 2015, "Deep learning with elastic averaging
// SGD"). Each worker trains its own parameters x_i and, every tau steps, is pulled towards a centre variable
// x~ while the centre is pulled towards it, with elasticity alpha:
//   x_i <- x_i - alpha (x_i - x~),   x~ <- x~ + alpha (x_i - x~)       (both with the x_i, x~ from before)
// Asynchronous form: each worker does this with the parameter server holding x~ (Algorithm 1), whenever it reaches
// its own period. Synchronous form: every rank at once, x~ replicated on every rank, the centre's move summed over
// the p workers: x~ <- x~ + p alpha (mean_i x_i - x~) (equation 5-6 with beta = p alpha). The paper's choice is
// beta = p alpha = 0.9; alpha = 0 here means exactly that. The elastic exchange follows the step's gradient
// update (data_parallel hands the policy a gradient already computed), so the paper's step t is this step t + 1.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "hitch/core/binary.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"
#include "hitch/sync/server/options.hpp"

namespace hitch::sync {

class easgd {
public:
    enum class form : std::uint8_t { synchronous, asynchronous };

    struct options_type {
        server_options server{};
        /// tau: local steps between elastic exchanges.
        std::uint64_t period = 4;
        /// Elasticity; 0: 0.9 / the number of workers (beta = 0.9, the paper's choice).
        double alpha = 0.0;
        form kind = form::asynchronous;

        void validate() const {
            server.validate();
            option_validator("hitch::sync::easgd")
                .closed("period", period, std::uint64_t{1}, std::uint64_t{1} << 32)
                .half_open("alpha", alpha, 0.0, 1.0);
        }
    };
    static constexpr std::string_view name = "easgd";
    static constexpr bool exchanges_gradients = false;
    static constexpr bool asynchronous = true;

    easgd() = default;
    explicit easgd(const options_type& options) : options_(options) { options_.validate(); }
    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    [[nodiscard]] const server_options& server() const noexcept { return options_.server; }
    [[nodiscard]] bool needs_server() const noexcept { return options_.kind == form::asynchronous; }
    [[nodiscard]] double alpha(int workers) const { return options_.alpha > 0.0 ? options_.alpha : 0.9 / workers; }
    [[nodiscard]] sync::server_rule server_rule(int workers) const {
        sync::server_rule r;
        r.elastic = true;
        r.alpha = alpha(workers);
        return r;
    }

    template <server_context Ctx>
    step_result step(Ctx& ctx) {
        if (options_.kind == form::synchronous && centre_.empty()) {
            gather(ctx, centre_);  // the centre starts at the mean of the parameters the workers start from
            ctx.average(std::span<float>(centre_));
        }
        if (!ctx.prepare_local_gradients()) return {false, false, since_, 0};
        ctx.apply_optimizer();
        if (++since_ < options_.period) return {true, false, since_, 0};
        since_ = 0;
        if (options_.kind == form::asynchronous)
            ctx.exchange_with_server({false, true, false});
        else
            synchronous_exchange(ctx);
        ctx.parameters_changed();
        return {true, false, 0, 0};
    }
    [[nodiscard]] std::uint64_t staleness() const noexcept { return since_; }
    /// The synchronous form's centre variable (empty before the first exchange, and in the asynchronous form,
    /// where the parameter server holds it).
    [[nodiscard]] std::span<const float> centre() const noexcept { return centre_; }

    void save_state(std::vector<std::byte>& blob) const {
        frame_writer f(blob, "HSYNEASG", 1);
        f.payload().put(since_).put(static_cast<std::uint64_t>(centre_.size())).values(std::span<const float>(centre_));
        f.finish();
    }
    void load_state(std::span<const std::byte> blob) {
        const auto frame = open_frame(blob, {"HSYNEASG", 1, 1, "hitch::sync::easgd: saved state", "easgd state"});
        byte_reader r(frame.payload, "hitch::sync::easgd: saved state", "corrupt");
        const auto since = r.get<std::uint64_t>("the step counter");
        const auto n = r.get<std::uint64_t>("the centre size");
        std::vector<float> centre;
        r.values(centre, n, "the centre");
        r.expect_end();
        if (since >= options_.period)
            throw mismatch_error(hitch::detail::concat("hitch::sync::easgd: the saved state is ", since,
                                                       " steps into a period of ", options_.period));
        since_ = since;
        centre_ = std::move(centre);
    }

private:
    /// Every rank: x~ <- x~ + p alpha (mean x - x~), x_i <- x_i - alpha (x_i - x~), with the centre from before.
    template <class Ctx>
    void synchronous_exchange(Ctx& ctx) {
        const auto layers = ctx.parameters();
        gather(ctx, mean_);
        ctx.average(std::span<float>(mean_));
        if (centre_.size() != mean_.size())
            throw mismatch_error(hitch::detail::concat("hitch::sync::easgd: the centre has ", centre_.size(),
                                                       " elements; the model has ", mean_.size()));
        const int p = ctx.size();
        std::size_t at = 0;
        const auto a = static_cast<float>(alpha(p));
        const float beta = a * static_cast<float>(p);
        for (const auto& l : layers) {
            for (std::size_t i = 0; i < l.size(); ++i) {
                const float c = centre_[at + i];
                l.params[i] -= a * (l.params[i] - c);
                centre_[at + i] = c + beta * (mean_[at + i] - c);
            }
            at += l.size();
        }
    }

    template <class Ctx>
    static void gather(Ctx& ctx, std::vector<float>& out) {
        out.clear();
        for (const auto& l : ctx.parameters()) out.insert(out.end(), l.params.begin(), l.params.end());
    }

    options_type options_{};
    std::uint64_t since_ = 0;
    std::vector<float> centre_, mean_;
};

static_assert(check_sync_policy<easgd>() && server_policy<easgd>, "hitch::sync::easgd must model hitch::sync_policy");

}  // namespace hitch::sync
