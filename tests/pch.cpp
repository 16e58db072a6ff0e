// The source of the precompiled Catch2 header the tests share (tests/CMakeLists.txt).
#include <catch2/catch.hpp>
