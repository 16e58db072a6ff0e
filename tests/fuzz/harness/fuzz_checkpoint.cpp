// libFuzzer harness of the checkpoint reader and what reads its sections (HITCH_FUZZ_READER, see model.hpp):
//   whole_file       the input is a checkpoint file (first byte bit 7: reseal its frame); every section reader
//                    then runs on what it holds: hitch.meta, hitch.params, hitch.scaler, and the three below
//   optimizer_state  the input is hitch.optimizer, loaded by model_optimizer<momentum> or <adam amsgrad>
//   codec_state      the input is hitch.compressor (or, first byte bit 6, one bucket's resealed aggregation
//                    state blob), loaded for one of the codecs of model.hpp
//   sync_state       the input is hitch.sync of one sync policy, or hitch.schedule of allreduce::automatic
// Any input must load or throw corrupt_message_error, mismatch_error or config_error; any other exception, or any
// sanitizer report, is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "model.hpp"

namespace {

namespace td = hitch::train::detail;
namespace hc = hitch::compress;
using hitch::train::checkpoint_reader;
using hitch::train::checkpoint_writer;
using hitch_fuzz::expect_documented;

volatile double sink = 0;

template <class O>
void load_optimizer(const checkpoint_reader& r, const typename O::options_type& options) {
    hitch_fuzz::model m;
    hitch::optim::model_optimizer<O> opt(options, m.layers);
    auto in = r.stream("hitch.optimizer");
    opt.load(in);
}

template <std::size_t I>
void load_codec_states(const checkpoint_reader& r) {
    using codec_t = std::tuple_element_t<I, hitch_fuzz::codecs>;
    const codec_t codec{};
    (void)td::read_codec_states(
        r, codec, 2, [&](std::size_t b) { return hc::make_aggregation_state(codec, hitch_fuzz::bucket_elements[b]); });
}

template <std::size_t... I>
void load_codec_states(const checkpoint_reader& r, std::size_t which, std::index_sequence<I...>) {
    ((which == I ? load_codec_states<I>(r) : void()), ...);
}

/// What automatic does with a loaded profile at its next calls: the measured-over-modelled ratios its ranking
/// multiplies by, and the probes a call size asks for.
void use_profile(std::span<const std::byte> blob) {
    const auto state = hitch::allreduce::detail::decode_automatic_state(blob);
    if (!state.profile) return;
    const auto& prof = *state.profile;
    double sum = 0;
    for (const std::size_t n : {std::size_t{1}, std::size_t{5000}, std::size_t{1} << 22, std::size_t{1} << 40})
        for (int c = 0; c < hitch::allreduce::automatic_profile::candidates; ++c) {
            sum += hitch::allreduce::detail::measured_ratio(
                prof, c, n, [](std::size_t bytes) { return 1e-5 + 1e-9 * static_cast<double>(bytes); });
            sum += prof.outgrown_by(n) ? 1 : 0;
            sum += prof.probes_for(n);
        }
    sink = sink + sum;
}

void load_sync(const checkpoint_reader& r, unsigned which) {
    switch (which % 8) {
        case 0:
            (void)td::read_sync(r, hitch_fuzz::block_momentum_sgd());
            break;
        case 1:
            (void)td::read_sync(r, hitch_fuzz::plain_sgd());
            break;
        case 2:
            (void)td::read_sync(r, hitch_fuzz::easgd_policy());
            break;
        case 3:
            (void)td::read_sync(r, hitch_fuzz::async_policy());
            break;
        case 4:
            (void)td::read_sync(r, hitch_fuzz::ssp_policy());
            break;
        case 5:
            (void)td::read_sync(r, hitch::sync::hard(hitch::sync::hard::options_type{}));
            break;
        case 6:
            (void)td::read_sync(r, hitch::sync::hogwild(hitch::sync::hogwild::options_type{}));
            break;
        default:
            if (td::read_schedule(r, hitch::allreduce::automatic{})) use_profile(r.section("hitch.schedule"));
            break;
    }
}

/// Every section reader on a checkpoint that parsed.
void read_everything(const checkpoint_reader& r, unsigned pick) {
    hitch_fuzz::model m;
    expect_documented([&] { (void)td::read_meta(r, m.identity()); });
    expect_documented([&] { td::restore_parameters(td::read_parameters(r, m.layers), m.layers); });
    expect_documented([&] { (void)td::read_scaler(r, hitch_fuzz::scaler_options()); });
    expect_documented([&] { load_optimizer<hitch::optim::adam>(r, {.amsgrad = true}); });
    expect_documented([&] {
        load_codec_states(r, pick % hitch_fuzz::codec_count, std::make_index_sequence<hitch_fuzz::codec_count>{});
    });
    expect_documented([&] { load_sync(r, pick); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const unsigned mode = data[0];
    std::vector<std::byte> bytes = hitch_fuzz::bytes_of(data + 1, size - 1);
    const auto section = [&](std::string name, std::vector<std::byte> payload) {
        checkpoint_writer w;
        w.add(std::move(name), std::move(payload));
        return w.serialize();
    };
    switch (HITCH_FUZZ_READER) {
        case hitch_fuzz::whole_file:
            if ((mode & 0x80u) != 0) hitch_fuzz::reseal_frame(bytes);
            expect_documented([&] { read_everything(checkpoint_reader(std::move(bytes), "input"), mode); });
            break;
        case hitch_fuzz::optimizer_state: {
            if ((mode & 0x80u) != 0) hitch_fuzz::reseal_frame(bytes);
            const checkpoint_reader r(section("hitch.optimizer", std::move(bytes)), "input");
            if ((mode & 1u) != 0)
                expect_documented([&] { load_optimizer<hitch::optim::momentum>(r, {}); });
            else
                expect_documented([&] { load_optimizer<hitch::optim::adam>(r, {.amsgrad = true}); });
            break;
        }
        case hitch_fuzz::codec_state: {
            if ((mode & 0x40u) != 0) {  // bucket 0's blob, resealed; bucket 1 is then missing
                hitch_fuzz::reseal_aggregation_state(bytes);
                std::vector<std::byte> blob(8);
                hitch::store_le<std::uint64_t>(blob.data(), bytes.size());
                blob.insert(blob.end(), bytes.begin(), bytes.end());
                bytes = std::move(blob);
            }
            const checkpoint_reader r(section("hitch.compressor", std::move(bytes)), "input");
            expect_documented([&] {
                load_codec_states(r, (mode & 0x3fu) % hitch_fuzz::codec_count,
                                  std::make_index_sequence<hitch_fuzz::codec_count>{});
            });
            break;
        }
        default: {
            if ((mode & 0x80u) != 0) hitch_fuzz::reseal_frame(bytes);
            const bool schedule = (mode & 7u) == 7u;
            const checkpoint_reader r(section(schedule ? "hitch.schedule" : "hitch.sync", std::move(bytes)), "input");
            expect_documented([&] { load_sync(r, mode & 7u); });
            break;
        }
    }
    return 0;
}
