#pragma once
// Elias-gamma codes (Elias 1975), most significant bit first: qsgd's variable-length coding of the gaps between
// non-zero levels and of the levels themselves.

#include <bit>
#include <cstddef>
#include <cstdint>

namespace hitch::compress::detail {

class bit_writer {
public:
    explicit bit_writer(std::byte* out) : out_(out) {}
    void put(std::uint64_t value, unsigned count) {  // the low `count` bits of value, highest first
        for (unsigned k = count; k-- > 0;) {
            cur_ = static_cast<std::uint8_t>(cur_ << 1 | ((value >> k) & 1u));
            if (++filled_ == 8) flush();
        }
    }
    /// gamma(x), x >= 1: bit_width(x) - 1 zeros, then x in bit_width(x) bits.
    void gamma(std::uint64_t x) {
        const unsigned w = static_cast<unsigned>(std::bit_width(x));
        put(0, w - 1);
        put(x, w);
    }
    /// Bytes written, after padding the last byte with zeros.
    std::size_t finish() {
        if (filled_ != 0) {
            cur_ = static_cast<std::uint8_t>(cur_ << (8 - filled_));
            flush();
        }
        return written_;
    }
    [[nodiscard]] static std::size_t gamma_bits(std::uint64_t x) noexcept {
        return 2 * static_cast<std::size_t>(std::bit_width(x)) - 1;
    }

private:
    void flush() {
        out_[written_++] = static_cast<std::byte>(cur_);
        cur_ = 0;
        filled_ = 0;
    }
    std::byte* out_;
    std::size_t written_ = 0;
    std::uint8_t cur_ = 0;
    unsigned filled_ = 0;
};

/// Reads what bit_writer wrote; reading past the end is reported, never performed.
class bit_reader {
public:
    bit_reader(const std::byte* data, std::size_t bytes) : data_(data), bits_(bytes * 8) {}
    [[nodiscard]] bool get(unsigned& bit) {
        if (pos_ >= bits_) return false;
        bit = (static_cast<unsigned>(data_[pos_ / 8]) >> (7 - pos_ % 8)) & 1u;
        ++pos_;
        return true;
    }
    /// gamma-coded value; false if the stream ends first or the value would exceed 63 bits.
    [[nodiscard]] bool gamma(std::uint64_t& x) {
        unsigned zeros = 0, bit = 0;
        for (;;) {
            if (!get(bit)) return false;
            if (bit) break;
            if (++zeros > 62) return false;
        }
        x = 1;
        for (unsigned k = 0; k < zeros; ++k) {
            if (!get(bit)) return false;
            x = x << 1 | bit;
        }
        return true;
    }
    /// The unread bits: fewer than 8, all zero, for a well-formed stream.
    [[nodiscard]] bool only_padding_left() const noexcept {
        if (bits_ - pos_ >= 8) return false;
        for (std::size_t p = pos_; p < bits_; ++p)
            if ((static_cast<unsigned>(data_[p / 8]) >> (7 - p % 8)) & 1u) return false;
        return true;
    }

private:
    const std::byte* data_;
    std::size_t bits_;
    std::size_t pos_ = 0;
};

}  // namespace hitch::compress::detail
