// Each schedule against values worked out by hand at its boundaries: decay milestones, warm-up end, cycle peaks.

#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "hitch/optim/lr.hpp"

namespace lr = hitch::lr;

TEST_CASE("constant, step and multi-step decay change exactly at their milestones", "[lr]") {
    const lr::constant c({.value = 0.1});
    CHECK(c(0, 100) == 0.1);
    CHECK(c(1000000, 100) == 0.1);
    const lr::step_decay s({.base = 0.1, .step_epochs = 30, .gamma = 0.1});
    CHECK(s(2999, 100) == Approx(0.1));
    CHECK(s(3000, 100) == Approx(0.01));
    CHECK(s(5999, 100) == Approx(0.01));
    CHECK(s(6000, 100) == Approx(0.001));
    const lr::multi_step m({.base = 0.1, .milestones = {30, 60, 80}, .gamma = 0.1});
    CHECK(m(0, 100) == Approx(0.1));
    CHECK(m(2999, 100) == Approx(0.1));
    CHECK(m(3000, 100) == Approx(0.01));
    CHECK(m(6000, 100) == Approx(0.001));
    CHECK(m(7999, 100) == Approx(0.001));
    CHECK(m(8000, 100) == Approx(0.0001));
    const lr::multi_step half_epochs({.base = 1.0, .milestones = {0.5}, .gamma = 0.5});
    CHECK(half_epochs(49, 100) == 1.0);
    CHECK(half_epochs(50, 100) == 0.5);
}

TEST_CASE("exponential decay, continuous and staircase", "[lr]") {
    const lr::exponential e({.base = 1.0, .gamma = 0.5});
    CHECK(e(0, 10) == 1.0);
    CHECK(e(10, 10) == Approx(0.5));
    CHECK(e(15, 10) == Approx(0.35355339));
    const lr::exponential st({.base = 1.0, .gamma = 0.5, .staircase = true});
    CHECK(st(15, 10) == Approx(0.5));
    CHECK(st(20, 10) == Approx(0.25));
}

TEST_CASE("cosine and polynomial decay reach their final rate at T and stay there", "[lr]") {
    const lr::cosine c({.base = 0.1, .total_epochs = 10, .final_lr = 0.001});
    CHECK(c(0, 100) == Approx(0.1));
    CHECK(c(250, 100) == Approx(0.001 + 0.099 * (1 + std::cos(std::numbers::pi / 4)) / 2));
    CHECK(c(500, 100) == Approx(0.0505));
    CHECK(c(1000, 100) == Approx(0.001));
    CHECK(c(5000, 100) == Approx(0.001));
    const lr::polynomial p({.base = 1.0, .total_epochs = 10, .power = 2});
    CHECK(p(0, 10) == 1.0);
    CHECK(p(50, 10) == Approx(0.25));
    CHECK(p(100, 10) == 0.0);
    CHECK(p(200, 10) == 0.0);
    const lr::polynomial pf({.base = 1.0, .total_epochs = 10, .power = 2, .final_lr = 0.1});
    CHECK(pf(50, 10) == Approx(0.325));
}

TEST_CASE("warm-up ramps linearly from the start rate to the wrapped schedule (Goyal et al. 2017)", "[lr]") {
    // batch 8192 = 32 x 256: rate 32 * 0.1, 5 warm-up epochs from 0.1, 1.28M images -> 156 steps per epoch
    const double rate = lr::linear_scaling(0.1, 8192, 256);
    CHECK(rate == Approx(3.2));
    const lr::warmup w(lr::multi_step({.base = rate, .milestones = {30, 60, 80}}), {.epochs = 5, .start_lr = 0.1});
    CHECK(w.warmup_steps(156) == 780);
    CHECK(w(0, 156) == Approx(0.1));
    CHECK(w(390, 156) == Approx(1.65));
    CHECK(w(779, 156) == Approx(0.1 + 3.1 * 779.0 / 780.0));
    CHECK(w(780, 156) == Approx(3.2));
    CHECK(w(30 * 156 - 1, 156) == Approx(3.2));
    CHECK(w(30 * 156, 156) == Approx(0.32));
    // around a decaying schedule the ramp ends on the value the schedule has at the end of the warm-up
    const lr::warmup wc(lr::cosine({.base = 1.0, .total_epochs = 10}), {.epochs = 5});
    CHECK(wc(0, 10) == 0.0);
    CHECK(wc(25, 10) == Approx(0.25));
    CHECK(wc(50, 10) == Approx(0.5));
    CHECK(wc(51, 10) == Approx(0.5 * (1 + std::cos(std::numbers::pi * 5.1 / 10))));
}

TEST_CASE("cyclical rates peak at odd half cycles; triangular2 halves the amplitude (Smith 2015)", "[lr]") {
    const lr::cyclical c({.base_lr = 0.001, .max_lr = 0.006, .half_cycle_epochs = 2});
    CHECK(c(0, 100) == Approx(0.001));
    CHECK(c(100, 100) == Approx(0.0035));
    CHECK(c(200, 100) == Approx(0.006));
    CHECK(c(400, 100) == Approx(0.001));
    CHECK(c(600, 100) == Approx(0.006));
    const lr::cyclical c2(
        {.base_lr = 0.001, .max_lr = 0.006, .half_cycle_epochs = 2, .mode = lr::cycle_mode::triangular2});
    CHECK(c2(200, 100) == Approx(0.006));
    CHECK(c2(600, 100) == Approx(0.0035));
    CHECK(c2(1000, 100) == Approx(0.00225));
    CHECK(c2(800, 100) == Approx(0.001));
}

TEST_CASE("one-cycle: rate and inverse momentum at the phase boundaries (Smith 2018)", "[lr]") {
    const lr::one_cycle oc({.max_lr = 1.0, .total_epochs = 1});  // 100 steps at 100 per epoch; peak at step 29
    CHECK(oc.total_steps(100) == 100);
    CHECK(oc(0, 100) == Approx(0.04));
    CHECK(oc.momentum(0, 100) == Approx(0.95));
    CHECK(oc(29, 100) == Approx(1.0));
    CHECK(oc.momentum(29, 100) == Approx(0.85));
    CHECK(oc(64, 100) == Approx(4e-6 + (1.0 - 4e-6) * 0.5));
    CHECK(oc.momentum(64, 100) == Approx(0.90));
    CHECK(oc(99, 100) == Approx(4e-6));
    CHECK(oc.momentum(99, 100) == Approx(0.95));
    CHECK(oc(150, 100) == Approx(4e-6));
    const lr::one_cycle lin({.max_lr = 1.0, .total_epochs = 1, .strategy = lr::anneal::linear});
    CHECK(lin(14, 100) == Approx(0.04 + 0.96 * 14.0 / 29.0));
    const lr::one_cycle three({.max_lr = 1.0, .total_epochs = 1, .three_phase = true});
    CHECK(three(29, 100) == Approx(1.0));
    CHECK(three(58, 100) == Approx(0.04));
    CHECK(three.momentum(58, 100) == Approx(0.95));
    CHECK(three.momentum(80, 100) == Approx(0.95));
    CHECK(three(99, 100) == Approx(4e-6));
    CHECK_THROWS_WITH(oc(0, 2), Catch::Contains("leave a phase of the cycle empty"));
}

TEST_CASE("batch-size schedule grows the batch at milestones, then decays the rate (Smith et al. 2017)", "[lr]") {
    const lr::batch_size_schedule s(
        {.base_batch = 128, .base_lr = 0.1, .milestones = {60, 120, 160}, .factor = 5, .max_batch = 16000});
    CHECK(s.batch_size(0) == 128);
    CHECK(s.batch_size(59) == 128);
    CHECK(s.batch_size(60) == 640);
    CHECK(s.batch_size(120) == 3200);
    CHECK(s.batch_size(160) == 16000);
    CHECK(s.learning_rate(200) == Approx(0.1));
    const lr::batch_size_schedule capped(
        {.base_batch = 128, .base_lr = 0.1, .milestones = {60, 120, 160}, .factor = 5, .max_batch = 3200});
    CHECK(capped.batch_size(160) == 3200);
    CHECK(capped.learning_rate(160) == Approx(0.02));
    CHECK(capped.learning_rate(159) == Approx(0.1));
    // 50000 examples: 391 steps per epoch at 128, 79 at 640
    CHECK(s.steps_in_epoch(0, 50000) == 391);
    CHECK(s.steps_in_epoch(60, 50000) == 79);
    CHECK(s.epoch_at_step(0, 50000) == 0);
    CHECK(s.epoch_at_step(391 * 60 - 1, 50000) == 59);
    CHECK(s.epoch_at_step(391 * 60, 50000) == 60);
    CHECK(s.batch_size_at_step(391 * 60, 50000) == 640);
    CHECK(s.epoch_at_step(391 * 60 + 79 * 60, 50000) == 120);
    CHECK(capped.learning_rate_at_step(391 * 60 + 79 * 60 + 16 * 40, 50000) == Approx(0.02));
}

TEST_CASE("schedules are pure: the same step gives the same value in any order", "[lr]") {
    const lr::warmup w(lr::cosine({.base = 0.4, .total_epochs = 90}), {.epochs = 5, .start_lr = 0.1});
    const double later = w(12345, 100);
    const double early = w(17, 100);
    CHECK(w(12345, 100) == later);
    CHECK(w(17, 100) == early);
}

TEST_CASE("bad schedule options throw config_error naming field, value and range", "[lr]") {
    CHECK_THROWS_WITH(lr::warmup(lr::constant({.value = 0.1}), {.epochs = 0}),
                      "hitch::lr::warmup: option epochs = 0 is outside the allowed range (0, inf)");
    CHECK_THROWS_WITH(lr::constant({.value = -0.1}), Catch::Contains("value = -0.1"));
    CHECK_THROWS_WITH(lr::step_decay({.gamma = 1.5}),
                      Catch::Contains("gamma = 1.5 is outside the allowed range (0, 1]"));
    CHECK_THROWS_WITH(lr::multi_step({.milestones = {30, 20}}), Catch::Contains("milestones must increase"));
    CHECK_THROWS_WITH(lr::cosine({.base = 0.1, .final_lr = 0.2}), Catch::Contains("final_lr = 0.2"));
    CHECK_THROWS_WITH(lr::polynomial({.power = 0}), Catch::Contains("power = 0"));
    CHECK_THROWS_WITH(lr::cyclical({.base_lr = 0.01, .max_lr = 0.001}), Catch::Contains("max_lr"));
    CHECK_THROWS_WITH(lr::one_cycle({.warm_fraction = 0.6, .three_phase = true}),
                      Catch::Contains("warm_fraction = 0.6"));
    CHECK_THROWS_WITH(lr::one_cycle({.base_momentum = 0.99}), Catch::Contains("base_momentum = 0.99"));
    CHECK_THROWS_WITH(lr::batch_size_schedule({.factor = 1}), Catch::Contains("factor = 1"));
    CHECK_THROWS_WITH(lr::batch_size_schedule({.base_batch = 256, .max_batch = 128}), Catch::Contains("max_batch"));
    CHECK_THROWS_WITH(lr::linear_scaling(-0.1, 256, 256), Catch::Contains("base_lr = -0.1"));
    CHECK_THROWS_WITH(lr::linear_scaling(0.1, 256, 0), Catch::Contains("base_batch = 0"));
    CHECK_THROWS_WITH(lr::constant({.value = 0.1})(5, 0), Catch::Contains("steps_per_epoch = 0"));
}
