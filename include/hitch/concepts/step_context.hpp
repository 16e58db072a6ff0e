#pragma once
// What a sync policy may ask of the training step it drives. data_parallel's engine models the contexts; a policy
// constrains its step with the least one it needs, and data_parallel models a refinement only where it can (the
// shared-memory context only over a communicator whose ranks share an address space).
//
// step_context<Ctx> (every policy):
//   ctx.finish_gradient_exchange() -> bool   waits for every bucket; unscales and agrees on finiteness across ranks;
//                                            false when the step must be skipped (every rank gets the same answer)
//   ctx.check_local_gradients() -> bool      the same agreement without exchanging gradients
//   ctx.apply_optimizer()                    steps every layer with the current learning rate
//   ctx.average_parameters(bool with_state)  all-reduce-average the parameters (and optimizer state) over ranks
//   ctx.step_index(), ctx.rank(), ctx.size()
//
// parameter_context<Ctx> (a policy that reads or rewrites the parameters: elastic averaging, block momentum):
//   ctx.parameters() -> std::span<const hitch::layer>   this rank's FP32 (master) parameters and gradients
//   ctx.average(std::span<float>)            collective: the mean of the buffer over the ranks, in place
//   ctx.parameters_changed()                 the policy wrote the parameters: copy them to the model (FP16 models)
//   ctx.prepare_local_gradients() -> bool    unscale and check this rank's gradients without asking the other
//                                            ranks (asynchronous policies); false: skip this rank's step
//   ctx.learning_rate() -> double            this step's learning rate
//
// shared_memory_context<Ctx> (Hogwild: ranks are threads of one process):
//   ctx.shared_parameters() -> std::span<const hitch::layer>   one set of FP32 parameters every rank reads and
//                                            writes without locks (allocated once, valid while data_parallel lives)
//   ctx.shared_updates() -> std::atomic<std::uint64_t>&        a counter of updates applied to them, for staleness
//
// server_context<Ctx> (a policy served by a parameter server, hitch/sync/server/):
//   ctx.exchange_with_server(sync::server_request) -> sync::server_reply
//                                            pushes this rank's gradients (or, for elastic averaging, its
//                                            parameters) to every shard's server and/or pulls the parameters back,
//                                            as the request says; the reply carries the staleness the servers saw

#include <atomic>
#include <concepts>
#include <cstdint>
#include <span>

#include "hitch/core/layer.hpp"

namespace hitch {

namespace sync {

/// What a policy's step did.
struct step_result {
    /// The optimizer was applied (false: the step was skipped, e.g. a gradient overflowed).
    bool applied = false;
    /// Parameters were averaged across ranks in this step (every replica now holds the same parameters).
    bool synchronized = false;
    /// Staleness of the gradients applied in this step, in steps (parameter versions, for a parameter server).
    std::uint64_t staleness = 0;
    /// Gradients of this rank that were not applied because the step had its quorum without them (backup workers).
    std::uint64_t dropped = 0;
};

/// One exchange of a worker with the parameter server (every shard).
struct server_request {
    /// Send the gradients accumulated since the last push (with the parameter version they were computed on).
    bool push_gradients = false;
    /// Send this rank's parameters (elastic averaging: the server moves its centre towards them and replies with
    /// the centre as it was, and this rank moves towards that).
    bool push_parameters = false;
    /// Replace this rank's parameters by the server's, once the server's rule allows (the rank's own pushed
    /// gradients applied; a stale-synchronous bound met).
    bool pull_parameters = false;
};

/// What the servers answered.
struct server_reply {
    /// The parameters were replaced by the server's (pull_parameters, or push_parameters).
    bool pulled = false;
    /// The largest staleness (server version at application minus the version a gradient was computed on) of
    /// this rank's gradients that the servers applied since the last reply.
    std::uint64_t staleness = 0;
    /// Gradients of this rank that the servers dropped (backup workers: they came after the step had its quorum).
    std::uint64_t dropped = 0;
};

}  // namespace sync

/// What every sync policy may ask of the training step it drives.
template <class Ctx>
concept step_context = requires(Ctx& ctx, const Ctx& cctx, bool with_state) {
    { ctx.finish_gradient_exchange() } -> std::convertible_to<bool>;
    { ctx.check_local_gradients() } -> std::convertible_to<bool>;
    ctx.apply_optimizer();
    ctx.average_parameters(with_state);
    { cctx.step_index() } -> std::convertible_to<std::uint64_t>;
    { cctx.rank() } -> std::convertible_to<int>;
    { cctx.size() } -> std::convertible_to<int>;
};

/// A context that lets the policy read and rewrite the parameters (see the file comment).
template <class Ctx>
concept parameter_context = step_context<Ctx> && requires(Ctx& ctx, const Ctx& cctx, std::span<float> buffer) {
    { ctx.parameters() } -> std::convertible_to<std::span<const layer>>;
    ctx.average(buffer);
    ctx.parameters_changed();
    { ctx.prepare_local_gradients() } -> std::convertible_to<bool>;
    { cctx.learning_rate() } -> std::convertible_to<double>;
};

/// A context whose ranks share one parameter array (see the file comment).
template <class Ctx>
concept shared_memory_context = parameter_context<Ctx> && requires(Ctx& ctx) {
    { ctx.shared_parameters() } -> std::convertible_to<std::span<const layer>>;
    { ctx.shared_updates() } -> std::same_as<std::atomic<std::uint64_t>&>;
};

/// A context with a parameter server (see the file comment).
template <class Ctx>
concept server_context = parameter_context<Ctx> && requires(Ctx& ctx, const sync::server_request& request) {
    { ctx.exchange_with_server(request) } -> std::same_as<sync::server_reply>;
};

/// The least step context: exactly the members of step_context, doing nothing.
struct step_context_archetype {
    bool finish_gradient_exchange() { return true; }
    bool check_local_gradients() { return true; }
    void apply_optimizer() {}
    void average_parameters(bool /*with_optimizer_state*/) {}
    [[nodiscard]] std::uint64_t step_index() const { return 0; }
    [[nodiscard]] int rank() const { return 0; }
    [[nodiscard]] int size() const { return 1; }
};
static_assert(step_context<step_context_archetype>);

/// Exactly the members of parameter_context.
struct parameter_context_archetype : step_context_archetype {
    [[nodiscard]] std::span<const layer> parameters() const { return {}; }
    void average(std::span<float> /*buffer*/) {}
    void parameters_changed() {}
    bool prepare_local_gradients() { return true; }
    [[nodiscard]] double learning_rate() const { return 0.0; }
};
static_assert(parameter_context<parameter_context_archetype>);

/// Exactly the members of shared_memory_context.
struct shared_memory_context_archetype : parameter_context_archetype {
    [[nodiscard]] std::span<const layer> shared_parameters() const { return {}; }
    std::atomic<std::uint64_t>& shared_updates() { return updates; }
    std::atomic<std::uint64_t> updates{0};
};
static_assert(shared_memory_context<shared_memory_context_archetype>);

/// Exactly the members of server_context.
struct server_context_archetype : parameter_context_archetype {
    sync::server_reply exchange_with_server(const sync::server_request& /*request*/) { return {}; }
};
static_assert(server_context<server_context_archetype>);

}  // namespace hitch
