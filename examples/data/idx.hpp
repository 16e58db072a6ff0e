#pragma once
// Reader for the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/), gzip-compressed or
// raw (zlib reads both). A file is: two zero bytes, a type byte (0x08 = unsigned byte, the only type these data
// sets use), the number of dimensions, each dimension as a big-endian uint32, then the values in row-major order.
// Every field is checked, and the data must end exactly where the dimensions say; otherwise data_error names the
// file and what is wrong.

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace hitch_examples::data {

struct idx_array {
    std::vector<std::size_t> dims;
    std::vector<std::uint8_t> values;  ///< product of dims values, row-major
};

namespace detail {

/// A gzip (or raw) input file with reads that either deliver every byte asked for or throw. Sizes in messages are
/// of the decompressed data, the figures the IDX header's dimensions speak of.
class gz_reader {
public:
    explicit gz_reader(const std::filesystem::path& path) : path_(path.string()) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) throw data_error(path_ + ": no such file");
        file_.reset(gzopen(path_.c_str(), "rb"));
        if (!file_) throw data_error(path_ + ": cannot open the file");
    }

    /// The size the file must have, once the header says it, for "truncated: N of M bytes"; before that, the
    /// least size it can have (`exact` false).
    void expect_size(std::size_t bytes, bool exact) {
        expected_ = bytes;
        expected_exact_ = exact;
    }

    /// Reads exactly n bytes of `what` (for the message) or throws: truncated file, corrupt gzip stream.
    void read(void* out, std::size_t n, const std::string& what) {
        auto* p = static_cast<unsigned char*>(out);
        std::size_t done = 0;
        while (done < n) {
            const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
            const int got = gzread(file_.get(), p + done, chunk);
            if (got > 0) {
                done += static_cast<std::size_t>(got);
                offset_ += static_cast<std::size_t>(got);
                continue;
            }
            if (const int code = zlib_code(); code != Z_OK && code != Z_BUF_ERROR) fail();  // BUF: input ended
            throw data_error(path_ + ": truncated: " + std::to_string(offset_) + " of " +
                             (expected_exact_ ? "" : "at least ") + std::to_string(expected_) + " bytes" +
                             (gzdirect(file_.get()) == 0 ? " (decompressed)" : "") + ", in " + what);
        }
    }

    /// Reads the last n bytes of `what` into `out`, which has room for n + 1: asking for one byte more makes zlib
    /// look for the gzip trailer in the same call (a later call at the end of the input returns 0 without an error,
    /// so a cut trailer would go unnoticed).
    void read_last(unsigned char* out, std::size_t n, const std::string& what) {
        std::size_t done = 0;
        while (done < n + 1) {
            const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n + 1 - done, 1u << 30));
            const int got = gzread(file_.get(), out + done, chunk);
            if (got <= 0) break;
            done += static_cast<std::size_t>(got);
        }
        if (done > n) {  // more than the header says: expect_end counts the rest
            offset_ += n;
            trailing_ = 1;
            return;
        }
        offset_ += done;
        const int code = zlib_code();
        if (done == n && code == Z_BUF_ERROR && gzdirect(file_.get()) == 0)
            throw data_error(path_ + ": truncated gzip stream: all " + std::to_string(offset_) +
                             " data bytes are there, its 8-byte trailer is cut");
        if (code != Z_OK && code != Z_BUF_ERROR) fail();
        if (done < n)
            throw data_error(path_ + ": truncated: " + std::to_string(offset_) + " of " + std::to_string(expected_) +
                             " bytes" + (gzdirect(file_.get()) == 0 ? " (decompressed)" : "") + ", in " + what);
    }

    /// Throws unless the (decompressed) file ends here and, for gzip, its stream is complete and intact.
    void expect_end() {
        unsigned char extra[4096];
        std::size_t trailing = trailing_;
        int got = 0;
        while ((got = gzread(file_.get(), extra, sizeof extra)) > 0) trailing += static_cast<std::size_t>(got);
        if (const int code = zlib_code(); code == Z_BUF_ERROR)
            throw data_error(path_ + ": truncated gzip stream: all " + std::to_string(offset_) +
                             " data bytes are there, its 8-byte trailer is cut");
        else if (code != Z_OK)
            fail();
        if (trailing > 0)
            throw data_error(path_ + ": " + std::to_string(trailing) + " unexpected bytes after the data (at offset " +
                             std::to_string(offset_) + "): the header's dimensions do not match the file");
    }

    [[nodiscard]] const std::string& path() const { return path_; }

private:
    [[noreturn]] void fail() {
        throw data_error(path_ + ": damaged gzip stream (" + zlib_message() + ") at decompressed byte " +
                         std::to_string(offset_));
    }
    int zlib_code() {
        int code = Z_OK;
        (void)gzerror(file_.get(), &code);
        return code;
    }
    /// zlib's description of the stream's error, empty if none (zlib prefixes it with the path: dropped).
    std::string zlib_message() {
        int code = Z_OK;
        std::string message = gzerror(file_.get(), &code);
        if (code == Z_OK) return {};
        if (message.starts_with(path_ + ": ")) message.erase(0, path_.size() + 2);
        return message;
    }

    struct closer {
        void operator()(gzFile f) const { gzclose(f); }
    };
    std::string path_;
    std::unique_ptr<gzFile_s, closer> file_;
    std::size_t offset_ = 0;
    std::size_t expected_ = 4;  // an IDX header's first four bytes
    bool expected_exact_ = false;
    std::size_t trailing_ = 0;  // bytes past the data found by read_last
};

}  // namespace detail

/// Reads an IDX file of unsigned bytes with 1 to 4 dimensions.
inline idx_array read_idx(const std::filesystem::path& path) {
    detail::gz_reader in(path);
    unsigned char header[4];
    in.read(header, 4, "the IDX header");
    if (header[0] != 0 || header[1] != 0) {
        char magic[16];
        std::snprintf(magic, sizeof magic, "0x%02x%02x%02x%02x", header[0], header[1], header[2], header[3]);
        throw data_error(in.path() + ": not an IDX file (magic " + magic +
                         "; an IDX file of bytes starts 0x00000801 to 0x00000804)");
    }
    if (header[2] != 0x08)
        throw data_error(in.path() + ": IDX element type " + std::to_string(header[2]) +
                         " is not supported (only 8 = unsigned byte)");
    if (header[3] < 1 || header[3] > 4)
        throw data_error(in.path() + ": IDX dimension count " + std::to_string(header[3]) + " is outside [1, 4]");
    const std::size_t header_bytes = 4 + 4 * std::size_t{header[3]};
    in.expect_size(header_bytes, false);
    idx_array out;
    std::size_t total = 1;
    for (int d = 0; d < header[3]; ++d) {
        unsigned char be[4];
        in.read(be, 4, "the IDX header");
        const std::size_t n = std::size_t{be[0]} << 24 | std::size_t{be[1]} << 16 | std::size_t{be[2]} << 8 | be[3];
        out.dims.push_back(n);
        constexpr std::size_t limit = std::size_t{1} << 40;  // also keeps the product from overflowing
        if (n != 0 && total > limit / n)
            throw data_error(in.path() + ": the IDX dimensions describe more than 2^40 values");
        total *= n;
    }
    std::string shape;
    for (const std::size_t n : out.dims) shape += (shape.empty() ? "" : " x ") + std::to_string(n);
    in.expect_size(header_bytes + total, true);
    // Grow as the data arrives, so a corrupt header cannot make us allocate what the file does not hold.
    std::size_t done = 0;
    const std::string what = "the data of " + shape + " bytes";
    while (done < total) {
        const std::size_t chunk = std::min<std::size_t>(total - done, std::size_t{1} << 24);
        const bool last = done + chunk == total;
        out.values.resize(done + chunk + (last ? 1 : 0));
        if (last)
            in.read_last(out.values.data() + done, chunk, what);
        else
            in.read(out.values.data() + done, chunk, what);
        done += chunk;
    }
    out.values.resize(total);
    in.expect_end();
    return out;
}

}  // namespace hitch_examples::data
