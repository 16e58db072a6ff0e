// libFuzzer harness of the parameter server's state loaders (sync/server/): a shard's state (parameters, optimizer
// state, version, every worker's clock, the accumulator, the staleness histogram: server_shard::load) and a
// worker's client state (versions, pushes, accumulated gradients and per-shard codec states: server_client::load),
// as a checkpoint carries them. First byte: bit 0 the loader (0 shard, 1 client), bit 1 the configuration (shard:
// adam or momentum; client: compress::none or error_feedback<topk>), bit 7 reseal the outer frame so the fuzzer
// reaches the fields behind its checksum. Neither needs a server running: a shard is built alone, a client over a
// one-rank comm::local it never sends on. Any input must load or throw corrupt_message_error, mismatch_error or
// config_error, leaving the shard or client as it was.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/device/cpu.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/sync/server/client.hpp"
#include "hitch/sync/server/shard.hpp"
#include "model.hpp"

namespace {

namespace hs = hitch::sync;
namespace hsd = hitch::sync::detail;
using hitch_fuzz::expect_documented;

volatile double sink = 0;

const hs::shard_plan& plan() {
    static const std::size_t sizes[] = {6, 2};
    static const hs::shard_plan p(sizes, 2, hs::shard_by::range);
    return p;
}

template <class O>
void load_shard(std::span<const std::byte> blob) {
    hitch_fuzz::model m;
    hitch::cpu dev;
    hsd::server_shard<O, hitch::compress::none, hitch::cpu> shard(typename O::options_type{}, {}, dev, m.layers, plan(),
                                                                  1, 3, hs::server_rule{}, {});
    expect_documented([&] { shard.load(blob, "fuzz"); });
    for (const float x : shard.parameters()) sink = sink + x;
    sink = sink + static_cast<double>(shard.version() + shard.clock(2) + shard.live_workers());
}

template <class X>
void load_client(std::span<const std::byte> blob) {
    hitch_fuzz::model m;
    hitch::comm::local_world world(1);
    hitch::comm::local comm = world.communicator(0);
    hsd::server_client<X, hitch::comm::local> client(comm, X{}, plan(), {0, 0}, 1, m.layers, hs::server_rule{});
    expect_documented([&] { client.load(blob, "fuzz", false); });
    expect_documented([&] { client.load(blob, "fuzz"); });
    sink = sink + static_cast<double>(client.pushes() + client.version(0) + client.version(1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const unsigned mode = data[0];
    std::vector<std::byte> blob = hitch_fuzz::bytes_of(data + 1, size - 1);
    if ((mode & 0x80) != 0) hitch_fuzz::reseal_frame(blob);
    const bool second = (mode & 2) != 0;
    if ((mode & 1) == 0) {
        if (second)
            load_shard<hitch::optim::momentum>(blob);
        else
            load_shard<hitch::optim::adam>(blob);
    } else {
        if (second)
            load_client<hitch::compress::error_feedback<hitch::compress::topk>>(blob);
        else
            load_client<hitch::compress::none>(blob);
    }
    return 0;
}
