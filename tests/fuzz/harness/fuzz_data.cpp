// libFuzzer harness of the examples' data readers (HITCH_FUZZ_DATA: 0 read_idx, gzip or raw; 1 one CIFAR-10 binary
// file). They read paths, so the input is written to a file of this process first. Any input must load or throw
// data_error; any other exception, or any sanitizer report, is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/cifar.hpp"
#include "data/idx.hpp"

namespace {

/// The file the input is written to, removed when the process ends.
struct input_file {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("hitch_fuzz_data_" + std::to_string(::getpid()));
    ~input_file() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

const std::filesystem::path& input_path() {
    static const input_file f;
    return f.path;
}

volatile std::size_t sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    {
        std::ofstream f(input_path(), std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
        if (HITCH_FUZZ_DATA == 0) {
            const auto a = hitch_examples::data::read_idx(input_path());
            std::size_t total = 1;
            for (const std::size_t n : a.dims) total *= n;
            if (a.values.size() != total) __builtin_trap();  // the reader's own promise
            sink = sink + a.values.size();
        } else {
            std::vector<std::uint8_t> labels, pixels;
            hitch_examples::data::detail::read_cifar_file(input_path(), labels, pixels);
            if (pixels.size() != labels.size() * (hitch_examples::data::cifar_record - 1)) __builtin_trap();
            sink = sink + labels.size();
        }
    } catch (const hitch_examples::data::data_error&) {}
    return 0;
}
