// Must NOT compile: a codec without options and without encode(), wrapped in error_feedback. Only the first
// (the options) may be reported.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hitch/compress/error_feedback.hpp"

struct codec_without_options {
    static constexpr std::uint8_t codec_id = 200;
    static constexpr std::string_view name = "mine";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = true;
    static constexpr bool ring_compressible = false;
    struct state {};
    state make_state(std::size_t) const { return {}; }
    // no options_type / options(), no encode()
};

int main() {
    hitch::compress::error_feedback<codec_without_options> codec;
    (void)codec;
}
