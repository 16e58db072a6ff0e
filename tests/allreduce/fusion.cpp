// The fusion buffer: tensors packed into buckets in the order they are added, each full bucket all-reduced without
// blocking, flush() for the last partial one, tensors larger than a bucket all-reduced alone, zero-size tensors,
// reuse across steps, and ranks that pack differently.
#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/local.hpp"
#include "reference.hpp"

using namespace hitch::allreduce;
using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::expect;

namespace {

float value(int rank, std::size_t tensor, std::size_t i) {
    return static_cast<float>(static_cast<int>((static_cast<std::size_t>(rank) * 131 + tensor * 17 + i) % 23) - 11);
}

/// How many calls greedy packing into buckets of `capacity` elements starts for these sizes: a tensor of
/// `capacity` or more goes alone; a tensor that does not fit closes the current bucket; a bucket closes when full.
std::size_t expected_calls(const std::vector<std::size_t>& sizes, std::size_t capacity) {
    std::size_t calls = 0, used = 0;
    for (std::size_t s : sizes) {
        if (s == 0) continue;
        if (s >= capacity) {
            ++calls;
            continue;
        }
        if (used + s > capacity) {
            ++calls;
            used = 0;
        }
        used += s;
        if (used == capacity) {
            ++calls;
            used = 0;
        }
    }
    return calls + (used > 0 ? 1 : 0);
}

/// One "backward pass": every rank adds the tensors in order, then waits; each tensor must hold the sum over ranks.
template <class Fusion>
void step(Fusion& fusion, int p, int rank, const std::vector<std::size_t>& sizes, int round,
          reduce_op op = reduce_op::sum) {
    std::vector<std::vector<float>> tensors(sizes.size());
    for (std::size_t t = 0; t < sizes.size(); ++t) {
        tensors[t].resize(sizes[t]);
        for (std::size_t i = 0; i < sizes[t]; ++i) tensors[t][i] = value(rank, t + static_cast<std::size_t>(round), i);
    }
    for (auto& t : tensors) fusion.add(hitch::view(t));
    expect(fusion.tensors_added() == sizes.size(), "tensors counted");
    fusion.wait();
    for (std::size_t t = 0; t < sizes.size(); ++t)
        for (std::size_t i = 0; i < sizes[t]; ++i) {
            float want = 0;
            for (int r = 0; r < p; ++r) want += value(r, t + static_cast<std::size_t>(round), i);
            if (op == reduce_op::average) want /= static_cast<float>(p);
            expect(tensors[t][i] == want, "tensor " + std::to_string(t) + " element " + std::to_string(i));
        }
}

}  // namespace

TEST_CASE("fusion: tensors come back in order with the reduced values, across buckets", "[allreduce][fusion]") {
    // bucket of 64 floats; sizes straddle bucket boundaries, fill one exactly, exceed it, and include zeros
    const std::vector<std::size_t> sizes{10, 30, 24, 0, 5, 64, 100, 1, 0, 63, 2, 200, 7, 0};
    for (int p : {1, 2, 3, 5})
        for (bool direct : {true, false}) {
            INFO("p = " << p << (direct ? " direct" : " messages"));
            REQUIRE_NOTHROW(run_local(p, [&](local& c) {
                group g(c);
                fusion_options o;
                o.bucket_bytes = 64 * sizeof(float);
                o.call.shared_memory = direct;
                fusion_buffer<local, float, ring> fusion(g, o);
                expect(fusion.bucket_capacity() == 64, "capacity in elements");
                for (int round = 0; round < 3; ++round) {  // buckets are reused from step to step
                    const std::uint64_t before = g.calls();
                    step(fusion, p, c.rank(), sizes, round);
                    expect(g.calls() - before == expected_calls(sizes, 64),
                           "calls per step: " + std::to_string(g.calls() - before));
                }
            }));
        }
}

TEST_CASE("fusion: a full bucket starts before wait(), flush() starts a partial one", "[allreduce][fusion]") {
    REQUIRE_NOTHROW(run_local(3, [](local& c) {
        group g(c);
        fusion_options o;
        o.bucket_bytes = 100 * sizeof(float);
        fusion_buffer<local, float, binary_tree> fusion(g, o);
        std::vector<float> a(60, 1.0f), b(40, 2.0f), d(30, 3.0f), e(5, 4.0f);
        fusion.add(hitch::view(a));
        expect(fusion.calls_started() == 0, "a partial bucket waits");
        fusion.add(hitch::view(b));  // fills the bucket exactly: it starts now
        expect(fusion.calls_started() == 1, "a full bucket starts at once");
        fusion.add(hitch::view(d));
        fusion.flush();
        expect(fusion.calls_started() == 2, "flush starts the partial bucket");
        fusion.flush();
        expect(fusion.calls_started() == 2, "a second flush has nothing to start");
        fusion.add(hitch::view(e));
        fusion.wait();
        for (float x : a) expect(x == 3.0f, "a");
        for (float x : b) expect(x == 6.0f, "b");
        for (float x : d) expect(x == 9.0f, "d");
        for (float x : e) expect(x == 12.0f, "e");
        expect(fusion.calls_started() == 0 && fusion.tensors_added() == 0, "wait() resets the step");
    }));
}

TEST_CASE("fusion: tensors larger than a bucket, zero-size tensors, average, the default 25 MiB bucket",
          "[allreduce][fusion]") {
    REQUIRE_NOTHROW(run_local(4, [](local& c) {
        group g(c);
        {
            fusion_options o;
            o.bucket_bytes = 1000;
            o.op = reduce_op::average;
            fusion_buffer<local, double> fusion(g, o);
            std::vector<double> big(5000, static_cast<double>(c.rank())), small(3, 1.0), none;
            fusion.add(hitch::view(none));
            fusion.add(hitch::view(small));
            fusion.add(hitch::view(big));  // alone, in place
            fusion.add(hitch::view(none));
            fusion.wait();
            for (double x : big) expect(x == 1.5, "large tensor averaged");
            for (double x : small) expect(x == 1.0, "small tensor averaged");
        }
        {
            fusion_buffer<local> fusion(g);  // defaults: 25 MiB buckets of float, sum, automatic
            expect(fusion.bucket_capacity() == (std::size_t{25} << 20) / sizeof(float), "default bucket");
            std::vector<std::vector<float>> layers;
            for (std::size_t k = 0; k < 20; ++k) layers.emplace_back(1000 * (k + 1), static_cast<float>(k));
            for (auto& l : layers) fusion.add(hitch::view(l));
            fusion.wait();
            for (std::size_t k = 0; k < layers.size(); ++k)
                for (float x : layers[k]) expect(x == 4.0f * static_cast<float>(k), "layer " + std::to_string(k));
        }
        {
            std::vector<float> only_zero;  // nothing but zero-size tensors: no traffic, no error
            fusion_buffer<local> fusion(g);
            const std::uint64_t before = g.calls();
            fusion.add(hitch::view(only_zero));
            fusion.wait();
            expect(g.calls() == before, "zero-size tensors start no call");
        }
    }));
}

TEST_CASE("fusion: ranks that pack different tensors get mismatch_error", "[allreduce][fusion][agreement]") {
    const auto messages = run_local(2, [](local& c) {
        group g(c);
        fusion_options o;
        o.bucket_bytes = 1 << 20;
        fusion_buffer<local> fusion(g, o);
        // the same 30 floats in total, split differently
        std::vector<float> a(c.rank() == 0 ? 10 : 20), b(c.rank() == 0 ? 20 : 10);
        fusion.add(hitch::view(a));
        fusion.add(hitch::view(b));
        try {
            fusion.wait();
        } catch (const hitch::mismatch_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    });
    for (const auto& m : messages) CHECK(m.find("fingerprint") != std::string::npos);
}

TEST_CASE("fusion: options are validated", "[allreduce][fusion]") {
    REQUIRE_NOTHROW(run_local(1, [](local& c) {
        group g(c);
        fusion_options o;
        o.bucket_bytes = 0;
        bool threw = false;
        try {
            fusion_buffer<local> fusion(g, o);
        } catch (const hitch::config_error& e) {
            threw = std::string(e.what()).find("bucket_bytes") != std::string::npos;
        }
        expect(threw, "bucket_bytes = 0 is a config_error naming the field");
    }));
}
