// Writes seed corpora for the decoder harnesses: valid messages and state blobs of every codec, prefixed with the
// harness's mode and size bytes (see codecs.hpp), into <dir>/<index>/.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codecs.hpp"
#include "hitch/compress/detail/random.hpp"

namespace {

void write(const std::filesystem::path& dir, const std::string& name, unsigned mode, std::size_t n,
           const std::vector<std::byte>& bytes) {
    std::ofstream f(dir / name, std::ios::binary);
    const unsigned char head[3] = {static_cast<unsigned char>(mode), static_cast<unsigned char>(n & 0xff),
                                   static_cast<unsigned char>(n >> 8)};
    f.write(reinterpret_cast<const char*>(head), 3);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <std::size_t I>
void seeds_for(const std::filesystem::path& root) {
    using codec_t = std::tuple_element_t<I, hitch_fuzz::codecs>;
    const auto dir = root / std::to_string(I);
    std::filesystem::create_directories(dir);
    const codec_t codec{};
    hitch::compress::detail::xoshiro256ss rng(I + 1);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{9}, std::size_t{100}, std::size_t{700}}) {
        std::vector<float> g(n);
        for (auto& x : g) x = static_cast<float>(rng.normal() * 1e-2);
        auto state = codec.make_state(n);
        std::vector<std::byte> m, blob;
        codec.encode(hitch::tensor_view<const float>(g), state, m);
        write(dir, "message_" + std::to_string(n), 0, n, m);
        write(dir, "deep_" + std::to_string(n), hitch_fuzz::deep | (8u * (n % 4)), n, m);
        codec.save_state(state, blob);
        write(dir, "state_" + std::to_string(n), hitch_fuzz::state_blob, n, blob);
    }
}

template <std::size_t... I>
void all_seeds(const std::filesystem::path& root, std::index_sequence<I...>) {
    (seeds_for<I>(root), ...);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds <corpus directory>\n");
        return 2;
    }
    all_seeds(argv[1], std::make_index_sequence<hitch_fuzz::codec_count>{});
    return 0;
}
