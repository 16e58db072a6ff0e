#pragma once
// Per-step metrics as JSON lines, one object per step and rank:
//   {"step":12,"epoch":0,"rank":1,"loss":0.41,"accuracy":null,"lr":0.1,"loss_scale":65536,"skipped":false,
//    "bytes_sent":1048576,"comm_ms":3.2,"wait_ms":0.4,"compute_ms":11.9,"elapsed_s":4.5,"grad_norm":null,
//    "micro_batches":1,"accumulated":false}
// data_parallel fills what it knows (step, rank, lr, loss scale, skipped, bytes, times); the training loop adds
// loss, accuracy and epoch. The library writes only to streams the caller hands it.

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

namespace hitch::train {

struct step_metrics {
    std::uint64_t step = 0;
    std::uint64_t epoch = 0;
    int rank = 0;
    std::optional<double> loss;
    std::optional<double> accuracy;
    double lr = 0.0;
    double loss_scale = 1.0;
    bool skipped = false;
    std::uint64_t bytes_sent = 0;
    double comm_ms = 0.0;
    /// Of the step's collectives, the time this rank waited for the other ranks to enter them (group::waited());
    /// absent when the collectives' agreement check is off (then it is not measured).
    std::optional<double> wait_ms;
    double compute_ms = 0.0;
    /// Seconds since the first step began (for curves against time).
    double elapsed_s = 0.0;
    /// The global gradient norm before clipping (with clip_grad_norm set and the step applied).
    std::optional<double> grad_norm;
    /// Micro-batches this step's gradients came from (accumulation_steps; 1 without accumulation).
    std::uint64_t micro_batches = 1;
    /// This call only added a micro-batch's gradients up: no exchange, no optimizer step (the record is returned
    /// but not written to the metrics stream).
    bool accumulated = false;

    /// The record as one line of JSON (no trailing newline). Non-finite numbers are written as null.
    [[nodiscard]] std::string to_json() const {
        std::ostringstream s;
        s << std::setprecision(std::numeric_limits<double>::max_digits10);
        const auto number = [&](const char* key, std::optional<double> v) {
            s << '"' << key << "\":";
            if (v && std::isfinite(*v))
                s << *v;
            else
                s << "null";
        };
        s << "{\"step\":" << step << ",\"epoch\":" << epoch << ",\"rank\":" << rank << ',';
        number("loss", loss);
        s << ',';
        number("accuracy", accuracy);
        s << ',';
        number("lr", lr);
        s << ',';
        number("loss_scale", loss_scale);
        s << ",\"skipped\":" << (skipped ? "true" : "false") << ",\"bytes_sent\":" << bytes_sent << ',';
        number("comm_ms", comm_ms);
        s << ',';
        number("wait_ms", wait_ms);
        s << ',';
        number("compute_ms", compute_ms);
        s << ',';
        number("elapsed_s", elapsed_s);
        s << ',';
        number("grad_norm", grad_norm);
        s << ",\"micro_batches\":" << micro_batches << ",\"accumulated\":" << (accumulated ? "true" : "false") << '}';
        return s.str();
    }
};

/// Appends records to a stream, one JSON object per line, flushed per record so a crash loses nothing written.
class metrics_writer {
public:
    explicit metrics_writer(std::ostream& out) : out_(&out) {}
    void write(const step_metrics& m) { *out_ << m.to_json() << '\n' << std::flush; }

private:
    std::ostream* out_;
};

}  // namespace hitch::train
