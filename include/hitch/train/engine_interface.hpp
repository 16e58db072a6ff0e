#pragma once
// The interface the public data_parallel forwards to: one engine per (communicator, device, parameter type), so
// those stay constructor arguments instead of template arguments of data_parallel.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/core/node_layout.hpp"
#include "hitch/train/buffers.hpp"
#include "hitch/train/checkpoint.hpp"
#include "hitch/train/elastic.hpp"
#include "hitch/train/metrics.hpp"

namespace hitch::train::detail {

/// The interface data_parallel forwards to; one engine per (communicator, device, parameter type).
class engine_base {
public:
    virtual ~engine_base() = default;
    virtual void gradient_ready(std::size_t layer) = 0;
    virtual step_metrics step(std::optional<double> loss) = 0;
    virtual void save(const std::filesystem::path& prefix,
                      const std::vector<std::pair<std::string, std::vector<std::byte>>>& extra) = 0;
    virtual checkpoint_reader load(const std::filesystem::path& prefix, const load_options& options) = 0;
    [[nodiscard]] virtual double learning_rate() const = 0;
    [[nodiscard]] virtual float loss_scale() const = 0;
    [[nodiscard]] virtual bool accumulation_boundary() const = 0;
    virtual void register_buffers(std::vector<buffer> buffers) = 0;
    [[nodiscard]] virtual std::uint64_t step_index() const = 0;
    [[nodiscard]] virtual std::uint64_t staleness() const = 0;
    [[nodiscard]] virtual std::vector<std::uint64_t> staleness_histogram() const = 0;
    [[nodiscard]] virtual std::uint64_t dropped_gradients() const = 0;
    [[nodiscard]] virtual bool serves_only() const = 0;
    [[nodiscard]] virtual int worker_count() const = 0;
    virtual void serve() = 0;
    virtual void finish() = 0;
    virtual void join() = 0;
    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    [[nodiscard]] virtual const node_layout& nodes() const = 0;
    [[nodiscard]] virtual std::uint64_t parameter_hash() const = 0;
    [[nodiscard]] virtual std::size_t bucket_count() const = 0;
    [[nodiscard]] virtual std::vector<std::string_view> bucket_exchanges() const = 0;
    [[nodiscard]] virtual std::size_t optimizer_state_bytes() const = 0;
    [[nodiscard]] virtual std::size_t master_weight_bytes() const = 0;
    [[nodiscard]] virtual std::filesystem::path checkpoint_path(const std::filesystem::path& prefix) const = 0;
};

}  // namespace hitch::train::detail
