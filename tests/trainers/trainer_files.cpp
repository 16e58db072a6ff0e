// Files for the trainer tests, which CMake cannot write itself, and the one sum it cannot do:
//   trainer_files cifar DIR RECORDS   a small data set in the CIFAR-10 binary format (data_batch_1..5.bin,
//                                     test_batch.bin); each class has its own colour pattern, so a network learns it
//   trainer_files cut SRC DST BYTES   the first BYTES bytes of SRC
//   trainer_files damage SRC DST AT   SRC with the 16 bytes from offset AT inverted
//   trainer_files inflated FILE       how many bytes zlib decompresses from FILE before it ends or fails
//   trainer_files relative A B        |A - B| / max(|A|, |B|) (0 when both are 0), for if(... LESS ...)
//   trainer_files section FILE NAME   the CRC32C and size of section NAME of checkpoint FILE (two runs' parameters
//                                     compare equal exactly when these do, short of a CRC collision)
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "hitch/core/crc32c.hpp"
#include "hitch/train/checkpoint.hpp"

namespace {

int write_cifar(const std::filesystem::path& dir, int records) {
    std::filesystem::create_directories(dir);
    std::mt19937 rng(7);
    const auto write = [&](const std::string& name) {
        std::ofstream out(dir / name, std::ios::binary);
        std::vector<unsigned char> record(3073);
        for (int r = 0; r < records; ++r) {
            const int label = static_cast<int>(rng() % 10);
            record[0] = static_cast<unsigned char>(label);
            for (int c = 0; c < 3; ++c)
                for (int i = 0; i < 1024; ++i) {
                    const int signal = ((i / 32 + i % 32 + c * 7) % 10 == label) ? 180 : 40;
                    record[static_cast<std::size_t>(1 + c * 1024 + i)] =
                        static_cast<unsigned char>(signal + static_cast<int>(rng() % 40));
                }
            out.write(reinterpret_cast<const char*>(record.data()), static_cast<std::streamsize>(record.size()));
        }
    };
    for (int b = 1; b <= 5; ++b) write("data_batch_" + std::to_string(b) + ".bin");
    write("test_batch.bin");
    return 0;
}

/// SRC's first `bytes` bytes, with the 16 from `damage_at` inverted (none when damage_at is past them), to DST.
int copy(const char* from, const char* to, std::size_t bytes, std::size_t damage_at) {
    std::ifstream in(from, std::ios::binary);
    std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() < bytes) {
        std::fprintf(stderr, "cannot read %zu bytes of %s\n", bytes, from);
        return 1;
    }
    for (std::size_t i = damage_at; i < damage_at + 16 && i < bytes; ++i) data[i] = static_cast<char>(~data[i]);
    std::ofstream out(to, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(bytes));
    return out ? 0 : 1;
}

int inflated(const char* path) {
    gzFile f = gzopen(path, "rb");
    if (f == nullptr) return 1;
    std::vector<char> buffer(1 << 20);
    unsigned long long total = 0;
    for (int got; (got = gzread(f, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0;)
        total += static_cast<unsigned>(got);
    gzclose(f);
    std::printf("%llu\n", total);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "cifar" && argc == 4) return write_cifar(argv[2], std::atoi(argv[3]));
    if (what == "cut" && argc == 5) return copy(argv[2], argv[3], std::strtoull(argv[4], nullptr, 10), SIZE_MAX);
    if (what == "damage" && argc == 5) {
        std::error_code ec;
        const auto size = static_cast<std::size_t>(std::filesystem::file_size(argv[2], ec));
        return ec ? 1 : copy(argv[2], argv[3], size, std::strtoull(argv[4], nullptr, 10));
    }
    if (what == "inflated" && argc == 3) return inflated(argv[2]);
    if (what == "relative" && argc == 4) {
        char *end_a = nullptr, *end_b = nullptr;
        const double a = std::strtod(argv[2], &end_a), b = std::strtod(argv[3], &end_b);
        if (*end_a != '\0' || *end_b != '\0' || end_a == argv[2] || end_b == argv[3]) return 1;
        const double scale = std::max(std::fabs(a), std::fabs(b));
        std::printf("%.17g\n", scale == 0.0 ? 0.0 : std::fabs(a - b) / scale);
        return 0;
    }
    if (what == "section" && argc == 4) {
        try {
            const hitch::train::checkpoint_reader r(argv[2]);
            const auto bytes = r.section(argv[3]);
            std::printf("%08x %zu\n", static_cast<unsigned>(hitch::crc32c_of(bytes)), bytes.size());
            return 0;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", e.what());
            return 1;
        }
    }
    std::fprintf(stderr,
                 "usage: %s cifar DIR RECORDS | cut SRC DST BYTES | damage SRC DST AT | inflated FILE | relative A B "
                 "| section FILE NAME\n",
                 argv[0]);
    return 2;
}
