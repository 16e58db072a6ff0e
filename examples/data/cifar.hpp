#pragma once
// CIFAR-10 in its binary format (https://www.cs.toronto.edu/~kriz/cifar.html): data_batch_1.bin ... data_batch_5.bin
// and test_batch.bin, each a sequence of 3073-byte records: one label byte (0-9), then a 32x32 image as three
// 1024-byte planes (red, green, blue), rows in order. Images are stored here as 32x32x3 (NHWC).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace hitch_examples::data {

inline constexpr std::size_t cifar_side = 32, cifar_channels = 3;
inline constexpr std::size_t cifar_record = 1 + cifar_side * cifar_side * cifar_channels;

namespace detail {

/// Appends every record of one CIFAR-10 binary file to `labels` and `pixels` (HWC order).
inline void read_cifar_file(const std::filesystem::path& path, std::vector<std::uint8_t>& labels,
                            std::vector<std::uint8_t>& pixels) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw data_error(path.string() + ": no such file");
    const auto bytes = std::filesystem::file_size(path, ec);
    if (ec) throw data_error(path.string() + ": cannot read its size: " + ec.message());
    if (bytes == 0) throw data_error(path.string() + ": the file is empty (a CIFAR-10 file holds 3073-byte records)");
    if (bytes % cifar_record != 0) {
        // The format has no header: the whole records the file would hold are all it can say it expected.
        const std::size_t records = bytes / cifar_record + 1;
        throw data_error(path.string() + ": truncated: " + std::to_string(bytes) + " of " +
                         std::to_string(records * cifar_record) + " bytes (record " + std::to_string(records - 1) +
                         " of the " + std::to_string(cifar_record) + "-byte CIFAR-10 records is cut)");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw data_error(path.string() + ": cannot open the file");
    const std::size_t records = bytes / cifar_record, plane = cifar_side * cifar_side;
    labels.reserve(labels.size() + records);
    pixels.reserve(pixels.size() + records * (cifar_record - 1));
    std::vector<std::uint8_t> record(cifar_record);
    for (std::size_t r = 0; r < records; ++r) {
        if (!in.read(reinterpret_cast<char*>(record.data()), static_cast<std::streamsize>(cifar_record)))
            throw data_error(path.string() + ": read failed at record " + std::to_string(r));
        if (record[0] >= 10)
            throw data_error(path.string() + ": record " + std::to_string(r) + " has label " +
                             std::to_string(record[0]) + ", outside [0, 10)");
        labels.push_back(record[0]);
        for (std::size_t q = 0; q < plane; ++q)
            for (std::size_t c = 0; c < cifar_channels; ++c) pixels.push_back(record[1 + c * plane + q]);
    }
}

}  // namespace detail

/// Loads the CIFAR-10 files at `paths` into one data set.
inline dataset read_cifar10(const std::vector<std::filesystem::path>& paths, std::string name) {
    std::vector<std::uint8_t> labels, pixels;
    for (const auto& p : paths) detail::read_cifar_file(p, labels, pixels);
    dataset d;
    d.name = std::move(name);
    d.classes = 10;
    d.images = xt::xtensor<std::uint8_t, 4>::from_shape({labels.size(), cifar_side, cifar_side, cifar_channels});
    std::copy(pixels.begin(), pixels.end(), d.images.data());
    d.labels = xt::xtensor<std::uint8_t, 1>::from_shape({labels.size()});
    std::copy(labels.begin(), labels.end(), d.labels.data());
    return d;
}

/// The training split (data_batch_1.bin ... data_batch_5.bin) or the test split (test_batch.bin) in `dir`.
inline dataset load_cifar10(const std::filesystem::path& dir, split which) {
    std::vector<std::filesystem::path> paths;
    if (which == split::train)
        for (int i = 1; i <= 5; ++i) paths.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
    else
        paths.push_back(dir / "test_batch.bin");
    return read_cifar10(paths, which == split::train ? "cifar-10 train" : "cifar-10 test");
}

}  // namespace hitch_examples::data
