#pragma once
// One set of FP32 parameters shared by every rank of a communicator whose ranks share an address space (threads of
// one process): what sync::hogwild reads and writes without locks (Niu et al. 2011). Rank 0 copies its parameters
// into a block it allocates and hands the block's address to the others; every rank holds a reference, so the
// block lives until the last data_parallel using it is gone.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hitch/concepts/communicator.hpp"
#include "hitch/core/layer.hpp"

namespace hitch::train::detail {

class shared_parameters {
public:
    shared_parameters() = default;

    /// Collective over `control`: every rank gets rank 0's block, which starts as a copy of rank 0's parameters.
    template <communicator C>
        requires shares_address_space<C>
    static shared_parameters share(C& control, std::span<const hitch::layer> masters, int tag) {
        shared_parameters s;
        if (control.rank() == 0) {
            auto b = std::make_shared<block>();
            std::size_t total = 0;
            for (const hitch::layer& l : masters) total += l.size();
            b->storage.resize(total);
            std::size_t offset = 0;
            for (const hitch::layer& l : masters) {
                float* at = b->storage.data() + offset;
                if (l.size() != 0) std::memcpy(at, l.params.data(), l.size() * sizeof(float));
                b->layers.push_back({l.name, tensor_view<float>(at, l.size()), tensor_view<float>(), l.flags, l.rows});
                offset += l.size();
            }
            s.block_ = std::move(b);
            // Each peer copies the reference out of rank 0's holder; the barrier below keeps the holder alive
            // until every peer has its own.
            const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&s.block_));
            std::vector<typename C::request> sends;
            for (int r = 1; r < control.size(); ++r)
                sends.push_back(control.isend(std::span<const std::uint64_t>(&address, 1), r, tag));
            wait_all(sends, control.timeout());
        } else {
            std::uint64_t address = 0;
            auto r = control.irecv(std::span<std::uint64_t>(&address, 1), 0, tag);
            r.wait();
            s.block_ = *reinterpret_cast<const std::shared_ptr<block>*>(static_cast<std::uintptr_t>(address));
        }
        control.barrier();
        return s;
    }

    /// Collective over `control`, on ranks that hold the block: rank 0's parameters replace the block's (a
    /// checkpoint was loaded) and the update count starts again from 0. No rank reads or writes the block until
    /// every rank has returned.
    template <communicator C>
    void refill(C& control, std::span<const hitch::layer> masters) {
        control.barrier();
        if (control.rank() == 0) {
            for (std::size_t k = 0; k < masters.size(); ++k)
                if (masters[k].size() != 0)
                    std::memcpy(block_->layers[k].params.data(), masters[k].params.data(),
                                masters[k].size() * sizeof(float));
            block_->updates.store(0);
        }
        control.barrier();
    }

    [[nodiscard]] std::span<const hitch::layer> layers() const noexcept {
        return block_ ? std::span<const hitch::layer>(block_->layers) : std::span<const hitch::layer>();
    }
    [[nodiscard]] std::atomic<std::uint64_t>& updates() noexcept { return block_->updates; }
    [[nodiscard]] explicit operator bool() const noexcept { return block_ != nullptr; }

private:
    struct block {
        std::vector<float> storage;
        std::vector<hitch::layer> layers;
        std::atomic<std::uint64_t> updates{0};
    };
    std::shared_ptr<block> block_;
};

}  // namespace hitch::train::detail
