// Checkpoints across ranks: files of two different saves side by side (a job killed between two ranks' saves),
// a rank whose file is missing, and the temporary files a killed save leaves. Every rank must refuse the load,
// naming the ranks and what each holds, with nothing changed on any rank; a consistent set loads.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hitch/comm/local.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/train/data_parallel.hpp"
#include "toy_model.hpp"

using hitch::comm::local;
using hitch::comm::run_local;
using hitch_test::toy_model;

namespace {

std::filesystem::path fresh_dir(const char* name) {
    const auto dir = std::filesystem::temp_directory_path() /
                     (std::string("hitch-test-ckpt-") + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

using dp_t = hitch::data_parallel<hitch::optim::momentum>;

struct outcome {
    std::string message;  // what load() threw ("" when it loaded)
    bool unchanged = false;
};

/// Tries dp.load(prefix): what it threw, and whether the parameters were left as they were.
outcome try_load(dp_t& dp, const std::filesystem::path& prefix) {
    const auto before = dp.parameter_hash();
    outcome o;
    try {
        dp.load(prefix);
    } catch (const hitch::error& e) {
        o.message = e.what();
    }
    o.unchanged = dp.parameter_hash() == before;
    return o;
}

void step(toy_model& m, dp_t& dp, int rank, std::uint64_t s) {
    m.fill_grads(rank, s);
    dp.step();
}

}  // namespace

TEST_CASE("checkpoint: files of two saves are refused on every rank, naming the ranks, and nothing changes",
          "[train][data_parallel][checkpoint][faults]") {
    const auto dir = fresh_dir("mixed");
    const auto results = run_local(3, [&](local& comm) {
        toy_model m({40, 8});
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers());
        step(m, dp, comm.rank(), 0);
        step(m, dp, comm.rank(), 1);
        dp.save(dir / "ckpt");  // step 2
        if (comm.rank() == 1) std::filesystem::copy_file(dp.checkpoint_path(dir / "ckpt"), dir / "rank1-at-2");
        step(m, dp, comm.rank(), 2);
        dp.save(dir / "ckpt");  // step 3; then rank 1's file goes back to step 2, as if its save never happened
        comm.barrier();
        if (comm.rank() == 1)
            std::filesystem::copy_file(dir / "rank1-at-2", dp.checkpoint_path(dir / "ckpt"),
                                       std::filesystem::copy_options::overwrite_existing);
        comm.barrier();
        step(m, dp, comm.rank(), 3);
        std::vector<outcome> out;
        out.push_back(try_load(dp, dir / "ckpt"));
        // Two saves at the same step (4): the generations tell them apart.
        dp.save(dir / "twice");
        if (comm.rank() == 0) std::filesystem::copy_file(dp.checkpoint_path(dir / "twice"), dir / "rank0-first");
        dp.save(dir / "twice");
        comm.barrier();
        if (comm.rank() == 0)
            std::filesystem::copy_file(dir / "rank0-first", dp.checkpoint_path(dir / "twice"),
                                       std::filesystem::copy_options::overwrite_existing);
        comm.barrier();
        step(m, dp, comm.rank(), 4);
        out.push_back(try_load(dp, dir / "twice"));
        return out;
    });
    for (int r = 0; r < 3; ++r) {
        const outcome& mixed = results[static_cast<std::size_t>(r)][0];
        INFO("rank " << r << ": " << mixed.message);
        CHECK(mixed.unchanged);
        CHECK(mixed.message.find("the ranks' files are from different saves") != std::string::npos);
        CHECK(mixed.message.find("ranks 0, 2: step 3 (save ") != std::string::npos);
        CHECK(mixed.message.find("rank 1: step 2 (save ") != std::string::npos);
        CHECK(mixed.message.find("nothing was loaded on any rank") != std::string::npos);
        const outcome& twice = results[static_cast<std::size_t>(r)][1];
        INFO("rank " << r << ": " << twice.message);
        CHECK(twice.unchanged);
        CHECK(twice.message.find("rank 0: step 4 (save ") != std::string::npos);
        CHECK(twice.message.find("ranks 1, 2: step 4 (save ") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: a rank without its file fails the load on every rank; a consistent set loads",
          "[train][data_parallel][checkpoint][faults]") {
    const auto dir = fresh_dir("missing");
    const auto results = run_local(3, [&](local& comm) {
        toy_model m({40, 8});
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers());
        step(m, dp, comm.rank(), 0);
        dp.save(dir / "ckpt");
        const auto saved = dp.parameter_hash();
        comm.barrier();
        if (comm.rank() == 2) std::filesystem::rename(dp.checkpoint_path(dir / "ckpt"), dir / "aside");
        comm.barrier();
        step(m, dp, comm.rank(), 1);
        std::vector<outcome> out{try_load(dp, dir / "ckpt")};
        comm.barrier();
        if (comm.rank() == 2) std::filesystem::rename(dir / "aside", dp.checkpoint_path(dir / "ckpt"));
        comm.barrier();
        out.push_back(try_load(dp, dir / "ckpt"));
        out.back().unchanged = dp.parameter_hash() == saved;  // here: restored to the save
        return out;
    });
    for (int r = 0; r < 3; ++r) {
        const outcome& missing = results[static_cast<std::size_t>(r)][0];
        INFO("rank " << r << ": " << missing.message);
        CHECK(missing.unchanged);
        if (r == 2)
            CHECK(missing.message.find("ckpt.rank2-of-3") != std::string::npos);  // its own error, with the path
        else
            CHECK(missing.message.find("rank 2 could not load its file") != std::string::npos);
        const outcome& good = results[static_cast<std::size_t>(r)][1];
        CHECK(good.message.empty());
        CHECK(good.unchanged);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: a save removes the temporary files a killed save of the same file left",
          "[train][data_parallel][checkpoint][faults]") {
    const auto dir = fresh_dir("orphans");
    run_local(2, [&](local& comm) {
        toy_model m({16});
        hitch::cpu dev;
        dp_t dp(comm, dev, m.layers());
        const auto mine = dp.checkpoint_path(dir / "ckpt");
        std::ofstream(mine.string() + ".tmp-99999-0") << "half a checkpoint";
        std::ofstream(mine.string() + ".tmp-12345-7") << "another";
        std::ofstream((dir / "unrelated.tmp-1-1").string()) << "not ours";
        comm.barrier();
        dp.save(dir / "ckpt");
        return 0;
    });
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    CHECK(names == std::vector<std::string>{"ckpt.rank0-of-2", "ckpt.rank1-of-2", "unrelated.tmp-1-1"});
    std::filesystem::remove_all(dir);
}
