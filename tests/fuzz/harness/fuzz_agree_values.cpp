// libFuzzer harness of comm::agree's default formatter and comparison (comm/agree.hpp: detail::write_value and
// detail::same_value): what a rank writes into its mismatch_error of the values every rank sent, for any bytes.
// First byte: the value type (a character array that need not end in NUL, bool, an enum, characters, numbers, a
// struct without operator<<, a pointer another process sent); the rest: every rank's value, as the all-gather
// delivers them. Nothing may read past a value, load an invalid bool or enum, or follow a pointer.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "hitch/comm/agree.hpp"

namespace {

enum class colour : std::uint8_t { red = 1, green = 2 };
enum plain_enum { one = 1, two = 2 };
struct pair {
    std::int32_t op;
    double count;
};

volatile std::size_t sink = 0;

template <class T>
void run(const std::uint8_t* data, std::size_t size) {
    // Exactly as many values as the bytes fill (zero-padded), in memory of their own: ASan sees a read past them.
    const std::size_t n = std::max<std::size_t>(1, (size + sizeof(T) - 1) / sizeof(T));
    std::unique_ptr<T[]> all(new T[n]);
    std::memset(static_cast<void*>(all.get()), 0, n * sizeof(T));
    if (size != 0) std::memcpy(static_cast<void*>(all.get()), data, size);
    std::ostringstream s;
    for (std::size_t i = 0; i < n; ++i) {
        hitch::comm::detail::write_value(s, all[i]);
        sink = sink + hitch::comm::detail::same_value(all[i], all[0]);
    }
    sink = sink + s.str().size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const unsigned type = data[0] % 12;
    ++data;
    --size;
    switch (type) {
        case 0:
            run<char[16]>(data, size);
            break;
        case 1:
            run<unsigned char[5]>(data, size);
            break;
        case 2:
            run<bool>(data, size);
            break;
        case 3:
            run<colour>(data, size);
            break;
        case 4:
            run<plain_enum>(data, size);
            break;
        case 5:
            run<char>(data, size);
            break;
        case 6:
            run<signed char>(data, size);
            break;
        case 7:
            run<double>(data, size);
            break;
        case 8:
            run<std::uint64_t>(data, size);
            break;
        case 9:
            run<pair>(data, size);
            break;
        case 10:
            run<const char*>(data, size);
            break;
        default:
            run<std::array<char, 8>>(data, size);
            break;
    }
    return 0;
}
