#pragma once
// How the codecs spread one bucket's encode or decode over threads (hitch's shared pool, hitch/core/parallel.hpp).
// Every codec's result is independent of the split: chunks start on block boundaries the codec chooses, and sums
// are formed per fixed block and combined in block order, so a message is the same bits on 1 thread or 16.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/compress/tuning.hpp"
#include "hitch/core/options.hpp"
#include "hitch/core/parallel.hpp"

namespace hitch::compress {

/// Threads a codec may use for one bucket.
struct parallelism {
    /// 0: the shared pool (every core); 1: the calling thread only; n: at most n chunks.
    std::size_t threads = 0;
    /// Buckets with fewer elements stay on the calling thread (waking a thread costs more than it saves).
    std::size_t min_elements = tuning::parallel_min_elements;

    void validate(std::string_view owner) const {
        option_validator(owner).at_least("parallel.min_elements", min_elements, std::size_t{1});
    }
};

namespace detail {

/// The split of [0, n) for one call: `count` chunks with boundaries on multiples of `align` (1 chunk when the bucket
/// is small or the caller asked for one thread).
struct chunk_plan {
    std::size_t n = 0;
    std::size_t align = 1;
    std::size_t count = 1;
    parallel_options options;

    [[nodiscard]] std::pair<std::size_t, std::size_t> chunk(std::size_t c) const noexcept {
        return count == 1 ? std::pair<std::size_t, std::size_t>{0, n} : static_chunk(n, count, c, align);
    }
};

[[nodiscard]] inline chunk_plan plan_chunks(std::size_t n, std::size_t align, const parallelism& how) {
    chunk_plan plan;
    plan.n = n;
    plan.align = std::max<std::size_t>(align, 1);
    plan.options.threads = how.threads;
    plan.options.align = plan.align;
    plan.options.min_chunk = std::max<std::size_t>(how.min_elements / 2, plan.align);
    if (how.threads != 1 && n >= how.min_elements && n > plan.align) plan.count = chunk_count(n, plan.options);
    return plan;
}

/// Calls fn(c, begin, end) for every chunk of the plan, in parallel when there are several.
template <class F>
void run_chunks(const chunk_plan& plan, F&& fn) {
    if (plan.count == 1) {
        fn(std::size_t{0}, std::size_t{0}, plan.n);
        return;
    }
    parallel_chunks(
        plan.count,
        [&](std::size_t c) {
            const auto [begin, end] = plan.chunk(c);
            fn(c, begin, end);
        },
        plan.options);
}

/// Calls fn(begin, end) on chunks of [0, n) whose boundaries are multiples of `align`.
template <class F>
void for_chunks(std::size_t n, std::size_t align, const parallelism& how, F&& fn) {
    run_chunks(plan_chunks(n, align, how), [&](std::size_t, std::size_t begin, std::size_t end) { fn(begin, end); });
}

}  // namespace detail
}  // namespace hitch::compress
