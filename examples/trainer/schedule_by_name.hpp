#pragma once
// An all-reduce schedule chosen by name at run time. It models hitch::allreduce_schedule by forwarding to the
// schedule it holds, so the trainers instantiate data_parallel once per (optimizer, compressor, sync policy) and
// still let --allreduce pick any of hitch's schedules. A schedule of your own plugs in the same way. `native` (MPI's
// own MPI_Allreduce) exists only on comm::mpi; on other communicators it is refused when the run starts. It also
// records which schedules actually ran (for `automatic`: the one it picked each time), for the run's summary line.

#include <algorithm>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/allreduce/native.hpp"
#include "hitch/exchange/pairing.hpp"

namespace hitch_examples {

class schedule_by_name {
public:
    struct options_type {
        std::string schedule = "automatic";
        void validate() const {
            const auto names = schedule_by_name::names();
            if (std::find(names.begin(), names.end(), schedule) == names.end()) {
                std::string list;
                for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
                hitch::option_validator("--allreduce").fail("schedule", schedule, "one of: " + list);
            }
        }
    };
    static constexpr std::string_view name = "by_name";

    /// Why `native` cannot run on threads (the trainers refuse the combination before they start).
    static constexpr std::string_view native_needs_mpi =
        "--allreduce native is MPI's own all-reduce: it needs MPI ranks, not --threads";

    schedule_by_name() = default;
    explicit schedule_by_name(const options_type& o) : options_(o) {
        o.validate();
        namespace ar = hitch::allreduce;
        const std::string& s = o.schedule;
        if (s == "ring")
            held_ = ar::ring{};
        else if (s == "recursive_doubling")
            held_ = ar::recursive_doubling{};
        else if (s == "rabenseifner")
            held_ = ar::rabenseifner{};
        else if (s == "binary_tree")
            held_ = ar::binary_tree{};
        else if (s == "double_binary_tree")
            held_ = ar::double_binary_tree{};
        else if (s == "hierarchical")
            held_ = ar::hierarchical<>{};
        else if (s == "parameter_server")
            held_ = ar::parameter_server{};
        else if (s == "native")
            held_ = ar::native{};
        else
            held_ = ar::automatic{};
    }

    [[nodiscard]] const options_type& options() const noexcept { return options_; }

    /// Every name --allreduce accepts.
    [[nodiscard]] static std::vector<std::string> names() {
        return {"automatic",          "ring",         "recursive_doubling", "rabenseifner", "binary_tree",
                "double_binary_tree", "hierarchical", "parameter_server",   "native"};
    }
    /// The schedules that ran on more than one rank, in the order of their first run (copies share the record).
    [[nodiscard]] std::vector<std::string> used() const {
        std::lock_guard lock(used_->m);
        return {used_->names.begin(), used_->names.end()};
    }
    [[nodiscard]] std::string_view chosen() const {
        return std::visit([](const auto& s) { return std::string_view(std::decay_t<decltype(s)>::name); }, held_);
    }

    /// The shape the held schedule gives the compressed exchanges (hitch/exchange/pairing.hpp).
    [[nodiscard]] hitch::compress::exchange_shape exchange_shape() const {
        return std::visit([](const auto& s) { return hitch::compress::exchange_shape_of<std::decay_t<decltype(s)>>; },
                          held_);
    }
    /// The same for a schedule's name, before one is made.
    [[nodiscard]] static hitch::compress::exchange_shape exchange_shape(const std::string& name) {
        return schedule_by_name(options_type{name}).exchange_shape();
    }

    [[nodiscard]] hitch::allreduce::cost_estimate cost(int p, std::size_t n_bytes,
                                                       const hitch::allreduce::cost_constants& k) const {
        return std::visit([&](const auto& s) { return s.cost(p, n_bytes, k); }, held_);
    }
    template <class C, class T>
    void run(hitch::allreduce::transport<C>& t, std::span<T> data, hitch::allreduce::reduce_op op) const {
        std::visit(
            [&](const auto& s) {
                if constexpr (requires { s.run(t, data, op); }) {
                    s.run(t, data, op);
                    if (const auto used = ran(s, t, data.size_bytes()); t.size() > 1 && !used.empty()) record(used);
                } else {
                    throw std::invalid_argument(std::string(native_needs_mpi));
                }
            },
            held_);
    }

private:
    /// The schedule that carried the call: `automatic`'s pick for this size (after the call, so it is the one
    /// the call took: the same inputs give the same pick), or the schedule itself.
    template <class S, class C>
    static std::string_view ran(const S& s, hitch::allreduce::transport<C>& t, std::size_t n_bytes) {
        if constexpr (std::is_same_v<S, hitch::allreduce::automatic>) {
            return s.chosen(t, n_bytes);
        } else {
            return S::name;
        }
    }
    void record(std::string_view schedule) const {
        std::lock_guard lock(used_->m);
        if (std::find(used_->names.begin(), used_->names.end(), schedule) == used_->names.end())
            used_->names.push_back(schedule);
    }

    struct used_record {
        std::mutex m;
        std::vector<std::string_view> names;  // schedule names are static strings
    };
    std::shared_ptr<used_record> used_ = std::make_shared<used_record>();
    options_type options_{};
    std::variant<hitch::allreduce::automatic, hitch::allreduce::ring, hitch::allreduce::recursive_doubling,
                 hitch::allreduce::rabenseifner, hitch::allreduce::binary_tree, hitch::allreduce::double_binary_tree,
                 hitch::allreduce::hierarchical<>, hitch::allreduce::parameter_server, hitch::allreduce::native>
        held_;
};

}  // namespace hitch_examples
