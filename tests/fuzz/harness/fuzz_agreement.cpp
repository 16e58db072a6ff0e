// libFuzzer harness of what a rank makes of the agreement messages other ranks send: the input is what an
// all-gather delivered (every rank's value as bytes), and the harness runs the code that compares and describes
// them. First byte: 0 allreduce's call descriptors (group.hpp), 1 data_parallel's layer descriptors
// (layer_agreement.hpp), 2 the checkpoint files' verdicts (checkpoint_agreement.hpp). The descriptions must come
// out for any bytes, without reading past a field (a name another rank sent need not end in NUL).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hitch/allreduce/group.hpp"
#include "hitch/train/checkpoint_agreement.hpp"
#include "hitch/train/layer_agreement.hpp"

namespace {

/// Every whole value of T in the input (at least one, zero-padded), as the all-gather would deliver it.
template <class T>
std::vector<T> values_of(const std::uint8_t* data, std::size_t size) {
    std::vector<T> out(std::max<std::size_t>(1, (size + sizeof(T) - 1) / sizeof(T)));
    if (size != 0) std::memcpy(out.data(), data, size);
    return out;
}

volatile std::size_t sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const unsigned mode = data[0] % 3;
    ++data;
    --size;
    if (mode == 0) {
        const auto all = values_of<hitch::allreduce::call_descriptor>(data, size);
        bool same = true;
        for (const auto& d : all) same = same && d == all.front();
        sink = sink + same + hitch::allreduce::detail::describe_disagreement(all.front(), all).size();
    } else if (mode == 1) {
        const auto all = values_of<hitch::train::detail::layer_descriptor>(data, size);
        for (const auto& d : all) sink = sink + hitch::train::detail::describe_for_message(d, all.front()).size();
    } else {
        const auto all = values_of<hitch::train::detail::file_verdict>(data, size);
        sink = sink + hitch::train::detail::describe_positions(all).size();
    }
    return 0;
}
