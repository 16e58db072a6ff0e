// hitch's optimizers against trajectories recorded from torch.optim (fixtures/generate.py wrote
// fixtures/torch_optim.txt with torch's single-tensor implementations). The inputs are rebuilt here from the same
// hash; torch orders some float operations differently (e.g. Adam's lerp), so values agree to float rounding.

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "driver.hpp"
#include "hitch/optim/adam.hpp"
#include "hitch/optim/adamw.hpp"
#include "hitch/optim/momentum.hpp"
#include "hitch/optim/sgd.hpp"

using namespace hitch_test;
namespace optim = hitch::optim;

namespace {

using trajectory = std::map<std::tuple<std::string, std::size_t, int>, std::vector<float>>;

trajectory read_fixture() {
    const std::string path = std::string(HITCH_TEST_SOURCE_DIR) + "/tests/optim/fixtures/torch_optim.txt";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    trajectory t;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream s(line);
        std::string config;
        std::size_t layer = 0;
        int step = 0;
        s >> config >> layer >> step;
        std::vector<float> values;
        float v = 0;
        while (s >> v) values.push_back(v);
        t[{config, layer, step}] = values;
    }
    return t;
}

const std::vector<std::size_t> sizes = {1, 7, 33, 100};
constexpr std::uint64_t seed = 77;

template <class O>
void compare(const trajectory& torch, const std::string& config, const typename O::options_type& options) {
    float_model m(sizes, seed);
    optim::model_optimizer<O> opt(options, m.layers);
    int checked = 0;
    for (int t = 0; t < 100; ++t) {
        m.fill_gradients(seed + 1, static_cast<std::uint64_t>(t));
        opt.step(0.01f * static_cast<float>(1 + t % 7) / 4.0f);
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            const auto it = torch.find({config, k, t + 1});
            if (it == torch.end()) continue;
            REQUIRE(it->second.size() == sizes[k]);
            double scale = 1.0, err = 0.0;
            for (std::size_t i = 0; i < sizes[k]; ++i) {
                scale = std::max(scale, std::abs(static_cast<double>(it->second[i])));
                err = std::max(err, std::abs(static_cast<double>(it->second[i]) - m.params[k][i]));
            }
            INFO(config << " layer " << k << " step " << t + 1);
            CHECK(err / scale < 1e-6);
            ++checked;
        }
    }
    CHECK(checked == 20);
}

}  // namespace

TEST_CASE("sgd, momentum, Nesterov and dampening match torch.optim.SGD over 100 steps", "[optim][torch]") {
    const trajectory torch = read_fixture();
    compare<optim::sgd>(torch, "sgd_wd", {.weight_decay = 0.01f});
    compare<optim::momentum>(torch, "momentum", {.momentum = 0.9f, .weight_decay = 1e-3f});
    compare<optim::momentum>(torch, "nesterov", {.momentum = 0.9f, .nesterov = true});
    compare<optim::momentum>(torch, "dampening", {.momentum = 0.5f, .dampening = 0.3f, .weight_decay = 0.01f});
}

TEST_CASE("adam (L2, AMSGrad) and adamw match torch.optim.Adam and AdamW over 100 steps", "[optim][torch]") {
    const trajectory torch = read_fixture();
    compare<optim::adam>(torch, "adam", {});
    compare<optim::adam>(torch, "adam_l2_amsgrad", {.weight_decay = 1e-2f, .amsgrad = true});
    compare<optim::adamw>(torch, "adamw", {.weight_decay = 0.05f});
}
