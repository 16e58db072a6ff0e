#include <catch2/catch.hpp>

#include <cstdlib>
#include <limits>

#include "hitch/core/deadline.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"

TEST_CASE("option_validator names owner, field, value and range", "[options]") {
    const hitch::option_validator check("hitch::optim::adam");
    CHECK_NOTHROW(check.half_open("beta1", 0.9, 0.0, 1.0));
    CHECK_THROWS_WITH(check.half_open("beta1", 1.5, 0.0, 1.0),
                      "hitch::optim::adam: option beta1 = 1.5 is outside the allowed range [0, 1)");
    CHECK_THROWS_WITH(check.positive("lr", -0.1),
                      "hitch::optim::adam: option lr = -0.1 is outside the allowed range (0, inf)");
    CHECK_THROWS_WITH(check.positive("lr", 0.0), Catch::Contains("lr = 0"));
    CHECK_THROWS_WITH(check.non_negative("weight_decay", -1.0), Catch::Contains("[0, inf)"));
    CHECK_THROWS_WITH(check.closed("k", 11, 1, 10), Catch::Contains("k = 11 is outside the allowed range [1, 10]"));
    CHECK_THROWS_WITH(check.open("p", 1.0, 0.0, 1.0), Catch::Contains("(0, 1)"));
    CHECK_THROWS_WITH(check.at_least("buckets", 0, 1), Catch::Contains("[1, inf)"));
    CHECK_THROWS_WITH(check.positive("lr", std::numeric_limits<double>::quiet_NaN()), Catch::Contains("NaN"));
    CHECK_THROWS_WITH(check.require(false, "name", std::string("ringx"), "one of: ring, tree"),
                      "hitch::optim::adam: option name = \"ringx\" is outside the allowed range one of: ring, tree");
    CHECK_THROWS_AS(check.positive("lr", -1.0), hitch::config_error);
    CHECK_THROWS_AS(check.positive("lr", -1.0), hitch::error);
}

TEST_CASE("HITCH_TIMEOUT_S sets the default deadline and is validated", "[options]") {
    ::setenv("HITCH_TIMEOUT_S", "2.5", 1);
    CHECK(hitch::timeout_from_environment().count() == 2.5);
    ::setenv("HITCH_TIMEOUT_S", "abc", 1);
    CHECK_THROWS_WITH(hitch::timeout_from_environment(), Catch::Contains("HITCH_TIMEOUT_S"));
    ::setenv("HITCH_TIMEOUT_S", "-3", 1);
    CHECK_THROWS_AS(hitch::timeout_from_environment(), hitch::config_error);
    ::unsetenv("HITCH_TIMEOUT_S");
    CHECK(hitch::timeout_from_environment().count() == hitch::default_timeout_seconds);
}

TEST_CASE("timeout_error names the operation, detail and time waited", "[errors]") {
    const hitch::timeout_error e("comm::local recv", "from rank 1, tag 7", hitch::seconds_f(1.5));
    CHECK(std::string(e.what()) == "hitch: timed out after 1.500 s waiting for comm::local recv (from rank 1, tag 7)");
    CHECK(e.operation() == "comm::local recv");
    CHECK(e.waited().count() == 1.5);
}
