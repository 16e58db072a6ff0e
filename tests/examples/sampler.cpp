// The sharded sampler (disjoint shards of one permutation per epoch, exact resume) and the synthetic data set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/sampler.hpp"
#include "data/synthetic.hpp"

namespace data = hitch_examples::data;

namespace {

std::vector<std::size_t> drain_epoch(data::sharded_sampler& s, std::size_t batch) {
    std::vector<std::size_t> out;
    for (auto b = s.next(batch); !b.empty(); b = s.next(batch)) {
        CHECK(b.size() <= batch);
        out.insert(out.end(), b.begin(), b.end());
    }
    CHECK(s.epoch_done());
    return out;
}

}  // namespace

TEST_CASE("ranks see disjoint equal shards of one permutation per epoch", "[examples][data][sampler]") {
    for (std::size_t n : {7, 10, 1003, 60000})
        for (int p = 1; p <= 4; ++p) {
            if (n < static_cast<std::size_t>(p)) continue;
            std::vector<data::sharded_sampler> ranks;
            for (int r = 0; r < p; ++r) ranks.emplace_back(n, r, p, 2024);
            std::vector<std::size_t> previous_permutation;
            for (int epoch = 0; epoch < 3; ++epoch) {
                INFO("n " << n << ", ranks " << p << ", epoch " << epoch);
                const auto permutation =
                    std::vector<std::size_t>(ranks[0].epoch_permutation().begin(), ranks[0].epoch_permutation().end());
                auto sorted = permutation;
                std::sort(sorted.begin(), sorted.end());
                std::vector<std::size_t> identity(n);
                std::iota(identity.begin(), identity.end(), std::size_t{0});
                CHECK(sorted == identity);
                CHECK(permutation != previous_permutation);  // a new order every epoch
                previous_permutation = permutation;
                const std::size_t m = n / static_cast<std::size_t>(p);
                std::set<std::size_t> seen;
                for (int r = 0; r < p; ++r) {
                    auto& s = ranks[static_cast<std::size_t>(r)];
                    CHECK(std::equal(s.epoch_permutation().begin(), s.epoch_permutation().end(), permutation.begin()));
                    CHECK(s.batches_per_epoch(7) == (m + 6) / 7);
                    const auto mine = drain_epoch(s, 7);
                    REQUIRE(mine.size() == m);
                    CHECK(std::equal(mine.begin(), mine.end(), permutation.begin() + static_cast<long>(r * m)));
                    seen.insert(mine.begin(), mine.end());
                    s.next_epoch();
                }
                CHECK(seen.size() == p * m);  // disjoint: no index twice across ranks
            }
        }
}

TEST_CASE("the permutation depends on the seed and the epoch only", "[examples][data][sampler]") {
    data::sharded_sampler a(500, 0, 1, 1), b(500, 0, 1, 1), c(500, 0, 1, 2);
    CHECK(drain_epoch(a, 64) == drain_epoch(b, 64));
    c.seek({0, 0});
    const auto first_c = drain_epoch(c, 64);
    a.seek({0, 0});
    CHECK(drain_epoch(a, 64) != first_c);
    // Not the identity, and not the same order in epoch 1 as in epoch 0.
    a.seek({0, 0});
    const auto e0 = drain_epoch(a, 500);
    a.next_epoch();
    const auto e1 = drain_epoch(a, 500);
    std::vector<std::size_t> identity(500);
    std::iota(identity.begin(), identity.end(), std::size_t{0});
    CHECK(e0 != identity);
    CHECK(e0 != e1);
}

TEST_CASE("saving the position and seeking back resumes the exact batch sequence", "[examples][data][sampler]") {
    const std::size_t n = 1003, batch = 32;
    data::sharded_sampler original(n, 1, 3, 77);
    std::vector<std::vector<std::size_t>> batches;
    data::sharded_sampler::position saved;
    for (int step = 0; step < 40; ++step) {  // about 3 epochs of 11 batches
        if (original.epoch_done()) original.next_epoch();
        if (step == 17) saved = original.tell();
        const auto b = original.next(batch);
        batches.emplace_back(b.begin(), b.end());
    }
    CHECK(saved.epoch == 1);
    CHECK(saved.index == 6 * batch);

    data::sharded_sampler resumed(n, 1, 3, 77);  // a new process: only the saved position carries over
    resumed.seek(saved);
    CHECK(resumed.tell() == saved);
    for (int step = 17; step < 40; ++step) {
        if (resumed.epoch_done()) resumed.next_epoch();
        const auto b = resumed.next(batch);
        CHECK(std::vector<std::size_t>(b.begin(), b.end()) == batches[static_cast<std::size_t>(step)]);
    }
    CHECK(resumed.tell() == original.tell());

    resumed.seek({0, 0});  // back to an earlier epoch: the permutation is rebuilt
    const auto b = resumed.next(batch);
    CHECK(std::vector<std::size_t>(b.begin(), b.end()) == batches[0]);

    CHECK_THROWS_AS(resumed.seek({0, n}), std::out_of_range);
    CHECK_THROWS_AS(data::sharded_sampler(n, 3, 3, 1), std::invalid_argument);
    CHECK_THROWS_AS(data::sharded_sampler(2, 0, 3, 1), std::invalid_argument);
    CHECK_THROWS_AS(resumed.next(0), std::invalid_argument);
}

TEST_CASE("synthetic data: seeded, labelled within range, learnable by prototype", "[examples][data]") {
    const auto a = data::make_synthetic(600, 4, 4, 3, 5, 9), b = data::make_synthetic(600, 4, 4, 3, 5, 9);
    CHECK(a.images == b.images);
    CHECK(a.labels == b.labels);
    CHECK(a.images != data::make_synthetic(600, 4, 4, 3, 5, 10).images);
    const auto other_stream = data::make_synthetic(600, 4, 4, 3, 5, 9, 1);  // same prototypes, other samples
    CHECK(other_stream.images != a.images);
    CHECK(a.size() == 600);
    CHECK(a.channels() == 3);
    std::vector<std::size_t> count(5);
    for (auto l : a.labels) {
        REQUIRE(l < 5);
        ++count[l];
    }
    for (std::size_t c : count) CHECK(c > 60);
    // Nearest class mean (from the first half) classifies the rest well above chance (20%).
    std::vector<std::vector<double>> mean(5, std::vector<double>(48, 0.0));
    std::vector<double> members(5, 0.0);
    for (std::size_t s = 0; s < 300; ++s) {
        members[a.labels[s]] += 1;
        for (std::size_t i = 0; i < 48; ++i) mean[a.labels[s]][i] += a.images.data()[s * 48 + i];
    }
    for (std::size_t c = 0; c < 5; ++c)
        for (double& v : mean[c]) v /= members[c];
    const auto correct = [&](const data::dataset& d, std::size_t first) {
        std::size_t right = 0;
        for (std::size_t s = first; s < d.size(); ++s) {
            std::size_t best = 0;
            double best_d = 1e300;
            for (std::size_t c = 0; c < 5; ++c) {
                double dist = 0;
                for (std::size_t i = 0; i < 48; ++i) dist += std::pow(d.images.data()[s * 48 + i] - mean[c][i], 2);
                if (dist < best_d) best_d = dist, best = c;
            }
            right += best == d.labels[s];
        }
        return right;
    };
    CHECK(correct(a, 300) > 270);
    CHECK(correct(other_stream, 0) > 540);  // a test set from another stream shares the classes
    CHECK_THROWS_AS(data::make_synthetic(10, 4, 4, 3, 1, 9), std::invalid_argument);
}
