#pragma once
// Scratch files for the data-reader tests: a fresh directory per test, removed afterwards.

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace hitch_test {

class scratch_dir {
public:
    scratch_dir() {
        std::random_device rd;
        const std::string name = "hitch-examples-test-" + std::to_string(rd()) + std::to_string(rd());
        path_ = std::filesystem::temp_directory_path() / name;
        std::filesystem::create_directories(path_);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
    [[nodiscard]] const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

using bytes = std::vector<std::uint8_t>;

inline void write_file(const std::filesystem::path& path, const bytes& content) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(content.data()), static_cast<std::streamsize>(content.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline bytes read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_gzip(const std::filesystem::path& path, const bytes& content) {
    gzFile f = gzopen(path.string().c_str(), "wb9");
    if (!f) throw std::runtime_error("cannot write " + path.string());
    const int written = content.empty() ? 0 : gzwrite(f, content.data(), static_cast<unsigned>(content.size()));
    gzclose(f);
    if (written != static_cast<int>(content.size())) throw std::runtime_error("gzwrite failed for " + path.string());
}

/// How many bytes a gzip stream decompresses to before it ends or breaks (inflate, not gzread).
inline std::size_t inflated_size(const bytes& gz) {
    z_stream z{};
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2 failed");
    z.next_in = const_cast<Bytef*>(gz.data());
    z.avail_in = static_cast<uInt>(gz.size());
    std::vector<Bytef> out(1 << 16);
    std::size_t total = 0;
    int status = Z_OK;
    while (status == Z_OK) {
        z.next_out = out.data();
        z.avail_out = static_cast<uInt>(out.size());
        status = inflate(&z, Z_NO_FLUSH);
        total += out.size() - z.avail_out;
        if (status == Z_BUF_ERROR || (status == Z_OK && z.avail_in == 0 && z.avail_out != 0)) break;
    }
    inflateEnd(&z);
    return total;
}

/// An IDX file of unsigned bytes: magic 0 0 0x08 ndims, big-endian dimensions, values.
inline bytes idx_bytes(const std::vector<std::uint32_t>& dims, const bytes& values) {
    bytes out{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
    for (std::uint32_t d : dims)
        for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(d >> shift));
    out.insert(out.end(), values.begin(), values.end());
    return out;
}

}  // namespace hitch_test
