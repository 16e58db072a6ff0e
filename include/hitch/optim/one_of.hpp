#pragma once
// optim::one_of<Os...>: one optimizer out of a fixed set, chosen at run time (from a command line or a config
// file), which models hitch::optimizer itself. A program that lets its users pick the rule then instantiates
// data_parallel once instead of once per rule: the training loop, the exchange and the checkpoints are compiled
// one time, the rules' kernels once each.
//
//   using any_rule = hitch::optim::one_of<hitch::optim::momentum, hitch::optim::adam, hitch::optim::lamb>;
//   hitch::data_parallel<any_rule>::options_type o;
//   o.optimizer = any_rule::options_type(hitch::optim::adam::options_type{.weight_decay = 1e-4f});
//
// The rule is fixed at construction; its state is the chosen rule's own state (so adam under one_of saves and
// loads exactly what adam does), and saved state records the chosen rule's name (optimizer_name(o), not "one_of"),
// so a checkpoint written with adam is refused by a run that chose adamw. A step costs one branch on the rule's
// index per layer.

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "hitch/concepts/optimizer.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/layer.hpp"
#include "hitch/core/parallel.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/optim/split_step.hpp"

namespace hitch::optim {

namespace detail {
template <class... Os>
consteval bool distinct_rule_names() {
    constexpr std::array<std::string_view, sizeof...(Os)> names{Os::name...};
    for (std::size_t i = 0; i < names.size(); ++i)
        for (std::size_t j = i + 1; j < names.size(); ++j)
            if (names[i] == names[j]) return false;
    return true;
}
}  // namespace detail

template <class... Os>
class one_of {
    static_assert(sizeof...(Os) >= 1, "hitch::optim::one_of: name at least one optimizer");
    static_assert((check_optimizer<Os>() && ...));
    static_assert(detail::distinct_rule_names<Os...>(),
                  "hitch::optim::one_of: two of the optimizers have the same name; saved state could not tell them "
                  "apart");

public:
    static constexpr std::string_view name = "one_of";
    /// The rules, in the order of their indices.
    static constexpr std::array<std::string_view, sizeof...(Os)> names{Os::name...};

    /// The chosen rule's options: holding adam's options chooses adam.
    struct options_type {
        std::variant<typename Os::options_type...> rule{};

        options_type() = default;
        template <class Options>
            requires(std::is_same_v<std::remove_cvref_t<Options>, typename Os::options_type> || ...)
        options_type(Options&& o)  // NOLINT(google-explicit-constructor): a rule's options choose the rule
            : rule(std::forward<Options>(o)) {}
        /// Two rules with the same options type (e.g. adam and amsgrad-only variants): pick by index.
        template <std::size_t I, class Options>
        options_type(std::in_place_index_t<I> i, Options&& o) : rule(i, std::forward<Options>(o)) {}

        void validate() const {
            std::visit([](const auto& o) { o.validate(); }, rule);
        }
    };

    /// One layer's state: the chosen rule's own state, and the step count the concept asks for (kept equal to
    /// the rule's: loaded state sets it, step() carries it into the rule and back).
    template <class D>
    struct state_type {
        std::variant<typename Os::template state_type<D>...> rule;
        std::uint64_t steps = 0;

        [[nodiscard]] std::vector<tensor_view<float>> buffers() const {
            return std::visit(
                [](const auto& s) {
                    std::vector<tensor_view<float>> out;
                    for (const auto& b : s.buffers()) out.push_back(b);
                    return out;
                },
                rule);
        }
    };

    one_of() : one_of(options_type{}) {}
    explicit one_of(const options_type& options) : options_(options), rule_(make_rule(options.rule)) {}

    [[nodiscard]] const options_type& options() const noexcept { return options_; }
    /// The index of the chosen rule in Os..., and its name (what saved state records).
    [[nodiscard]] std::size_t index() const noexcept { return rule_.index(); }
    [[nodiscard]] std::string_view rule_name() const noexcept { return names[rule_.index()]; }

    /// The chosen rule, for code that needs its type: `o.visit([](const auto& rule) { ... })`.
    template <class F>
    decltype(auto) visit(F&& f) const {
        return std::visit(std::forward<F>(f), rule_);
    }

    template <class D>
    [[nodiscard]] state_type<D> make_state(D& dev, std::size_t n) const {
        return visit_indexed([&]<std::size_t I>(const auto& rule) {
            return state_type<D>{decltype(state_type<D>::rule)(std::in_place_index<I>, rule.make_state(dev, n)), 0};
        });
    }

    template <class D>
    void step(const layer& l, state_type<D>& s, float lr, const parallel_options& exec = {}) const {
        check_holds(l, s);
        visit_indexed([&]<std::size_t I>(const auto& rule) {
            auto& own = std::get<I>(s.rule);
            own.steps = s.steps;
            rule.step(l, own, lr, exec);
            s.steps = own.steps;
        });
    }

    /// A step of the chosen rule on a piece of a layer (optim/split_step.hpp): one_of is elementwise when all its
    /// rules are; otherwise it steps in two phases, and a chosen elementwise rule reports zero sums in phase 1
    /// and takes its whole step in phase 2.
    static constexpr bool elementwise = (elementwise_rule<Os> && ...);

    template <class D>
        requires(!elementwise && ((elementwise_rule<Os> || layerwise_rule<Os, D>) && ...))
    [[nodiscard]] layer_sums norm_sums(const layer& piece, state_type<D>& s, const parallel_options& exec = {}) const {
        check_holds(piece, s);
        return visit_indexed([&]<std::size_t I>(const auto& rule) -> layer_sums {
            using rule_type = std::remove_cvref_t<decltype(rule)>;
            if constexpr (elementwise_rule<rule_type>) {
                return {0.0, 0.0};
            } else {
                auto& own = std::get<I>(s.rule);
                own.steps = s.steps;
                return rule.norm_sums(piece, own, exec);
            }
        });
    }
    template <class D>
        requires(!elementwise && ((elementwise_rule<Os> || layerwise_rule<Os, D>) && ...))
    void apply_with_sums(const layer& piece, state_type<D>& s, float lr, layer_sums sums,
                         const parallel_options& exec = {}) const {
        check_holds(piece, s);
        visit_indexed([&]<std::size_t I>(const auto& rule) {
            auto& own = std::get<I>(s.rule);
            own.steps = s.steps;
            if constexpr (elementwise_rule<std::remove_cvref_t<decltype(rule)>>)
                rule.step(piece, own, lr, exec);
            else
                rule.apply_with_sums(piece, own, lr, sums, exec);
            s.steps = own.steps;
        });
    }

private:
    using rule_variant = std::variant<Os...>;

    template <class D>
    void check_holds(const layer& l, const state_type<D>& s) const {
        if (s.rule.index() != rule_.index())
            throw config_error(hitch::detail::concat("hitch::optim::one_of: layer '", l.name, "' holds ",
                                                     names[s.rule.index()], " state, but this optimizer is ",
                                                     rule_name()));
    }

    template <std::size_t I = 0>
    static rule_variant make_rule(const std::variant<typename Os::options_type...>& o) {
        if constexpr (I + 1 < sizeof...(Os)) {
            if (o.index() != I) return make_rule<I + 1>(o);
        }
        return rule_variant(std::in_place_index<I>, std::variant_alternative_t<I, rule_variant>(std::get<I>(o)));
    }

    /// f.template operator()<I>(rule) for the chosen rule's index I.
    template <class F, std::size_t I = 0>
    decltype(auto) visit_indexed(F&& f) const {
        if constexpr (I + 1 < sizeof...(Os)) {
            if (rule_.index() != I) return visit_indexed<F, I + 1>(std::forward<F>(f));
        }
        return f.template operator()<I>(std::get<I>(rule_));
    }

    options_type options_;
    rule_variant rule_;
};

}  // namespace hitch::optim
