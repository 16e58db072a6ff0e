#pragma once
// The bookkeeping of data_parallel's gradient events on a device with streams (a GPU): gradient_ready(k) records an
// event on the stream the model's backward runs on, and the exchange, before it reads a bucket's gradients, makes
// its own stream wait for the events of that bucket's layers, so the host never waits for backward and backward
// goes on while buckets are packed and exchanged. A layer not reported in a micro-batch (no gradient_ready calls, or
// one it skipped) is covered by one event recorded when step() settles the micro-batch: by then the whole backward
// has been queued.
//
// The events themselves come from a backend, so this logic runs (and is tested) without a GPU:
//   b.record(slot)   records event `slot` on the compute stream (slots 0 .. layers - 1: the layers; slot `layers`:
//                    the micro-batch's shared event)
//   b.wait(slot)     makes the exchange stream wait for event `slot` as last recorded
// hitch/cuda/train/events.hpp is the CUDA backend.
//
// Threads: reported() and settle() run on the training thread, wait_for() on the exchange worker; a bucket is handed
// to the worker only after each of its layers was reported or settled (the bucket pipeline's queue orders the
// two), and reset() runs once the worker is idle.

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hitch::train::detail {

template <class Backend>
class ready_events {
public:
    ready_events(Backend backend, std::size_t layers)
        : backend_(std::move(backend)), layers_(layers), state_(layers, pending) {}

    /// gradient_ready(k): layer k's gradient is queued on the compute stream; records its event.
    void reported(std::size_t k) {
        backend_.record(k);
        state_[k] = own_event;
    }

    /// step(): every layer not reported in this micro-batch shares one event, recorded now (once).
    void settle() {
        bool any = false;
        for (unsigned char& s : state_)
            if (s == pending) {
                s = shared_event;
                any = true;
            }
        if (any && !shared_recorded_) {
            backend_.record(layers_);
            shared_recorded_ = true;
        }
    }

    /// Before the exchange stream reads the gradients of `layers`: it waits for each one's event (the shared event
    /// once). A layer neither reported nor settled is a logic error of the caller.
    void wait_for(std::span<const std::size_t> layers) {
        bool shared = false;
        for (const std::size_t k : layers) {
            if (state_[k] == own_event) {
                backend_.wait(k);
            } else if (state_[k] == shared_event) {
                shared = true;
            } else {
                throw std::logic_error("hitch::train::ready_events: layer " + std::to_string(k) +
                                       " is read before it was reported or settled");
            }
        }
        if (shared) backend_.wait(layers_);
    }

    /// Every layer: the accumulation of a micro-batch that is not its window's last reads them all.
    void wait_for_all() {
        std::vector<std::size_t> all(layers_);
        for (std::size_t k = 0; k < layers_; ++k) all[k] = k;
        wait_for(all);
    }

    /// The micro-batch is over: the next one's reports start afresh.
    void reset() {
        std::fill(state_.begin(), state_.end(), pending);
        shared_recorded_ = false;
    }

    [[nodiscard]] bool reported_or_settled(std::size_t k) const { return state_.at(k) != pending; }
    [[nodiscard]] Backend& backend() noexcept { return backend_; }

private:
    static constexpr unsigned char pending = 0, own_event = 1, shared_event = 2;

    Backend backend_;
    std::size_t layers_;
    std::vector<unsigned char> state_;
    bool shared_recorded_ = false;
};

}  // namespace hitch::train::detail
