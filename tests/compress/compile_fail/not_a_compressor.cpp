// Must NOT compile: a type that is not a codec (no decode_add, no state persistence) wrapped in error_feedback. The
// build's output must carry error_feedback's message (checked by the ctest that builds this file).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "hitch/compress/error_feedback.hpp"

struct almost_a_codec {
    static constexpr std::uint8_t codec_id = 200;
    static constexpr std::string_view name = "almost";
    static constexpr bool additive = false;
    static constexpr bool needs_error_feedback = true;
    static constexpr bool ring_compressible = false;
    struct state {};
    state make_state(std::size_t) const { return {}; }
};

int main() {
    hitch::compress::error_feedback<almost_a_codec> codec;
    (void)codec;
}
