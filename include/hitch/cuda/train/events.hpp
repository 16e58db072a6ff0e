#pragma once
// The CUDA events of data_parallel on a GPU (host code against the CUDA runtime; no kernels):
//   layer_events     the backend of train::detail::ready_events: an event per layer (and one shared by the layers a
//                    micro-batch did not report) recorded on the model's stream, waited for by the exchange stream
//   stream_order     "what is queued on stream b from now on follows what is queued on stream a so far", by an event
//   device_spans     spans of GPU time for the timeline: a pair of timing events around work queued on a stream,
//                    placed on the host's clock by an anchor event recorded once at a known host time, read once
//                    their end has passed (never waiting for the GPU unless asked)

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/cuda/device.hpp"
#include "hitch/train/timeline.hpp"

namespace hitch::cuda::train {

using hitch::cuda::detail::check;

/// An event that is created once and destroyed with its owner. Move-only.
class owned_event {
public:
    owned_event() = default;
    explicit owned_event(bool timing) {
        check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
    }
    owned_event(const owned_event&) = delete;
    owned_event& operator=(const owned_event&) = delete;
    owned_event(owned_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    owned_event& operator=(owned_event&& o) noexcept {
        if (this != &o) {
            release();
            e_ = std::exchange(o.e_, nullptr);
        }
        return *this;
    }
    ~owned_event() { release(); }
    [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }

private:
    void release() noexcept {
        if (e_ != nullptr) cudaEventDestroy(e_);
        e_ = nullptr;
    }
    cudaEvent_t e_ = nullptr;
};

/// Makes `waiter` wait (on the GPU) for everything queued on `done` so far, through `via`.
inline void stream_order(int ordinal, cudaStream_t waiter, cudaStream_t done, cudaEvent_t via) {
    if (waiter == done) return;
    check(cudaSetDevice(ordinal), "cudaSetDevice");
    check(cudaEventRecord(via, done), "cudaEventRecord");
    check(cudaStreamWaitEvent(waiter, via, 0), "cudaStreamWaitEvent");
}

/// train::detail::ready_events' backend: slot k < layers is layer k's event, slot `layers` the shared one.
class layer_events {
public:
    layer_events(int ordinal, std::size_t layers, cudaStream_t compute, cudaStream_t exchange)
        : ordinal_(ordinal), compute_(compute), exchange_(exchange) {
        check(cudaSetDevice(ordinal), "cudaSetDevice");
        events_.reserve(layers + 1);
        for (std::size_t k = 0; k <= layers; ++k) events_.emplace_back(false);
    }
    void record(std::size_t slot) {
        check(cudaSetDevice(ordinal_), "cudaSetDevice");
        check(cudaEventRecord(events_[slot].get(), compute_), "cudaEventRecord (gradient_ready)");
    }
    void wait(std::size_t slot) {
        check(cudaSetDevice(ordinal_), "cudaSetDevice");
        check(cudaStreamWaitEvent(exchange_, events_[slot].get(), 0), "cudaStreamWaitEvent (gradient_ready)");
    }

private:
    int ordinal_;
    cudaStream_t compute_, exchange_;
    std::vector<owned_event> events_;
};

/// Spans of GPU time on a timeline lane (see the file comment). Without a timeline it records nothing. Thread-safe.
class device_spans {
public:
    device_spans(hitch::train::timeline* trace, int ordinal, cudaStream_t anchor_stream, std::string lane)
        : trace_(trace), ordinal_(ordinal), lane_(std::move(lane)) {
        if (trace_ == nullptr || !trace_->enabled()) {
            trace_ = nullptr;
            return;
        }
        check(cudaSetDevice(ordinal_), "cudaSetDevice");
        anchor_ = owned_event(true);
        check(cudaEventRecord(anchor_.get(), anchor_stream), "cudaEventRecord");
        check(cudaEventSynchronize(anchor_.get()), "cudaEventSynchronize");
        anchor_host_ = hitch::train::timeline::clock::now();
    }
    device_spans(const device_spans&) = delete;
    device_spans& operator=(const device_spans&) = delete;
    ~device_spans() {
        try {
            flush(true);
        } catch (...) {  // a failed GPU: the spans are lost, nothing else is
        }
    }

    [[nodiscard]] bool enabled() const noexcept { return trace_ != nullptr; }

    /// Runs f(), which queues work on `stream`, between two timing events: a span named `name` once it has run.
    template <class F>
    void span(cudaStream_t stream, std::string name, F&& f) {
        if (trace_ == nullptr) {
            f();
            return;
        }
        pending p;
        {
            std::lock_guard lock(m_);
            p = pending{take(), take(), std::move(name)};
        }
        check(cudaSetDevice(ordinal_), "cudaSetDevice");
        check(cudaEventRecord(p.begin.get(), stream), "cudaEventRecord");
        f();
        check(cudaEventRecord(p.end.get(), stream), "cudaEventRecord");
        std::lock_guard lock(m_);
        pending_.push_back(std::move(p));
    }

    /// Puts every span whose end has passed on the timeline (every span, waiting for the GPU, with `wait`).
    void flush(bool wait = false) {
        if (trace_ == nullptr) return;
        check(cudaSetDevice(ordinal_), "cudaSetDevice");
        std::lock_guard lock(m_);
        while (!pending_.empty()) {
            pending& p = pending_.front();
            if (wait) {
                check(cudaEventSynchronize(p.end.get()), "cudaEventSynchronize");
            } else {
                const cudaError_t e = cudaEventQuery(p.end.get());
                if (e == cudaErrorNotReady) break;
                check(e, "cudaEventQuery");
            }
            trace_->record_on_lane(lane_, std::move(p.name), "gpu", at(p.begin.get()), at(p.end.get()));
            free_.push_back(std::move(p.begin));
            free_.push_back(std::move(p.end));
            pending_.pop_front();
        }
    }

private:
    struct pending {
        owned_event begin, end;
        std::string name;
    };
    owned_event take() {
        if (free_.empty()) return owned_event(true);
        owned_event e = std::move(free_.back());
        free_.pop_back();
        return e;
    }
    hitch::train::timeline::clock::time_point at(cudaEvent_t e) const {
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, anchor_.get(), e), "cudaEventElapsedTime");
        return anchor_host_ + std::chrono::duration_cast<hitch::train::timeline::clock::duration>(
                                  std::chrono::duration<double, std::milli>(static_cast<double>(ms)));
    }

    hitch::train::timeline* trace_;
    int ordinal_;
    std::string lane_;
    owned_event anchor_;
    hitch::train::timeline::clock::time_point anchor_host_{};
    std::mutex m_;  // the exchange worker and the training thread both record spans
    std::deque<pending> pending_;
    std::vector<owned_event> free_;
};

}  // namespace hitch::cuda::train
