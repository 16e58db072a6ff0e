#pragma once
// MNIST-format data sets (MNIST, Fashion-MNIST): train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz],
// t10k-* for the test split. By default Fashion-MNIST from Debian's dataset-fashion-mnist package.

#include <filesystem>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/idx.hpp"

namespace hitch_examples::data {

inline const std::filesystem::path default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

namespace detail {

/// The first of `stem`-idxN-ubyte.gz, -idxN-ubyte, .idxN-ubyte(.gz) that exists in dir; data_error listing them all
/// otherwise.
inline std::filesystem::path find_idx_file(const std::filesystem::path& dir, const std::string& stem, int dims) {
    const std::string idx = "idx" + std::to_string(dims) + "-ubyte";
    std::string tried;
    for (const std::string& name :
         {stem + "-" + idx + ".gz", stem + "-" + idx, stem + "." + idx + ".gz", stem + "." + idx}) {
        const auto path = dir / name;
        std::error_code ec;
        if (std::filesystem::is_regular_file(path, ec)) return path;
        tried += (tried.empty() ? "" : ", ") + name;
    }
    throw data_error(dir.string() + ": no " + stem + " file (looked for " + tried + ")");
}

}  // namespace detail

/// Loads one split of an MNIST-format data set from `dir`: 28x28 (or any size) grey images, labels 0-9.
inline dataset load_mnist(const std::filesystem::path& dir, split which) {
    const std::string prefix = which == split::train ? "train" : "t10k";
    const auto images_path = detail::find_idx_file(dir, prefix + "-images", 3);
    const auto labels_path = detail::find_idx_file(dir, prefix + "-labels", 1);
    idx_array images = read_idx(images_path);
    idx_array labels = read_idx(labels_path);
    if (images.dims.size() != 3)
        throw data_error(images_path.string() + ": expected 3 dimensions (images x rows x columns), found " +
                         std::to_string(images.dims.size()));
    if (labels.dims.size() != 1)
        throw data_error(labels_path.string() + ": expected 1 dimension (labels), found " +
                         std::to_string(labels.dims.size()));
    if (images.dims[0] != labels.dims[0])
        throw data_error(images_path.string() + " holds " + std::to_string(images.dims[0]) + " images but " +
                         labels_path.string() + " holds " + std::to_string(labels.dims[0]) + " labels");
    if (images.dims[0] == 0 || images.dims[1] == 0 || images.dims[2] == 0)
        throw data_error(images_path.string() + ": the data set is empty");
    dataset d;
    const auto folder = dir.has_filename() ? dir.filename() : dir.parent_path().filename();
    d.name = folder.string() + " " + prefix;
    d.classes = 10;
    for (std::size_t i = 0; i < labels.values.size(); ++i)
        if (labels.values[i] >= d.classes)
            throw data_error(labels_path.string() + ": label " + std::to_string(labels.values[i]) + " of sample " +
                             std::to_string(i) + " is outside [0, 10)");
    d.images = xt::xtensor<std::uint8_t, 4>::from_shape({images.dims[0], images.dims[1], images.dims[2], 1});
    std::copy(images.values.begin(), images.values.end(), d.images.data());
    d.labels = xt::xtensor<std::uint8_t, 1>::from_shape({labels.dims[0]});
    std::copy(labels.values.begin(), labels.values.end(), d.labels.data());
    return d;
}

}  // namespace hitch_examples::data
