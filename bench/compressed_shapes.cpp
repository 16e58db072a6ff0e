// hitch-bench-compressed-shapes: the three shapes of the compressed exchange for the ring codecs (the compression-
// aware ring, halving-doubling, hierarchical) on a simulated cluster (comm::simulated: real data, virtual time), so
// the figures do not depend on this machine's cores. Two networks: one switch (25 Gbit/s, 10 us per message) and
// nodes of 4 ranks (inside: 400 Gbit/s, 1 us; between nodes the same NICs as the switch). The hierarchical shape
// takes nodes of 4 consecutive ranks on both. Each run checks that every rank ends with the same bits.
//
//   hitch-bench-compressed-shapes [--json]
//
// Prints, per network, codec, p and bucket size, the virtual time of one exchange (agreement check off) and the
// bytes the busiest rank sent.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "hitch/comm/simulated.hpp"
#include "hitch/compress/onebit.hpp"
#include "hitch/compress/qsgd.hpp"
#include "hitch/core/error.hpp"
#include "hitch/exchange/compressed_halving_doubling.hpp"
#include "hitch/exchange/compressed_hierarchical.hpp"
#include "hitch/exchange/compressed_ring.hpp"

namespace hc = hitch::compress;

namespace {

constexpr int ranks_per_node = 4;
constexpr const char* shape_names[] = {"ring", "halving_doubling", "hierarchical"};

std::uint64_t checksum(const std::vector<float>& v) {
    std::uint64_t h = 1469598103934665603ull;
    for (float x : v) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &x, sizeof bits);
        h = (h ^ bits) * 1099511628211ull;
    }
    return h;
}

template <class Codec>
void run(bool json, const char* network, const hitch::comm::simulated_network& net, int p, std::size_t n,
         const Codec& codec) {
    for (int shape = 0; shape < 3; ++shape) {
        std::vector<std::size_t> sent(static_cast<std::size_t>(p));
        std::vector<std::uint64_t> sums(static_cast<std::size_t>(p));
        const auto report = hitch::comm::simulate(p, net, [&](hitch::comm::simulated& comm) {
            hitch::allreduce::group g(comm);
            std::vector<float> data(n);
            for (std::size_t i = 0; i < n; ++i)
                data[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(comm.rank())) % 13) - 6.0f;
            auto st = hc::make_aggregation_state(codec, n);
            hitch::node_layout nodes;
            for (int r = 0; r < p; ++r) nodes.node_of_rank.push_back(r / ranks_per_node);
            nodes.nodes = (p + ranks_per_node - 1) / ranks_per_node;
            hc::aggregate_options o;
            o.call.check = false;
            comm.advance_to(hitch::seconds_f(1.0));  // after the group's setup, on an idle network
            hc::aggregation_stats s;
            if (shape == 0) s = hc::aggregate_ring(g, codec, st, hitch::view(data), o);
            if (shape == 1) s = hc::aggregate_compressed_halving_doubling(g, codec, st, hitch::view(data), o);
            if (shape == 2) s = hc::aggregate_compressed_hierarchical(g, codec, st, hitch::view(data), nodes, o);
            sent[static_cast<std::size_t>(comm.rank())] = s.sent_bytes;
            sums[static_cast<std::size_t>(comm.rank())] = checksum(data);
            return 0;
        });
        if (auto e = report.first_error()) std::rethrow_exception(e);
        for (std::uint64_t s : sums)
            if (s != sums[0])
                throw hitch::error(std::string("hitch-bench-compressed-shapes: ") + shape_names[shape] +
                                   ": the ranks' results differ");
        double last = 0;
        for (const auto& r : report.ranks) last = std::max(last, r.finish_s);
        const double us = (last - 1.0) * 1e6;
        const std::size_t busiest = *std::max_element(sent.begin(), sent.end());
        if (json)
            std::printf(
                "{\"bench\":\"compressed_shapes\",\"network\":\"%s\",\"codec\":\"%s\",\"p\":%d,\"n\":%zu,"
                "\"shape\":\"%s\",\"virtual_us\":%.1f,\"busiest_sent_bytes\":%zu}\n",
                network, std::string(Codec::name).c_str(), p, n, shape_names[shape], us, busiest);
        else
            std::printf("%-10s %-7s p=%2d n=%8zu %-17s %9.1f us %9zu B\n", network, std::string(Codec::name).c_str(), p,
                        n, shape_names[shape], us, busiest);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const bool json = argc > 1 && std::string(argv[1]) == "--json";
    if (argc > 2 || (argc == 2 && !json)) {
        std::fprintf(stderr, "usage: hitch-bench-compressed-shapes [--json]\n");
        return 2;
    }
    try {
        const hitch::comm::link_model nic{10e-6, 25e9 / 8};
        const auto flat = hitch::comm::simulated_network::single_switch(nic);
        const auto nodes = hitch::comm::simulated_network::nodes(ranks_per_node, {1e-6, 400e9 / 8}, nic);
        if (!json)
            std::printf("network    codec   ranks  elements   shape             virtual time  busiest rank sent\n");
        for (int p : {8, 12, 16})
            for (std::size_t n : {std::size_t{1} << 16, std::size_t{1} << 22}) {
                run(json, "switch", flat, p, n, hc::onebit{});
                run(json, "4-per-node", nodes, p, n, hc::onebit{});
            }
        run(json, "switch", flat, 16, std::size_t{1} << 22, hc::qsgd{});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
