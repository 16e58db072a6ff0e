// Writes the seed corpora of the reader harnesses: valid inputs of each, prefixed with the harness's mode byte
// where it has one, into <dir>/<harness>/ (checkpoint, optimizer_state, codec_state, sync_state, agreement, idx,
// cifar).
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../../core/legacy_formats.hpp"
#include "hitch/allreduce/automatic/state.hpp"
#include "hitch/allreduce/group.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/sync/server/client.hpp"
#include "hitch/sync/server/shard.hpp"
#include "hitch/train/checkpoint_agreement.hpp"
#include "hitch/train/layer_agreement.hpp"
#include "model.hpp"

namespace {
constexpr std::size_t cifar_record = 3073;  // one label byte and a 32x32x3 image (examples/data/cifar.hpp)
}

namespace {

namespace fs = std::filesystem;
namespace td = hitch::train::detail;
namespace hc = hitch::compress;

void write(const fs::path& file, const std::vector<std::byte>& bytes, int mode = -1) {
    fs::create_directories(file.parent_path());
    std::ofstream f(file, std::ios::binary);
    if (mode >= 0) f.put(static_cast<char>(mode));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

template <std::size_t N>
std::vector<std::byte> legacy(const unsigned char (&bytes)[N]) {
    const auto* p = reinterpret_cast<const std::byte*>(bytes);
    return {p, p + N};
}

template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& values) {
    const auto* p = reinterpret_cast<const std::byte*>(values.data());
    return {p, p + values.size() * sizeof(T)};
}

std::vector<std::byte> from_stream(const std::ostringstream& s) {
    const std::string text = s.str();
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    return {p, p + text.size()};
}

template <class O>
std::vector<std::byte> optimizer_blob(const typename O::options_type& options) {
    hitch_fuzz::model m;
    hitch::optim::model_optimizer<O> opt(options, m.layers);
    for (std::size_t i = 0; i < m.gw.size(); ++i) m.gw[i] = 0.1f * static_cast<float>(i) - 0.2f;
    m.gb = {0.3f, -0.1f};
    opt.step(0.01f);
    std::ostringstream s(std::ios::binary);
    opt.save(s);
    return from_stream(s);
}

template <std::size_t I>
std::vector<std::byte> codec_section() {
    using codec_t = std::tuple_element_t<I, hitch_fuzz::codecs>;
    const codec_t codec{};
    std::vector<hc::aggregation_state<codec_t>> states;
    for (const std::size_t n : hitch_fuzz::bucket_elements) {
        states.push_back(hc::make_aggregation_state(codec, n));
        std::vector<float> g(n);
        for (std::size_t k = 0; k < n; ++k) g[k] = 0.01f * static_cast<float>(k + 1) * (k % 2 == 0 ? 1.0f : -1.0f);
        std::vector<std::byte> message;
        codec.encode(hitch::tensor_view<const float>(g), states.back().codec, message);  // some residual to save
        for (std::size_t k = 0; k < states.back().ring_residual.size(); ++k) states.back().ring_residual[k] = 1e-3f;
    }
    hitch::train::checkpoint_writer w;
    td::write_codec_states(w, codec, states.size(), [&](std::size_t b) -> const auto& { return states[b]; });
    const hitch::train::checkpoint_reader r(w.serialize(), "seed");
    const auto section = r.section("hitch.compressor");
    return {section.begin(), section.end()};
}

template <std::size_t I>
void codec_seeds(const fs::path& dir) {
    const auto section = codec_section<I>();
    write(dir / ("section_" + std::to_string(I)), section, static_cast<int>(I));
    std::uint64_t n = 0;
    std::memcpy(&n, section.data(), sizeof n);
    write(dir / ("blob_" + std::to_string(I)),
          std::vector<std::byte>(section.begin() + 8, section.begin() + 8 + static_cast<std::ptrdiff_t>(n)),
          0x40 | static_cast<int>(I));
}

template <class P>
std::vector<std::byte> sync_blob(const P& policy) {
    std::vector<std::byte> blob;
    policy.save_state(blob);
    return blob;
}

std::vector<std::byte> automatic_blob(bool with_profile) {
    hitch::allreduce::detail::automatic_state s;
    s.constants = hitch::cost_constants{};
    if (with_profile) {
        hitch::allreduce::automatic_profile p;
        p.measured = 3;
        for (int i = 0; i < p.measured; ++i) {
            p.bytes[static_cast<std::size_t>(i)] = static_cast<double>(4096 << (2 * i));
            for (auto& row : p.seconds) row[static_cast<std::size_t>(i)] = 1e-5 * (i + 1);
        }
        s.profile = p;
    }
    std::vector<std::byte> out;
    hitch::allreduce::detail::encode_automatic_state(s, out);
    return out;
}

std::vector<std::byte> sync_blob_for(unsigned pick) {
    switch (pick % 8) {
        case 0: {  // a block-momentum state as after the first average: the global model and the filtered update
            const std::vector<float> global(8, 0.5f), delta(8, 0.01f);
            const std::span<const float> buffers[] = {global, delta};
            const std::uint64_t since[] = {1};
            std::vector<std::byte> blob;
            hitch::sync::detail::save_counters_and_buffers(blob, "local_sgd", since, buffers);
            return blob;
        }
        case 1:
            return sync_blob(hitch_fuzz::plain_sgd());
        case 2:
            return sync_blob(hitch_fuzz::easgd_policy());
        case 3:
            return sync_blob(hitch_fuzz::async_policy());
        case 4:
            return sync_blob(hitch_fuzz::ssp_policy());
        case 5:
            return sync_blob(hitch::sync::hard(hitch::sync::hard::options_type{}));
        case 6:
            return sync_blob(hitch::sync::hogwild(hitch::sync::hogwild::options_type{}));
        default:
            return automatic_blob(pick % 2 == 1);
    }
}

template <std::size_t... I>
std::vector<std::byte> codec_section_for(std::size_t pick, std::index_sequence<I...>) {
    std::vector<std::byte> out;
    ((pick == I ? (void)(out = codec_section<I>()) : void()), ...);
    return out;
}

/// A checkpoint with every section, those of the codec and the sync policy the whole-file harness reads for `mode`.
std::vector<std::byte> whole_checkpoint(unsigned mode) {
    hitch_fuzz::model m;
    hitch::train::checkpoint_writer w;
    td::write_meta(w, m.identity(), {1200, 0x9f3c0000aa55ull});
    td::write_parameters(w, m.layers);
    w.add("hitch.optimizer", optimizer_blob<hitch::optim::adam>({.amsgrad = true}));
    w.add("hitch.compressor",
          codec_section_for(mode % hitch_fuzz::codec_count, std::make_index_sequence<hitch_fuzz::codec_count>{}));
    td::write_scaler(w, {32768.0f, 17, 2});
    w.add((mode % 8) == 7 ? "hitch.schedule" : "hitch.sync", sync_blob_for(mode));
    return w.serialize();
}

std::vector<std::byte> idx_file(bool wide) {
    std::vector<std::byte> b = {std::byte{0}, std::byte{0}, std::byte{8}, static_cast<std::byte>(wide ? 3 : 1)};
    const std::vector<unsigned> dims = wide ? std::vector<unsigned>{2, 3, 4} : std::vector<unsigned>{5};
    std::size_t total = 1;
    for (const unsigned d : dims) {
        for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::byte>((d >> s) & 0xff));
        total *= d;
    }
    for (std::size_t i = 0; i < total; ++i) b.push_back(static_cast<std::byte>(i * 7));
    return b;
}

void write_gzip(const fs::path& file, const std::vector<std::byte>& bytes) {
    fs::create_directories(file.parent_path());
    gzFile f = gzopen(file.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
}

/// A new shard's state (fuzz_server_state's mode 0 and 2).
template <class O>
std::vector<std::byte> shard_blob() {
    static const std::size_t sizes[] = {6, 2};
    const hitch::sync::shard_plan plan(sizes, 2, hitch::sync::shard_by::range);
    hitch_fuzz::model m;
    hitch::cpu dev;
    hitch::sync::detail::server_shard<O, hitch::compress::none, hitch::cpu> shard(
        typename O::options_type{}, {}, dev, m.layers, plan, 1, 3, hitch::sync::server_rule{}, {});
    std::vector<std::byte> blob;
    shard.save(blob);
    return blob;
}

/// A worker's client state (fuzz_server_state's mode 1 and 3), with codec state where the codec keeps one.
template <class X>
std::vector<std::byte> client_blob() {
    static const std::size_t sizes[] = {6, 2};
    const hitch::sync::shard_plan plan(sizes, 2, hitch::sync::shard_by::range);
    hitch_fuzz::model m;
    hitch::comm::local_world world(1);
    hitch::comm::local comm = world.communicator(0);
    hitch::sync::detail::server_client<X, hitch::comm::local> client(comm, X{}, plan, {0, 0}, 1, m.layers,
                                                                     hitch::sync::server_rule{});
    std::vector<std::byte> blob;
    client.save(blob);
    return blob;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds <corpus directory>\n");
        return 2;
    }
    const fs::path root = argv[1];

    for (unsigned mode = 0x80; mode < 0x88; ++mode)
        write(root / "checkpoint" / ("file_" + std::to_string(mode & 7)), whole_checkpoint(mode),
              static_cast<int>(mode));

    // The first formats, which the readers still take (version 1: no common frame, their own checksums).
    write(root / "checkpoint" / "version1", legacy(hitch_test::legacy::hitchckp_v1), 0);
    write(root / "optimizer_state" / "version1", legacy(hitch_test::legacy::hitchopt_v1), 1);
    write(root / "sync_state" / "version1", legacy(hitch_test::legacy::hsyn_v1), 1);

    write(root / "optimizer_state" / "adam", optimizer_blob<hitch::optim::adam>({.amsgrad = true}), 0x80);
    write(root / "optimizer_state" / "momentum", optimizer_blob<hitch::optim::momentum>({}), 0x81);

    const fs::path codec_dir = root / "codec_state";
    codec_seeds<0>(codec_dir);
    codec_seeds<1>(codec_dir);
    codec_seeds<2>(codec_dir);
    codec_seeds<3>(codec_dir);
    codec_seeds<4>(codec_dir);

    const fs::path sync_dir = root / "sync_state";
    for (unsigned pick = 0; pick < 8; ++pick)
        write(sync_dir / ("policy_" + std::to_string(pick)), sync_blob_for(pick), static_cast<int>(0x80 | pick));
    write(sync_dir / "automatic_constants", automatic_blob(false), 0x87);

    std::vector<hitch::allreduce::call_descriptor> calls(3);
    for (std::size_t r = 0; r < calls.size(); ++r) {
        calls[r].sequence = 17;
        calls[r].count = 1000 + r;
        calls[r].operation = 1;
        calls[r].type = static_cast<std::uint8_t>(hitch::dtype::f32);
        calls[r].set_schedule(r == 2 ? "ring" : "recursive_doubling");
    }
    write(root / "agreement" / "calls", as_bytes(calls), 0);
    std::vector<td::layer_descriptor> layers = {td::describe_layer("fc.weight", 20, hitch::dtype::f32, 4),
                                                td::describe_layer("fc.weight", 20, hitch::dtype::f32, 5)};
    write(root / "agreement" / "layers", as_bytes(layers), 1);
    std::vector<td::file_verdict> verdicts = {{{200, 7}, 1}, {{200, 7}, 1}, {{100, 3}, 1}};
    write(root / "agreement" / "verdicts", as_bytes(verdicts), 2);

    const fs::path server_dir = root / "server_state";
    write(server_dir / "shard_adam", shard_blob<hitch::optim::adam>(), 0x80);
    write(server_dir / "shard_momentum", shard_blob<hitch::optim::momentum>(), 0x82);
    write(server_dir / "client_none", client_blob<hc::none>(), 0x81);
    write(server_dir / "client_ef_topk", client_blob<hc::error_feedback<hc::topk>>(), 0x83);

    // comm::agree's values: first byte the type (fuzz_agree_values.cpp), then three ranks' values.
    const fs::path values_dir = root / "agree_values";
    const char names[] = "fc.weight\0\0\0\0\0\0\0fc.weight.tail!!fc.bias\0\0\0\0\0\0\0\0\0";
    write(values_dir / "char_arrays",
          std::vector<std::byte>(reinterpret_cast<const std::byte*>(names),
                                 reinterpret_cast<const std::byte*>(names) + 48),
          0);
    write(values_dir / "bools", {std::byte{1}, std::byte{0}, std::byte{1}}, 2);
    write(values_dir / "enums", {std::byte{1}, std::byte{2}, std::byte{1}}, 3);
    const std::vector<double> doubles = {1.5, -2.25, 1e300};
    write(values_dir / "doubles", as_bytes(doubles), 7);
    const std::vector<std::uint64_t> counts = {1000, 1001, 1000};
    write(values_dir / "counts", as_bytes(counts), 8);

    write(root / "idx" / "raw_1d", idx_file(false));
    write(root / "idx" / "raw_3d", idx_file(true));
    write_gzip(root / "idx" / "gzip_3d", idx_file(true));

    std::vector<std::byte> cifar(2 * cifar_record);
    for (std::size_t i = 0; i < cifar.size(); ++i) cifar[i] = static_cast<std::byte>(i % 251);
    cifar[0] = std::byte{3};
    cifar[cifar_record] = std::byte{9};
    write(root / "cifar" / "two_records", cifar);
    return 0;
}
