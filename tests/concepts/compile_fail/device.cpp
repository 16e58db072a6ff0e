// Must NOT compile: a device without a memory space and without synchronize(), handed to model_optimizer. Only
// the first (the memory space) may be reported.
#include <cstddef>
#include <string_view>
#include <vector>

#include "hitch/optim/model_optimizer.hpp"
#include "hitch/optim/sgd.hpp"

struct device_without_space {
    static constexpr std::string_view name = "mine";
    void* allocate_bytes(std::size_t) { return nullptr; }
    void deallocate_bytes(void*, std::size_t) {}
    void copy_to_host(void*, const void*, std::size_t) {}
    void copy_from_host(void*, const void*, std::size_t) {}
    void copy(void*, const void*, std::size_t) {}
    void fill_zero(void*, std::size_t) {}
    // no `space`, no synchronize()
};

int main() {
    device_without_space dev;
    hitch::optim::model_optimizer<hitch::optim::sgd, device_without_space> opt({}, std::vector<hitch::layer>{}, dev);
    opt.step(0.1f);
}
