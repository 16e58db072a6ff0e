#pragma once
// An image classification data set held as bytes (n x height x width x channels, NHWC, plus one label byte per
// sample), per-channel normalisation, and the assembly of batches into contiguous buffers the models read.

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace hitch_examples::data {

/// A data file is missing, unreadable, corrupt or inconsistent. The message names the file.
class data_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Which part of a data set to load.
enum class split { train, test };

struct dataset {
    std::string name;                     ///< e.g. "fashion-mnist train"
    xt::xtensor<std::uint8_t, 4> images;  ///< samples x height x width x channels
    xt::xtensor<std::uint8_t, 1> labels;  ///< one class per sample, below `classes`
    std::size_t classes = 10;

    [[nodiscard]] std::size_t size() const { return labels.size(); }
    [[nodiscard]] std::size_t height() const { return images.shape(1); }
    [[nodiscard]] std::size_t width() const { return images.shape(2); }
    [[nodiscard]] std::size_t channels() const { return images.shape(3); }
    [[nodiscard]] std::size_t sample_size() const { return height() * width() * channels(); }
};

/// Per channel: x = (pixel / 255 - mean) / stddev.
struct normalization {
    std::vector<double> mean, stddev;

    /// The statistics of a data set (use the training set's for the test set too), from a histogram of byte
    /// values per channel: exact, and one pass of counting.
    static normalization of(const dataset& d) {
        const std::size_t c = d.channels();
        std::vector<std::size_t> histogram(256 * c, 0);
        const std::uint8_t* p = d.images.data();
        for (std::size_t i = 0, n = d.images.size(); i < n; i += c)
            for (std::size_t k = 0; k < c; ++k) ++histogram[k * 256 + p[i + k]];
        normalization out;
        for (std::size_t k = 0; k < c; ++k) {
            double count = 0, sum = 0, sum2 = 0;
            for (std::size_t v = 0; v < 256; ++v) {
                const auto h = static_cast<double>(histogram[k * 256 + v]);
                const double x = static_cast<double>(v) / 255.0;
                count += h, sum += h * x, sum2 += h * x * x;
            }
            const double mean = count > 0 ? sum / count : 0.0;
            const double var = count > 0 ? sum2 / count - mean * mean : 1.0;
            out.mean.push_back(mean);
            out.stddev.push_back(var > 1e-12 ? std::sqrt(var) : 1.0);
        }
        return out;
    }
};

/// Fills contiguous batch buffers (images as T in NHWC, labels as int32) from a data set, for up to max_batch
/// samples, without allocating per batch.
template <class T = float>
class batch_loader {
public:
    batch_loader(const dataset& d, const normalization& norm, std::size_t max_batch)
        : data_(&d), images_(xt::xtensor<T, 1>::from_shape({max_batch * d.sample_size()})), labels_(max_batch) {
        if (norm.mean.size() != d.channels() || norm.stddev.size() != d.channels())
            throw std::invalid_argument("data::batch_loader: the normalisation has " +
                                        std::to_string(norm.mean.size()) + " channels, the data set " +
                                        std::to_string(d.channels()));
        for (std::size_t k = 0; k < d.channels(); ++k) {  // x = pixel * scale + shift
            scale_.push_back(static_cast<T>(1.0 / (255.0 * norm.stddev[k])));
            shift_.push_back(static_cast<T>(-norm.mean[k] / norm.stddev[k]));
        }
    }

    /// The samples at `indices` (their count at most max_batch).
    void load(std::span<const std::size_t> indices) {
        check(indices.size());
        for (std::size_t b = 0; b < indices.size(); ++b) {
            if (indices[b] >= data_->size())
                throw std::out_of_range("data::batch_loader: sample " + std::to_string(indices[b]) + " of " +
                                        data_->name + " (" + std::to_string(data_->size()) + " samples)");
            copy_sample(indices[b], b);
        }
        size_ = indices.size();
    }

    /// The `count` samples from `first` on (evaluation walks a data set in order).
    void load_range(std::size_t first, std::size_t count) {
        check(count);
        if (first > data_->size() || count > data_->size() - first)
            throw std::out_of_range("data::batch_loader: samples [" + std::to_string(first) + ", " +
                                    std::to_string(first + count) + ") of " + data_->name);
        for (std::size_t b = 0; b < count; ++b) copy_sample(first + b, b);
        size_ = count;
    }

    [[nodiscard]] std::size_t size() const { return size_; }
    [[nodiscard]] std::size_t max_batch() const { return labels_.size(); }
    [[nodiscard]] std::span<const T> images() const { return {images_.data(), size_ * data_->sample_size()}; }
    [[nodiscard]] std::span<const std::int32_t> labels() const { return {labels_.data(), size_}; }

private:
    void check(std::size_t count) const {
        if (count > labels_.size())
            throw std::invalid_argument("data::batch_loader: a batch of " + std::to_string(count) +
                                        " samples exceeds max_batch " + std::to_string(labels_.size()));
    }

    void copy_sample(std::size_t sample, std::size_t slot) {
        const std::size_t n = data_->sample_size(), c = data_->channels();
        const std::uint8_t* src = data_->images.data() + sample * n;
        T* dst = images_.data() + slot * n;
        if (c == 1) {  // grey images: one scale and shift, a loop that vectorises
            const T scale = scale_[0], shift = shift_[0];
            for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]) * scale + shift;
        } else {
            for (std::size_t i = 0; i < n; i += c)
                for (std::size_t k = 0; k < c; ++k) dst[i + k] = static_cast<T>(src[i + k]) * scale_[k] + shift_[k];
        }
        labels_[slot] = data_->labels[sample];
    }

    const dataset* data_;
    std::vector<T> scale_, shift_;  // per channel
    xt::xtensor<T, 1> images_;
    std::vector<std::int32_t> labels_;
    std::size_t size_ = 0;
};

}  // namespace hitch_examples::data
