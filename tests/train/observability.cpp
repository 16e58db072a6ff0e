// Metrics JSON lines and the Chrome trace-event timeline.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sstream>
#include <thread>

#include "hitch/train/metrics.hpp"
#include "hitch/train/timeline.hpp"

TEST_CASE("step metrics are one JSON object per line with every field", "[train][metrics]") {
    hitch::train::step_metrics m;
    m.step = 12;
    m.epoch = 1;
    m.rank = 3;
    m.loss = 0.25;
    m.lr = 0.1;
    m.loss_scale = 65536;
    m.skipped = true;
    m.bytes_sent = 1 << 20;
    m.comm_ms = 1.5;
    m.wait_ms = 0.75;
    m.compute_ms = 7.25;
    m.elapsed_s = 3.5;
    m.grad_norm = 2.5;
    m.micro_batches = 4;
    std::ostringstream out;
    hitch::train::metrics_writer w(out);
    w.write(m);
    m.loss = std::numeric_limits<double>::quiet_NaN();
    w.write(m);
    std::istringstream lines(out.str());
    std::string line;
    std::getline(lines, line);
    const auto j = nlohmann::json::parse(line);
    CHECK(j["step"] == 12);
    CHECK(j["epoch"] == 1);
    CHECK(j["rank"] == 3);
    CHECK(j["loss"] == 0.25);
    CHECK(j["accuracy"].is_null());
    CHECK(j["lr"] == 0.1);
    CHECK(j["loss_scale"] == 65536.0);
    CHECK(j["skipped"] == true);
    CHECK(j["bytes_sent"] == (1 << 20));
    CHECK(j["comm_ms"] == 1.5);
    CHECK(j["wait_ms"] == 0.75);
    CHECK(j["compute_ms"] == 7.25);
    CHECK(j["elapsed_s"] == 3.5);
    CHECK(j["grad_norm"] == 2.5);
    CHECK(j["micro_batches"] == 4);
    CHECK(j["accumulated"] == false);
    CHECK(j.size() == 16);
    std::getline(lines, line);
    CHECK(nlohmann::json::parse(line)["loss"].is_null());  // NaN is written as null, keeping the line valid JSON
    m.wait_ms.reset();                                     // not measured (the collectives' check off)
    CHECK(nlohmann::json::parse(m.to_json())["wait_ms"].is_null());
}

TEST_CASE("the timeline is valid trace-event JSON with one complete event per span", "[train][timeline]") {
    hitch::train::timeline tl(2);
    {
        auto s = tl.span("backward", "compute");
        s.arg("layer", 4);
    }
    std::thread([&] { auto s = tl.span("allreduce \"bucket\" 0", "comm"); }).join();
    std::ostringstream out;
    tl.write(out);
    const auto j = nlohmann::json::parse(out.str());
    const auto& events = j["traceEvents"];
    REQUIRE(events.size() == 3);  // process name + two spans
    CHECK(events[0]["ph"] == "M");
    CHECK(events[1]["name"] == "backward");
    CHECK(events[1]["ph"] == "X");
    CHECK(events[1]["pid"] == 2);
    CHECK(events[1]["args"]["layer"] == 4.0);
    CHECK(events[2]["name"] == "allreduce \"bucket\" 0");
    CHECK(events[2]["tid"] != events[1]["tid"]);  // recorded from another thread
    CHECK(events[2]["ts"].get<long>() >= events[1]["ts"].get<long>());

    hitch::train::timeline off(0, false);
    { auto s = off.span("x", "y"); }
    CHECK(off.events().empty());
}
