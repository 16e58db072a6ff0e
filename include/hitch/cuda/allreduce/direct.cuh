#pragma once
// The direct engine: the ring's collectives with device pointers handed to a communicator that carries device
// memory (a CUDA-aware MPI), the reductions by the reduce kernels. nvcc only; collectives.cuh installs it.
//
// It is the host ring (allreduce/ring.hpp) step by step: the buffer is cut into p chunks (partition); in
// reduce-scatter step s rank r sends chunk r-s-1 to r+1 and receives chunk r-s-2 from r-1 into device scratch, and
// combines it into its own as the left operand (divided by p at the last step of an average); after p-1 steps rank r
// holds chunk r complete, and the all-gather passes complete chunks on for p-1 more steps, received in place. So
// every element is combined in the same order as on the host ring: the same bits. Messages are cut into
// device_options::segment_bytes; the combination of a segment is launched as soon as it has arrived, and a step's
// kernels are waited for before its chunk is sent on (the communicator reads device memory that must be final).
// The ring's broadcast is its pipelined chain: segments arrive from upstream in place and are forwarded downstream
// as they arrive.
#if !defined(__CUDACC__)
#error "hitch/cuda/allreduce/direct.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "hitch/allreduce/partition.hpp"
#include "hitch/allreduce/space.hpp"
#include "hitch/cuda/allreduce/collectives.hpp"
#include "hitch/cuda/allreduce/context.hpp"
#include "hitch/cuda/allreduce/reduce.cuh"

namespace hitch::cuda::allreduce {

class ring_direct_engine final : public direct_engine {
public:
    static constexpr int reduce_scatter_channel = 0;
    static constexpr int allgather_channel = 1;
    static constexpr int chain_channel = 2;

    void run(const hitch::allreduce::space_call& call, hitch::allreduce::space_messages& m, device_context& ctx,
             const device_options& options) override {
        using hitch::allreduce::operation;
        auto* data = static_cast<std::byte*>(call.buffer.data);
        if (call.what == operation::allgather && call.input.bytes != 0) {  // allgather(mine, all): mine first
            detail::copy_async(data + call.input_offset, call.input.data, call.input.bytes, ctx.copy_in(),
                               "cudaMemcpyAsync (direct allgather input)");
            detail::check(cudaStreamSynchronize(ctx.copy_in()), "cudaStreamSynchronize");
        }
        ring r{call, m, ctx, std::max<std::size_t>(1, options.segment_bytes / call.element_bytes)};
        switch (call.what) {
            case operation::allreduce:
                r.reduce_scatter();
                r.allgather();
                break;
            case operation::reduce_scatter:
                r.reduce_scatter();
                break;
            case operation::allgather:
                r.allgather();
                break;
            case operation::broadcast:
                r.broadcast(call.root);
                break;
            default:
                throw config_error("hitch::cuda::allreduce: the direct engine was given a call it has no form of");
        }
        m.wait_all();
    }

private:
    struct ring {
        const hitch::allreduce::space_call& call;
        hitch::allreduce::space_messages& m;
        device_context& ctx;
        std::size_t segment;  // elements per message

        [[nodiscard]] int p() const noexcept { return call.size; }
        [[nodiscard]] int me() const noexcept { return call.rank; }
        [[nodiscard]] std::size_t n() const noexcept { return call.buffer.bytes / call.element_bytes; }
        [[nodiscard]] std::byte* at(std::size_t element) const noexcept {
            return static_cast<std::byte*>(call.buffer.data) + element * call.element_bytes;
        }
        [[nodiscard]] hitch::allreduce::block chunk(int c) const noexcept {
            return hitch::allreduce::partition(n(), p(), ((c % p()) + p()) % p());
        }
        [[nodiscard]] std::size_t pieces(std::size_t count) const noexcept { return (count + segment - 1) / segment; }
        [[nodiscard]] std::size_t piece(std::size_t count, std::size_t j) const noexcept {
            return std::min(segment, count - j * segment);
        }

        std::vector<std::size_t> post_sends(const hitch::allreduce::block& b, int to, int channel) {
            std::vector<std::size_t> ids;
            for (std::size_t j = 0; j < pieces(b.count); ++j)
                ids.push_back(m.send(at(b.offset + j * segment), piece(b.count, j) * call.element_bytes, to, channel));
            return ids;
        }

        void reduce_scatter() {
            const int next = (me() + 1) % p(), prev = (me() - 1 + p()) % p();
            const std::size_t widest = chunk(0).count;  // partition's first block is never smaller than the others
            auto* scratch = static_cast<std::byte*>(ctx.scratch(std::max<std::size_t>(widest, 1) * call.element_bytes));
            for (int step = 0; step < p() - 1; ++step) {
                const hitch::allreduce::block out = chunk(me() - step - 1), in = chunk(me() - step - 2);
                std::vector<std::size_t> recvs;
                for (std::size_t j = 0; j < pieces(in.count); ++j)
                    recvs.push_back(m.receive(scratch + j * segment * call.element_bytes,
                                              piece(in.count, j) * call.element_bytes, prev, reduce_scatter_channel));
                const std::vector<std::size_t> sends = post_sends(out, next, reduce_scatter_channel);
                const int divisor = step == p() - 2 ? p() : 1;
                for (std::size_t j = 0; j < recvs.size(); ++j) {
                    m.wait(recvs[j]);
                    std::byte* dst = at(in.offset + j * segment);
                    combine(call.type, dst, scratch + j * segment * call.element_bytes, dst, piece(in.count, j),
                            call.op, divisor, ctx.copy_in());
                }
                // The chunk just combined is the next step's message, and the scratch its receives: both must be
                // done with.
                detail::check(cudaStreamSynchronize(ctx.copy_in()), "cudaStreamSynchronize (direct reduce-scatter)");
                for (std::size_t id : sends) m.wait(id);
            }
        }

        void allgather() {
            const int next = (me() + 1) % p(), prev = (me() - 1 + p()) % p();
            for (int step = 0; step < p() - 1; ++step) {
                const hitch::allreduce::block out = chunk(me() - step), in = chunk(me() - step - 1);
                std::vector<std::size_t> recvs;
                for (std::size_t j = 0; j < pieces(in.count); ++j)
                    recvs.push_back(m.receive(at(in.offset + j * segment), piece(in.count, j) * call.element_bytes,
                                              prev, allgather_channel));
                const std::vector<std::size_t> sends = post_sends(out, next, allgather_channel);
                for (std::size_t id : recvs) m.wait(id);
                for (std::size_t id : sends) m.wait(id);
            }
        }

        void broadcast(int root) {
            const int v = (me() - root + p()) % p();
            const int upstream = v > 0 ? (root + v - 1) % p() : -1;
            const int downstream = v + 1 < p() ? (root + v + 1) % p() : -1;
            const std::size_t count = pieces(n());
            std::vector<std::size_t> recvs;
            if (upstream >= 0)
                for (std::size_t j = 0; j < count; ++j)
                    recvs.push_back(
                        m.receive(at(j * segment), piece(n(), j) * call.element_bytes, upstream, chain_channel));
            for (std::size_t j = 0; j < count; ++j) {
                if (upstream >= 0) m.wait(recvs[j]);
                if (downstream >= 0)
                    (void)m.send(at(j * segment), piece(n(), j) * call.element_bytes, downstream, chain_channel);
            }
        }
    };
};

namespace detail {
inline ring_direct_engine& the_ring_direct_engine() {
    static ring_direct_engine engine;
    return engine;
}
inline const bool ring_direct_engine_installed = (install_direct_engine(&the_ring_direct_engine()), true);
}  // namespace detail

}  // namespace hitch::cuda::allreduce
