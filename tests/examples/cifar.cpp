// The CIFAR-10 binary reader, on small files written here in that format, and batch assembly of colour images.
#include <catch2/catch.hpp>

#include <cmath>

#include "data/cifar.hpp"
#include "data/dataset.hpp"
#include "files.hpp"

namespace data = hitch_examples::data;
using Catch::Contains;
using hitch_test::bytes;

namespace {

// Record r's pixel (channel c, row y, column x) gets a value that identifies all four.
std::uint8_t pixel(std::size_t r, std::size_t c, std::size_t y, std::size_t x) {
    return static_cast<std::uint8_t>(r * 17 + c * 85 + y * 3 + x * 5);
}

bytes records(std::size_t first, std::size_t count) {
    bytes out;
    for (std::size_t r = first; r < first + count; ++r) {
        out.push_back(static_cast<std::uint8_t>(r % 10));
        for (std::size_t c = 0; c < 3; ++c)  // planes: red, green, blue; rows in order
            for (std::size_t y = 0; y < 32; ++y)
                for (std::size_t x = 0; x < 32; ++x) out.push_back(pixel(r, c, y, x));
    }
    return out;
}

}  // namespace

TEST_CASE("CIFAR-10 records become 32x32x3 images with their labels", "[examples][data][cifar]") {
    hitch_test::scratch_dir dir;
    hitch_test::write_file(dir / "batch.bin", records(0, 3));
    const auto d = data::read_cifar10({dir / "batch.bin"}, "tiny");
    REQUIRE(d.size() == 3);
    CHECK(d.height() == 32);
    CHECK(d.width() == 32);
    CHECK(d.channels() == 3);
    std::size_t mismatches = 0;
    for (std::size_t r = 0; r < 3; ++r) {
        CHECK(d.labels[r] == r);
        for (std::size_t y = 0; y < 32; ++y)
            for (std::size_t x = 0; x < 32; ++x)
                for (std::size_t c = 0; c < 3; ++c) mismatches += d.images(r, y, x, c) != pixel(r, c, y, x);
    }
    CHECK(mismatches == 0);
}

TEST_CASE("load_cifar10 reads the five training files in order and the test file", "[examples][data][cifar]") {
    hitch_test::scratch_dir dir;
    for (std::size_t i = 1; i <= 5; ++i)
        hitch_test::write_file(dir / ("data_batch_" + std::to_string(i) + ".bin"), records(2 * (i - 1), 2));
    hitch_test::write_file(dir / "test_batch.bin", records(100, 3));
    const auto train = data::load_cifar10(dir.path(), data::split::train);
    const auto test = data::load_cifar10(dir.path(), data::split::test);
    REQUIRE(train.size() == 10);
    REQUIRE(test.size() == 3);
    for (std::size_t r = 0; r < 10; ++r) {
        CHECK(train.labels[r] == r % 10);
        CHECK(train.images(r, 7, 9, 2) == pixel(r, 2, 7, 9));
    }
    CHECK(test.images(2, 31, 0, 1) == pixel(102, 1, 31, 0));

    std::filesystem::remove(dir / "data_batch_3.bin");
    CHECK_THROWS_WITH(data::load_cifar10(dir.path(), data::split::train),
                      Contains("data_batch_3.bin") && Contains("no such file"));
}

TEST_CASE("the CIFAR-10 reader rejects truncated files and bad labels", "[examples][data][cifar]") {
    hitch_test::scratch_dir dir;
    auto content = records(0, 2);
    content.pop_back();
    hitch_test::write_file(dir / "short.bin", content);
    CHECK_THROWS_AS(data::read_cifar10({dir / "short.bin"}, "x"), data::data_error);
    CHECK_THROWS_WITH(data::read_cifar10({dir / "short.bin"}, "x"),
                      Contains("short.bin: truncated: 6145 of 6146 bytes (record 1 of the 3073-byte"));
    hitch_test::write_file(dir / "empty.bin", {});
    CHECK_THROWS_WITH(data::read_cifar10({dir / "empty.bin"}, "x"), Contains("empty.bin: the file is empty"));
    content = records(0, 2);
    content[data::cifar_record] = 11;  // record 1's label
    hitch_test::write_file(dir / "label.bin", content);
    CHECK_THROWS_WITH(data::read_cifar10({dir / "label.bin"}, "x"),
                      Contains("label.bin") && Contains("record 1 has label 11"));
}

TEST_CASE("per-channel normalisation and batch assembly of colour images", "[examples][data][cifar]") {
    hitch_test::scratch_dir dir;
    hitch_test::write_file(dir / "batch.bin", records(0, 4));
    const auto d = data::read_cifar10({dir / "batch.bin"}, "tiny");
    const auto norm = data::normalization::of(d);
    REQUIRE(norm.mean.size() == 3);
    for (std::size_t c = 0; c < 3; ++c) {  // the statistics, computed directly from the records
        double sum = 0, sum2 = 0;
        for (std::size_t r = 0; r < 4; ++r)
            for (std::size_t y = 0; y < 32; ++y)
                for (std::size_t x = 0; x < 32; ++x) {
                    const double v = pixel(r, c, y, x) / 255.0;
                    sum += v, sum2 += v * v;
                }
        const double n = 4 * 1024, mean = sum / n;
        CHECK(norm.mean[c] == Approx(mean).epsilon(1e-12));
        CHECK(norm.stddev[c] == Approx(std::sqrt(sum2 / n - mean * mean)).epsilon(1e-9));
    }
    data::batch_loader<float> loader(d, norm, 2);
    const std::vector<std::size_t> pick{3, 1};
    loader.load(pick);
    REQUIRE(loader.size() == 2);
    CHECK(loader.labels()[0] == 3);
    CHECK(loader.labels()[1] == 1);
    const auto x = loader.images();
    REQUIRE(x.size() == 2 * 3072);
    for (std::size_t c = 0; c < 3; ++c) {
        const double expected = (pixel(1, c, 4, 6) / 255.0 - norm.mean[c]) / norm.stddev[c];
        CHECK(x[3072 + (4 * 32 + 6) * 3 + c] == Approx(expected).margin(1e-5));  // float rounding
    }
    CHECK_THROWS_AS(loader.load(std::vector<std::size_t>{0, 1, 2}), std::invalid_argument);
    CHECK_THROWS_WITH(loader.load(std::vector<std::size_t>{4}), Contains("sample 4"));
    loader.load_range(2, 2);
    CHECK(loader.labels()[1] == 3);
    CHECK_THROWS_AS(loader.load_range(3, 2), std::out_of_range);
}
