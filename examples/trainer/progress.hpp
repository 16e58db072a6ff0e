#pragma once
// Progress on rank 0: a bar redrawn in place on a terminal (epoch, loss, accuracy, samples/s, ETA), plain lines
// when the output is a file or a pipe.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace hitch_examples {

class progress {
public:
    progress(bool enabled, bool allow_bar, std::size_t epochs, std::size_t steps_per_epoch)
        : enabled_(enabled),
          bar_(allow_bar && ::isatty(STDOUT_FILENO) != 0),
          epochs_(epochs),
          steps_per_epoch_(std::max<std::size_t>(1, steps_per_epoch)),
          start_(clock::now()) {}

    /// After each step: epoch (0-based), step within the epoch, running mean loss, running train accuracy,
    /// samples per second so far.
    void step(std::size_t epoch, std::size_t step, double loss, double accuracy, double samples_per_s) {
        if (!enabled_) return;
        const auto now = clock::now();
        const double done = (static_cast<double>(epoch - first_epoch_) * static_cast<double>(steps_per_epoch_) +
                             static_cast<double>(step + 1)) /
                            static_cast<double>((epochs_ - first_epoch_) * steps_per_epoch_);
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double eta = done > 0 ? elapsed * (1.0 - done) / done : 0.0;
        if (bar_) {
            if (now - last_ < std::chrono::milliseconds(100) && step + 1 != steps_per_epoch_) return;
            last_ = now;
            constexpr int width = 24;
            const int filled =
                static_cast<int>(width * static_cast<double>(step + 1) / static_cast<double>(steps_per_epoch_));
            std::string bar(static_cast<std::size_t>(filled), '#');
            bar.resize(width, '.');
            std::printf("\repoch %zu/%zu [%s] loss %.4f acc %.4f  %.0f samples/s  ETA %s   ", epoch + 1, epochs_,
                        bar.c_str(), loss, accuracy, samples_per_s, clock_text(eta).c_str());
            std::fflush(stdout);
        } else if (now - last_ >= std::chrono::seconds(5) || step + 1 == steps_per_epoch_) {
            last_ = now;
            std::printf("epoch %zu/%zu step %zu/%zu loss %.4f acc %.4f %.0f samples/s ETA %s\n", epoch + 1, epochs_,
                        step + 1, steps_per_epoch_, loss, accuracy, samples_per_s, clock_text(eta).c_str());
            std::fflush(stdout);
        }
    }

    /// After each epoch's evaluation.
    void epoch(std::size_t epoch, double train_loss, double test_accuracy, double seconds) {
        if (!enabled_) return;
        if (bar_) std::printf("\r");
        std::printf("epoch %zu/%zu done: train loss %.4f, test accuracy %.4f (%.1f s)%s\n", epoch + 1, epochs_,
                    train_loss, test_accuracy, seconds, bar_ ? "                              " : "");
        std::fflush(stdout);
    }

    void set_first_epoch(std::size_t e) { first_epoch_ = std::min(e, epochs_ - 1); }

private:
    using clock = std::chrono::steady_clock;
    static std::string clock_text(double seconds) {
        const auto s = static_cast<long>(seconds + 0.5);
        char text[32];
        std::snprintf(text, sizeof(text), "%ld:%02ld", s / 60, s % 60);
        return text;
    }

    bool enabled_;
    bool bar_;
    std::size_t epochs_;
    std::size_t steps_per_epoch_;
    std::size_t first_epoch_ = 0;
    clock::time_point start_;
    clock::time_point last_{};
};

}  // namespace hitch_examples
