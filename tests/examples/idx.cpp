// The IDX reader and the MNIST-format loader: the real Fashion-MNIST files, and small crafted files, raw and gzip,
// intact and broken.
#include <catch2/catch.hpp>

#include <array>
#include <numeric>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/mnist.hpp"
#include "files.hpp"

namespace data = hitch_examples::data;
using Catch::Contains;
using hitch_test::bytes;

namespace {

bytes counting(std::size_t n) {
    bytes v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 3);
    return v;
}

}  // namespace

TEST_CASE("the Fashion-MNIST files of the dataset-fashion-mnist package", "[examples][data][idx]") {
    // Fashion-MNIST (Xiao et al. 2017): 60000 + 10000 28x28 images, 10 balanced classes, pixel mean 0.2860.
    const auto train = data::load_mnist(data::default_fashion_mnist_dir, data::split::train);
    const auto test = data::load_mnist(data::default_fashion_mnist_dir, data::split::test);
    CHECK(train.size() == 60000);
    CHECK(test.size() == 10000);
    for (const auto* d : {&train, &test}) {
        CHECK(d->height() == 28);
        CHECK(d->width() == 28);
        CHECK(d->channels() == 1);
        CHECK(d->images.shape(0) == d->size());
        std::array<std::size_t, 10> per_class{};
        for (std::uint8_t label : d->labels) {
            REQUIRE(label < 10);
            ++per_class[label];
        }
        for (std::size_t c = 0; c < 10; ++c) CHECK(per_class[c] == d->size() / 10);
    }
    const auto norm = data::normalization::of(train);
    CHECK(norm.mean[0] == Approx(0.2860).margin(5e-4));
    CHECK(norm.stddev[0] == Approx(0.3530).margin(5e-4));
}

TEST_CASE("read_idx reads raw and gzip files alike", "[examples][data][idx]") {
    hitch_test::scratch_dir dir;
    const auto values = counting(2 * 3 * 4);
    const auto file = hitch_test::idx_bytes({2, 3, 4}, values);
    hitch_test::write_file(dir / "a-idx3-ubyte", file);
    hitch_test::write_gzip(dir / "a-idx3-ubyte.gz", file);
    for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
        INFO(name);
        const auto got = data::read_idx(dir / name);
        CHECK(got.dims == std::vector<std::size_t>{2, 3, 4});
        CHECK(got.values == values);
    }
    // Big-endian dimensions above 255 and a one-dimensional file.
    const auto long_values = counting(70000);
    hitch_test::write_gzip(dir / "b.gz", hitch_test::idx_bytes({70000}, long_values));
    const auto b = data::read_idx(dir / "b.gz");
    CHECK(b.dims == std::vector<std::size_t>{70000});
    CHECK(b.values == long_values);
}

TEST_CASE("read_idx rejects broken files with an error naming the file", "[examples][data][idx]") {
    hitch_test::scratch_dir dir;
    const auto good = hitch_test::idx_bytes({4, 5, 6}, counting(120));
    const auto expect_error = [&](const std::string& name, const bytes& content, const std::string& what) {
        INFO(name);
        const auto path = dir / name;
        hitch_test::write_file(path, content);
        CHECK_THROWS_AS(data::read_idx(path), data::data_error);
        CHECK_THROWS_WITH(data::read_idx(path), Contains(path.string()) && Contains(what));
    };
    // The figures are the file's bytes: 16 of header (magic and three dimensions) and 4 x 5 x 6 of data.
    expect_error("truncated-data", bytes(good.begin(), good.end() - 5),
                 "truncated-data: truncated: 131 of 136 bytes, in the data of 4 x 5 x 6 bytes");
    expect_error("truncated-header", bytes(good.begin(), good.begin() + 6),
                 "truncated-header: truncated: 6 of at least 16 bytes, in the IDX header");
    expect_error("empty", bytes{}, "empty: truncated: 0 of at least 4 bytes, in the IDX header");
    bytes bad_magic = good;
    bad_magic[0] = 0x1f;
    expect_error("bad-magic", bad_magic, "bad-magic: not an IDX file (magic 0x1f000803;");
    bytes bad_type = good;
    bad_type[2] = 0x0D;  // float
    expect_error("bad-type", bad_type, "element type 13 is not supported");
    bytes no_dims = good;
    no_dims[3] = 0;
    expect_error("no-dims", no_dims, "dimension count 0");
    bytes trailing = good;
    trailing.push_back(1);
    trailing.push_back(2);
    expect_error("trailing", trailing, "2 unexpected bytes");
    // A header claiming ~2^64 values: rejected before anything is allocated.
    expect_error("huge", hitch_test::idx_bytes({0xffffffffu, 0xffffffffu, 0xffffffffu}, {}), "2^40");
    // A header claiming 10^9 values over a few bytes of data: truncated, not a gigabyte allocation.
    expect_error("short", hitch_test::idx_bytes({1000, 1000, 1000}, counting(10)), "truncated");
    CHECK_THROWS_WITH(data::read_idx(dir / "missing"), Contains("missing") && Contains("no such file"));
}

TEST_CASE("read_idx rejects truncated and corrupt gzip streams", "[examples][data][idx]") {
    hitch_test::scratch_dir dir;
    // Incompressible-looking data so the deflate stream is long enough to cut and damage.
    bytes values(5000);
    std::uint32_t state = 12345;
    for (auto& v : values) v = static_cast<std::uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
    hitch_test::write_gzip(dir / "good.gz", hitch_test::idx_bytes({50, 100}, values));
    const auto gz = hitch_test::read_file(dir / "good.gz");
    REQUIRE(gz.size() > 1000);

    // Half the stream: the figures are the bytes it still decompresses to, of the 12 + 50 x 100 the header says.
    const bytes half(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
    hitch_test::write_file(dir / "half.gz", half);
    const std::size_t present = hitch_test::inflated_size(half);
    REQUIRE(present > 8);
    REQUIRE(present < 5012);
    CHECK_THROWS_WITH(data::read_idx(dir / "half.gz"),
                      Contains((dir / "half.gz").string() + ": truncated: " + std::to_string(present) +
                               " of 5012 bytes (decompressed), in the data of 50 x 100 bytes"));

    // All the data but not the 8-byte trailer (CRC and length): the stream is incomplete.
    hitch_test::write_file(dir / "no-trailer.gz", bytes(gz.begin(), gz.end() - 8));
    CHECK_THROWS_WITH(
        data::read_idx(dir / "no-trailer.gz"),
        Contains("no-trailer.gz: truncated gzip stream: all 5012 data bytes are there, its 8-byte trailer is cut"));

    bytes flipped = gz;
    for (std::size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) flipped[i] ^= 0x5a;
    hitch_test::write_file(dir / "flipped.gz", flipped);
    CHECK_THROWS_WITH(data::read_idx(dir / "flipped.gz"), Contains("flipped.gz: damaged gzip stream ("));

    bytes bad_crc = gz;
    bad_crc[gz.size() - 6] ^= 0xff;  // inside the CRC-32 of the trailer
    hitch_test::write_file(dir / "bad-crc.gz", bad_crc);
    CHECK_THROWS_WITH(data::read_idx(dir / "bad-crc.gz"),
                      Contains("bad-crc.gz: damaged gzip stream (incorrect data check)"));
}

TEST_CASE("load_mnist pairs images with labels and checks them", "[examples][data][idx]") {
    hitch_test::scratch_dir dir;
    const auto images = counting(5 * 2 * 3);
    const bytes labels{3, 1, 4, 1, 5};
    hitch_test::write_gzip(dir / "t10k-images-idx3-ubyte.gz", hitch_test::idx_bytes({5, 2, 3}, images));
    hitch_test::write_file(dir / "t10k-labels-idx1-ubyte", hitch_test::idx_bytes({5}, labels));  // raw works too
    const auto d = data::load_mnist(dir.path(), data::split::test);
    CHECK(d.size() == 5);
    CHECK(d.height() == 2);
    CHECK(d.width() == 3);
    CHECK(d.channels() == 1);
    CHECK(bytes(d.images.begin(), d.images.end()) == images);
    CHECK(bytes(d.labels.begin(), d.labels.end()) == labels);

    CHECK_THROWS_WITH(data::load_mnist(dir.path(), data::split::train),
                      Contains("no train-images file") && Contains("train-images-idx3-ubyte.gz"));

    hitch_test::write_file(dir / "t10k-labels-idx1-ubyte", hitch_test::idx_bytes({4}, {3, 1, 4, 1}));
    CHECK_THROWS_WITH(data::load_mnist(dir.path(), data::split::test), Contains("5 images") && Contains("4 labels"));

    hitch_test::write_file(dir / "t10k-labels-idx1-ubyte", hitch_test::idx_bytes({5}, {3, 1, 10, 1, 5}));
    CHECK_THROWS_WITH(data::load_mnist(dir.path(), data::split::test),
                      Contains("t10k-labels-idx1-ubyte") && Contains("label 10 of sample 2"));

    hitch_test::write_file(dir / "t10k-labels-idx1-ubyte", hitch_test::idx_bytes({5, 1}, labels));
    CHECK_THROWS_WITH(data::load_mnist(dir.path(), data::split::test), Contains("expected 1 dimension"));
}
