#pragma once
// The --isa option of the compression and optimizer benchmarks: the instruction-set tier their kernels are pinned
// to (hitch::set_isa_limit, hitch/core/isa.hpp), so the AVX2 kernels can be measured on a processor that also has
// AVX-512. A tier the processor lacks is refused before anything runs, so a figure never names a tier it did not
// measure.

#include <string>
#include <string_view>

#include "hitch/core/error.hpp"
#include "hitch/core/isa.hpp"

#include "../examples/trainer/option_values.hpp"

namespace hitch_bench {

/// The tier named by --isa's value; a usage_error (the benchmark's one line, exit status 2) for an unknown name or
/// a tier this processor cannot run.
inline hitch::isa parse_isa_option(std::string_view flag, std::string_view text) {
    namespace ex = hitch_examples;
    hitch::isa tier = hitch::isa::portable;
    try {
        tier = hitch::parse_isa(text);
    } catch (const hitch::config_error&) {
        throw ex::usage_error(ex::not_one_of(flag, text, {"portable", "avx2", "avx512"}));
    }
    if (tier > hitch::cpu_isa())
        throw ex::usage_error(std::string(flag) + " " + std::string(text) + ": this processor cannot run the " +
                              std::string(hitch::isa_name(tier)) + " kernels (its widest tier is " +
                              std::string(hitch::isa_name(hitch::cpu_isa())) + ")");
    return tier;
}

}  // namespace hitch_bench
