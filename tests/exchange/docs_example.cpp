// The example of docs/compression.md, compiled and run (the text between the markers is quoted there).
#include <catch2/catch.hpp>

#include <vector>

#include "../compress/helpers.hpp"
#include "hitch/comm/local.hpp"

// [docs-begin]
#include "hitch/allreduce/allreduce.hpp"
#include "hitch/compress/error_feedback.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/exchange/aggregate.hpp"

// One bucket per data-parallel step; every rank runs this with its own gradients.
template <hitch::communicator C>
void exchange_gradients(C& comm, std::vector<float>& bucket, int steps) {
    hitch::allreduce::group group(comm);  // hitch's collectives on a private copy of comm
    const hitch::compress::error_feedback<hitch::compress::topk> codec(hitch::compress::topk({.density = 0.01}));
    auto state = hitch::compress::make_aggregation_state(codec, bucket.size());  // residual, workspace
    for (int step = 0; step < steps; ++step) {
        // ... backward pass writes this rank's gradients into bucket ...
        const auto stats = hitch::compress::aggregate(group, codec, state, hitch::view(bucket),
                                                      hitch::allreduce::automatic{}, {.average = true});
        // bucket now holds the mean over ranks of what every rank sent; stats.message_bytes is what this rank
        // put on the wire; state.codec.residual keeps what it did not send, for the next step.
        (void)stats;
    }
}
// [docs-end]

TEST_CASE("the documentation's example runs and sends what error feedback says", "[compress][docs]") {
    REQUIRE_NOTHROW(hitch::comm::run_local(3, [](hitch::comm::local& comm) {
        auto bucket = hitch_test::gradients(10000, static_cast<std::uint64_t>(comm.rank()));
        exchange_gradients(comm, bucket, 1);
        // Top-1% of each rank's gradient, averaged: at most 3 * 100 non-zeros.
        std::size_t nonzero = 0;
        for (float x : bucket) nonzero += x != 0.0f;
        if (nonzero == 0 || nonzero > 300) throw std::runtime_error("unexpected number of non-zeros");
    }));
}
