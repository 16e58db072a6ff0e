// libFuzzer harness of one decoder (HITCH_FUZZ_CODEC_INDEX into hitch_fuzz::codecs): any input must decode or
// throw hitch::corrupt_message_error; any other exception, or any out-of-bounds access or undefined behaviour
// (AddressSanitizer, UndefinedBehaviorSanitizer), is a finding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codecs.hpp"

namespace {

using codec_t = std::tuple_element_t<HITCH_FUZZ_CODEC_INDEX, hitch_fuzz::codecs>;

template <class T, bool Add>
void decode_into(const codec_t& codec, std::span<const std::byte> message, std::size_t n) {
    std::vector<T> out(n, T(1.0f));
    if constexpr (Add)
        codec.decode_add(message, hitch::tensor_view<T>(out));
    else
        codec.decode(message, hitch::tensor_view<T>(out));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace wire = hitch::compress::wire;
    if (size < 3) return 0;
    const unsigned mode = data[0];
    const std::size_t n =
        (static_cast<std::size_t>(data[1]) | static_cast<std::size_t>(data[2]) << 8) % (hitch_fuzz::max_elements + 1);
    std::vector<std::byte> message(size - 3);
    for (std::size_t i = 3; i < size; ++i) message[i - 3] = static_cast<std::byte>(data[i]);
    const codec_t codec{};
    const bool blob = (mode & hitch_fuzz::state_blob) != 0;
    if ((mode & hitch_fuzz::deep) != 0 && message.size() >= wire::header_bytes) {
        wire::store_le(message.data(), blob ? wire::state_magic : wire::message_magic);
        wire::store_le<std::uint8_t>(message.data() + 4, wire::format_version);
        wire::store_le<std::uint8_t>(message.data() + 5, codec_t::codec_id);
        if ((mode & hitch_fuzz::keep_type) == 0) wire::store_le<std::uint8_t>(message.data() + 6, 9);  // float
        wire::store_le<std::uint64_t>(message.data() + 8, n);
        wire::store_le<std::uint64_t>(message.data() + 16, message.size() - wire::header_bytes);
        wire::seal(message);
    }
    try {
        if (blob) {
            auto state = codec.make_state(n);
            codec.load_state(message, state);
        } else {
            switch ((mode >> 3) & 3u) {
                case 0:
                    decode_into<float, false>(codec, message, n);
                    break;
                case 1:
                    decode_into<float, true>(codec, message, n);
                    break;
                case 2:
                    decode_into<double, false>(codec, message, n);
                    break;
                default:
                    decode_into<hitch::half, true>(codec, message, n);
                    break;
            }
        }
    } catch (const hitch::corrupt_message_error&) {
        // the expected answer to a bad message
    }
    return 0;
}
