#include <catch2/catch.hpp>

#include <array>
#include <span>
#include <vector>

#include "hitch/core/tensor.hpp"

#ifdef HITCH_TEST_HAVE_XTENSOR
#include <xtensor/xarray.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>
#endif

TEST_CASE("tensor_view wraps containers without copying", "[tensor]") {
    std::vector<float> v(7, 1.0f);
    hitch::tensor_view<float> a(v);
    CHECK(a.data() == v.data());
    CHECK(a.size() == 7);
    CHECK(a.size_bytes() == 28);
    CHECK(a.space() == hitch::memory_space::host);
    CHECK(a.element_dtype() == hitch::dtype::f32);
    a[3] = 5.0f;
    CHECK(v[3] == 5.0f);

    const std::vector<double> cv(3, 2.0);
    hitch::tensor_view cview(cv);  // deduces tensor_view<const double>
    STATIC_REQUIRE(std::is_same_v<decltype(cview), hitch::tensor_view<const double>>);
    CHECK(cview.data() == cv.data());

    std::span<float> s(v);
    hitch::tensor_view<float> fs(s);
    CHECK(fs.data() == v.data());
    hitch::tensor_view<const float> c = a;  // mutable -> const
    CHECK(c.data() == v.data());

    std::array<hitch::half, 4> arr{};
    auto av = hitch::view(arr);
    CHECK(av.size() == 4);
    CHECK(av.element_dtype() == hitch::dtype::f16);

    std::vector<float> empty;
    hitch::tensor_view<float> e(empty);
    CHECK(e.empty());
}

TEST_CASE("tensor_view subviews are bounds-checked", "[tensor]") {
    std::vector<int> v(10);
    hitch::tensor_view<int> t(v);
    CHECK(t.subview(2, 3).data() == v.data() + 2);
    CHECK(t.subview(10, 0).size() == 0);
    CHECK_THROWS_AS(t.subview(8, 3), hitch::config_error);
    CHECK_THROWS_AS(t.subview(11, 0), hitch::config_error);
    hitch::tensor_view<float> device_view(nullptr, 4, hitch::memory_space::cuda);
    CHECK_THROWS_WITH(device_view.host_span(), Catch::Contains("cuda memory"));
}

#ifdef HITCH_TEST_HAVE_XTENSOR
TEST_CASE("tensor_view wraps xtensor containers and rejects strided views", "[tensor]") {
    xt::xtensor<float, 2> x = xt::zeros<float>({3, 4});
    hitch::tensor_view<float> t(x);
    CHECK(t.data() == x.data());
    CHECK(t.size() == 12);
    t[5] = 2.0f;
    CHECK(x(1, 1) == 2.0f);
    xt::xarray<double> y = xt::ones<double>({2, 2, 2});
    auto ty = hitch::view(y);
    CHECK(ty.size() == 8);
    auto column = xt::strided_view(x, {xt::all(), 1});
    CHECK_THROWS_AS(hitch::tensor_view<float>(column), hitch::config_error);
}
#endif
