// A codec whose messages are gathered (topk) over a schedule that has no sparse form (binary_tree): aggregate must
// refuse it at compile time, naming both types and the schedules that go with the codec.
#include <vector>

#include "hitch/allreduce/binary_tree.hpp"
#include "hitch/comm/local.hpp"
#include "hitch/compress/topk.hpp"
#include "hitch/exchange/aggregate.hpp"

int main() {
    hitch::comm::run_local(1, [](hitch::comm::local& c) {
        hitch::allreduce::group g(c);
        hitch::compress::topk codec;
        std::vector<float> bucket(16, 1.0f);
        auto state = hitch::compress::make_aggregation_state(codec, bucket.size());
        hitch::compress::aggregate(g, codec, state, hitch::tensor_view<float>(bucket), hitch::allreduce::binary_tree{});
    });
}
