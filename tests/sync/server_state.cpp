// The parameter server's state: bad requests are refused and change nothing; compressed pushes with each worker's
// own error feedback; models of every floating element type; exact resume of soft sync and SSP from a checkpoint.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "../comm/suite.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/none.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"
#include "hitch/sync/async.hpp"
#include "hitch/sync/hard.hpp"
#include "hitch/sync/server/runtime.hpp"
#include "hitch/sync/soft.hpp"
#include "hitch/sync/ssp.hpp"
#include "hitch/train/data_parallel.hpp"
#include "model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;
using hitch_test::quad_model;
namespace ps = hitch::sync::detail;

namespace {

const std::vector<std::size_t> sizes{5, 300, 1, 77};

/// Sends one raw request to the server on rank `server` and returns its reply's status and text.
std::pair<ps::reply_status, std::string> raw_request(local& comm, int server, const ps::request_header& h,
                                                     std::span<const std::byte> payload, bool damage = false) {
    std::vector<std::byte> out;
    ps::encode_request(out, h, payload);
    if (damage) out[out.size() / 2] ^= std::byte{0x40};
    comm.isend(std::span<const std::byte>(out), server, ps::request_tag).wait();
    const auto info = comm.probe(server, ps::reply_tag);
    std::vector<std::byte> in(info.bytes);
    comm.irecv(std::span<std::byte>(in), server, ps::reply_tag).wait();
    const auto a = ps::decode_reply(in, "test");
    return {a.header.status, std::string(reinterpret_cast<const char*>(a.payload.data()), a.payload.size())};
}

std::filesystem::path scratch(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("hitch-test-sync-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir / name;
}

}  // namespace

TEST_CASE("a bad push is an error for its worker; the server keeps running and its state is untouched",
          "[sync][server][errors]") {
    // Rank 0 is the only worker, rank 1 the server of the single shard.
    run_local(2, [&](local& comm) {
        quad_model m(sizes, 0);
        const auto layers = m.layers();
        const hitch::sync::shard_plan plan(sizes, 1, hitch::sync::shard_by::layer);
        hitch::cpu dev;
        hitch::sync::server_rule rule;
        if (comm.rank() == 1) {
            ps::server_loop<hitch::optim::sgd, hitch::compress::none, local, hitch::cpu> loop(
                comm,
                ps::server_shard<hitch::optim::sgd, hitch::compress::none, hitch::cpu>({}, {}, dev, layers, plan, 0, 1,
                                                                                       rule, {}),
                1, false);
            loop.run();
            expect(loop.shard().version() == 1, "exactly the one good push was applied");
            return;
        }
        const std::size_t n = plan.elements(0);
        const hitch::compress::none codec;
        auto state = codec.make_state(n + 1);
        std::vector<float> too_long(n + 1, 1.0f);
        std::vector<std::byte> message;
        codec.encode(hitch::tensor_view<const float>(too_long.data(), too_long.size()), state, message);
        ps::request_header h{ps::push_gradient | ps::pull, 0, 0, 0, 1, 0.5, n + 1};
        auto [status, text] = raw_request(comm, 1, h, message);
        expect(status == ps::reply_status::mismatch, "wrong size: mismatch");
        expect(text.find("pushed " + std::to_string(n + 1) + " elements; the shard holds " + std::to_string(n)) !=
                   std::string::npos,
               "wrong size named: " + text);
        h.shard = 7;
        std::tie(status, text) = raw_request(comm, 1, h, message);
        expect(status == ps::reply_status::config && text.find("shard 7") != std::string::npos,
               "unknown shard: " + text);
        h.shard = 0;
        std::tie(status, text) = raw_request(comm, 1, h, message, /*damage=*/true);
        expect(status == ps::reply_status::corrupt, "damaged frame: corrupt: " + text);
        std::vector<std::byte> garbage(message.size() - 4, std::byte{0x5a});
        h.elements = n;
        std::tie(status, text) = raw_request(comm, 1, h, garbage);
        expect(status == ps::reply_status::corrupt, "a codec message that is not one: corrupt: " + text);
        // A good push through the client: the server's parameters are the initial ones stepped once.
        ps::server_client<hitch::compress::none, local> client(comm, codec, plan, {1}, 0, layers, rule);
        m.gradients(0);
        const auto before = m.flat();
        std::vector<float> g;
        for (const auto& l : m.g) g.insert(g.end(), l.begin(), l.end());
        const auto reply = client.exchange({true, false, true}, 0.5);
        expect(reply.pulled && reply.staleness == 0, "pulled, fresh");
        const auto after = m.flat();
        for (std::size_t i = 0; i < after.size(); ++i)
            expect(after[i] == before[i] - 0.5f * g[i], "element " + std::to_string(i) + " stepped once");
        client.marker(ps::done);
    });
}

TEST_CASE("compressed pushes keep each worker's error feedback and still converge", "[sync][server][compress]") {
    using X = hitch::compress::error_feedback<hitch::compress::topk>;
    using dp_t = hitch::data_parallel<hitch::optim::sgd, X, hitch::sync::async>;
    for (int p : {1, 2}) {
        CAPTURE(p);
        std::vector<std::vector<float>> got(static_cast<std::size_t>(p));
        run_local(p, [&](local& comm) {
            quad_model m(sizes, comm.rank());
            hitch::cpu dev;
            dp_t::options o;
            o.learning_rate = hitch::lr::constant({0.2});
            o.compressor = X(hitch::compress::topk({.density = 0.1}));
            o.sync.server.deterministic = true;
            dp_t dp(comm, dev, m.layers(), o);
            for (int t = 0; t < 600; ++t) {
                for (std::size_t k = 0; k < m.w.size(); ++k)  // the tilt-free gradient: a fixed optimum
                    for (std::size_t i = 0; i < m.w[k].size(); ++i) m.g[k][i] = 0.5f * (m.w[k][i] - m.target(k, i));
                dp.step();
            }
            dp.finish();
            got[static_cast<std::size_t>(comm.rank())] = m.flat();
        });
        // One worker: its own optimum exactly (a residual left unsent would stop short of it). Two workers that
        // apply in turn, each a step towards its own target: between the two targets (a coordinate a worker's
        // error feedback lost or doubled would leave that interval).
        std::vector<quad_model> ms;
        for (int r = 0; r < p; ++r) ms.emplace_back(sizes, r);
        std::size_t at = 0;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i, ++at) {
                float lo = ms[0].target(k, i), hi = lo;
                for (const auto& q : ms) {
                    lo = std::min(lo, q.target(k, i));
                    hi = std::max(hi, q.target(k, i));
                }
                const float tol = 1e-3f;
                if (got[0][at] < lo - tol || got[0][at] > hi + tol)
                    FAIL("element " << at << ": " << got[0][at] << " outside [" << lo << ", " << hi << "]");
            }
    }
}

TEST_CASE("models of every floating element type push and pull through the server", "[sync][server][amp]") {
    auto run = [](auto low) {
        using Low = decltype(low);
        std::vector<std::vector<float>> out(2);
        run_local(2, [&](local& comm) {
            std::vector<std::vector<Low>> w, g;
            std::vector<hitch::amp::low_precision_layer<Low>> layers;
            for (std::size_t k = 0; k < sizes.size(); ++k) {
                w.emplace_back(sizes[k], Low(0.5f));
                g.emplace_back(sizes[k]);
            }
            for (std::size_t k = 0; k < sizes.size(); ++k)
                layers.push_back({"l" + std::to_string(k), hitch::view(w[k]), hitch::view(g[k])});
            hitch::cpu dev;
            hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::soft>::options o;
            o.learning_rate = hitch::lr::constant({0.25});
            o.sync.gradients_per_update = 0;
            o.sync.scale_by_staleness = false;
            o.sync.server.deterministic = true;
            hitch::data_parallel<hitch::optim::sgd, hitch::compress::none, hitch::sync::soft> dp(comm, dev,
                                                                                                 std::move(layers), o);
            for (int s = 0; s < 3; ++s) {
                for (std::size_t k = 0; k < sizes.size(); ++k)
                    for (std::size_t i = 0; i < sizes[k]; ++i)
                        g[k][i] = Low(static_cast<float>((i + static_cast<std::size_t>(comm.rank() + s)) % 4) * 0.25f);
                dp.step();
            }
            dp.finish();
            for (const auto& l : w)
                for (Low v : l) out[static_cast<std::size_t>(comm.rank())].push_back(static_cast<float>(v));
        });
        // Serial reference in FP32 (exact: multiples of 1/32), rounded to Low at the end.
        std::size_t at = 0;
        for (std::size_t k = 0; k < sizes.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i, ++at) {
                float x = 0.5f;
                for (int s = 0; s < 3; ++s) {
                    float mean = 0;
                    for (int r = 0; r < 2; ++r)
                        mean += static_cast<float>((i + static_cast<std::size_t>(r + s)) % 4) * 0.25f;
                    x -= 0.25f * (mean / 2);
                }
                for (int r = 0; r < 2; ++r) REQUIRE(out[static_cast<std::size_t>(r)][at] == static_cast<float>(Low(x)));
            }
    };
    run(hitch::half(0.0f));
    run(hitch::bfloat16(0.0f));
}

namespace {

/// Trains `steps` steps, or `first` steps then saves, and in a fresh world loads and trains the rest. Returns every
/// rank's final parameters.
template <class P>
std::vector<std::vector<float>> resume_run(int ranks, const typename P::options_type& sync, int first, int steps,
                                           const std::filesystem::path& prefix) {
    using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::none, P>;
    auto options = [&] {
        typename dp_t::options o;
        o.learning_rate = hitch::lr::constant({0.05});
        o.sync = sync;
        return o;
    };
    std::vector<std::vector<float>> out(static_cast<std::size_t>(ranks));
    run_local(ranks, [&](local& comm) {
        quad_model m(sizes, comm.rank());
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers(), options());
        for (int t = 0; t < first; ++t) {
            m.gradients(t);
            dp.step();
        }
        if (first < steps) dp.save(prefix);
        dp.finish();
        out[static_cast<std::size_t>(comm.rank())] = m.flat();
    });
    if (first == steps) return out;
    run_local(ranks, [&](local& comm) {
        quad_model m(sizes, comm.rank());
        for (auto& l : m.w)
            for (float& x : l) x = 99.0f;  // whatever the model holds is replaced by the checkpoint
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers(), options());
        dp.load(prefix);
        for (int t = first; t < steps; ++t) {
            m.gradients(t);
            dp.step();
        }
        dp.finish();
        out[static_cast<std::size_t>(comm.rank())] = m.flat();
    });
    return out;
}

}  // namespace

TEST_CASE("soft sync and SSP in deterministic order resume exactly from a checkpoint", "[sync][server][resume]") {
    SECTION("soft, c = 2 of 4 workers, staleness scaling") {
        hitch::sync::soft::options_type o;
        o.gradients_per_update = 2;
        o.server.deterministic = true;
        const auto whole = resume_run<hitch::sync::soft>(4, o, 12, 12, scratch("soft"));
        REQUIRE(resume_run<hitch::sync::soft>(4, o, 5, 12, scratch("soft")) == whole);
    }
    SECTION("ssp, s = 1 of 3 workers, shards by range") {
        hitch::sync::ssp::options_type o;
        o.staleness_bound = 1;
        o.server.deterministic = true;
        o.server.sharding = hitch::sync::shard_by::range;
        const auto whole = resume_run<hitch::sync::ssp>(3, o, 10, 10, scratch("ssp"));
        REQUIRE(resume_run<hitch::sync::ssp>(3, o, 4, 10, scratch("ssp")) == whole);
    }
    SECTION("a missing shard file changes nothing anywhere") {
        hitch::sync::soft::options_type o;
        o.server.deterministic = true;
        const auto prefix = scratch("partial");
        (void)resume_run<hitch::sync::soft>(2, o, 3, 3, prefix);
        run_local(2, [&](local& comm) {
            quad_model m(sizes, comm.rank());
            hitch::cpu dev;
            using dp_t = hitch::data_parallel<hitch::optim::momentum, hitch::compress::none, hitch::sync::soft>;
            dp_t::options opts;
            opts.sync = o;
            dp_t dp(comm, dev, m.layers(), opts);
            m.gradients(0);
            dp.step();
            dp.save(prefix);
            comm.barrier();
            if (comm.rank() == 0) std::filesystem::remove(ps::shard_file(prefix.string(), 1));
            comm.barrier();
            const auto before = m.flat();
            const auto hash = dp.parameter_hash();
            bool threw = false;
            try {
                dp.load(prefix);
            } catch (const hitch::error& e) {
                threw = true;
                expect(comm.rank() != 0 || std::string(e.what()).find("shard1") != std::string::npos ||
                           std::string(e.what()).find("abandoned") != std::string::npos,
                       std::string("names the missing file: ") + e.what());
            }
            expect(threw, "the load failed on every rank");
            expect(m.flat() == before && dp.parameter_hash() == hash, "nothing changed");
            m.gradients(1);
            dp.step();  // and training goes on
            dp.finish();
        });
    }
}
