// Checkpoint files: round trip, every corruption and truncation rejected, and a save killed half-way leaves the
// previous checkpoint intact.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../core/legacy_formats.hpp"
#include "hitch/train/checkpoint.hpp"

namespace fs = std::filesystem;
using hitch::train::checkpoint_reader;
using hitch::train::checkpoint_writer;

namespace {
std::vector<std::byte> bytes_of(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return {p, p + s.size()};
}
fs::path scratch(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / ("hitch-test-checkpoint-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}
}  // namespace

TEST_CASE("checkpoint sections round-trip through a file", "[train][checkpoint]") {
    checkpoint_writer w;
    w.add("params", bytes_of("0123456789"));
    w.add("empty", {});
    w.add_stream("optimizer", [](std::ostream& os) { os << "state of the optimizer"; });
    const fs::path path = scratch("round.ckpt");
    w.commit(path);
    const checkpoint_reader r(path);
    CHECK(r.names() == std::vector<std::string>{"empty", "optimizer", "params"});
    const auto p = r.section("params");
    CHECK(std::string(reinterpret_cast<const char*>(p.data()), p.size()) == "0123456789");
    CHECK(r.section("empty").empty());
    std::string text;
    auto s = r.stream("optimizer");
    std::getline(s, text);
    CHECK(text == "state of the optimizer");
    CHECK_THROWS_WITH(r.section("missing"), Catch::Contains("no section 'missing'"));
    CHECK_THROWS_AS(w.add("", {}), hitch::config_error);
    // No temporary files are left behind.
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path.parent_path())) ++files;
    CHECK(files == 1);
}

TEST_CASE("every flipped byte and every truncation of a checkpoint is rejected", "[train][checkpoint]") {
    checkpoint_writer w;
    w.add("a", bytes_of("alpha"));
    w.add("b", bytes_of("bravo bravo"));
    const std::vector<std::byte> good = w.serialize();
    REQUIRE_NOTHROW(checkpoint_reader(good, "good"));
    for (std::size_t i = 0; i < good.size(); ++i) {
        for (std::byte flip : {std::byte{0x01}, std::byte{0x80}, std::byte{0xff}}) {
            auto bad = good;
            bad[i] ^= flip;
            REQUIRE_THROWS_AS(checkpoint_reader(bad, "flipped"), hitch::corrupt_message_error);
        }
    }
    for (std::size_t n = 0; n < good.size(); ++n) {
        std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
        REQUIRE_THROWS_AS(checkpoint_reader(cut, "truncated"), hitch::corrupt_message_error);
    }
    auto longer = good;
    longer.push_back(std::byte{0});
    CHECK_THROWS_AS(checkpoint_reader(longer, "longer"), hitch::corrupt_message_error);
    CHECK_THROWS_WITH(checkpoint_reader(std::vector<std::byte>(64, std::byte{'x'}), "junk"),
                      Catch::Contains("junk: not a hitch checkpoint"));
}

TEST_CASE("a checkpoint cut to half its size is reported as truncated, with the sizes", "[train][checkpoint]") {
    checkpoint_writer w;
    w.add("params", std::vector<std::byte>(4000, std::byte{7}));
    w.add("optimizer", std::vector<std::byte>(999, std::byte{9}));
    const fs::path path = scratch("half.ckpt");
    w.commit(path);
    const auto size = fs::file_size(path);
    fs::resize_file(path, size / 2);
    const std::string want = "hitch::train::checkpoint: " + path.string() + ": truncated: " + std::to_string(size / 2) +
                             " of " + std::to_string(size) + " bytes";
    CHECK_THROWS_WITH(checkpoint_reader(path), want);
    CHECK_THROWS_AS(checkpoint_reader(path), hitch::corrupt_message_error);

    // Damage is told apart from truncation.
    auto bytes = w.serialize();
    bytes[bytes.size() / 2] ^= std::byte{1};
    CHECK_THROWS_WITH(checkpoint_reader(bytes, "damaged"),
                      Catch::Contains("damaged: corrupt (checksum)") &&
                          Catch::Contains("the " + std::to_string(bytes.size()) + " bytes give"));
    auto newer = w.serialize();
    newer[8] = std::byte{3};
    CHECK_THROWS_WITH(checkpoint_reader(newer, "newer"),
                      Catch::Contains("newer: written by a newer hitch (format 3, this build reads 1-2)"));
}

TEST_CASE("a checkpoint of format version 1, written by the first release, still reads", "[train][checkpoint]") {
    const auto* p = reinterpret_cast<const std::byte*>(hitch_test::legacy::hitchckp_v1);
    const std::vector<std::byte> old(p, p + sizeof hitch_test::legacy::hitchckp_v1);
    const checkpoint_reader r(old, "old");
    CHECK(r.names() == std::vector<std::string>{"a", "b", "empty"});
    const auto b = r.section("b");
    CHECK(std::string(reinterpret_cast<const char*>(b.data()), b.size()) == "bravo bravo");
    CHECK(r.section("empty").empty());
    for (std::size_t n = 0; n < old.size(); ++n)
        REQUIRE_THROWS_AS(
            checkpoint_reader(std::vector<std::byte>(old.begin(), old.begin() + static_cast<std::ptrdiff_t>(n)), "cut"),
            hitch::corrupt_message_error);
    // Written again, it is version 2 with the same sections.
    checkpoint_writer w;
    for (const auto& name : r.names()) {
        const auto s = r.section(name);
        w.add(name, std::vector<std::byte>(s.begin(), s.end()));
    }
    const auto again = w.serialize();
    CHECK(hitch::load_le<std::uint32_t>(again.data() + 8) == hitch::train::checkpoint_version);
    CHECK(checkpoint_reader(again, "again").names() == r.names());
}

TEST_CASE("a save killed half-way leaves the previous checkpoint intact", "[train][checkpoint]") {
    const fs::path path = scratch("crash.ckpt");
    checkpoint_writer old_one;
    old_one.add("generation", bytes_of("old"));
    old_one.commit(path);

    int saw_new = 0;
    for (int delay_ms : {0, 5, 50, 200, 400, 800, 3000}) {
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            checkpoint_writer big;
            big.add("generation", bytes_of("new"));
            big.add("payload", std::vector<std::byte>(std::size_t{256} << 20, std::byte{7}));
            big.commit(path);
            ::_exit(0);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
        // Whatever moment the kill hit, the file at `path` is a complete checkpoint: the old one, or (if the child
        // got as far as the rename) the new one.
        const checkpoint_reader r(path);
        const auto g = r.section("generation");
        const std::string generation(reinterpret_cast<const char*>(g.data()), g.size());
        CHECK((generation == "old" || generation == "new"));
        if (generation == "new") {
            ++saw_new;
            CHECK(r.section("payload").size() == (std::size_t{256} << 20));
        }
        old_one.commit(path);  // reset for the next round
    }
    WARN("saves that completed before the kill: " << saw_new << " of 7");
    fs::remove_all(path.parent_path());
}
