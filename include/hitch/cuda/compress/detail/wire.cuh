#pragma once
// Messages in device memory: the device message type, the sealing of a message whose payload a kernel wrote, and the
// decode-side checks, which report what compress::wire::open reports for the same bytes. The pieces every GPU codec
// builds on (include/hitch/cuda/compress/*.cuh). nvcc only.
//
//   encode:  message_writer w(dev, msg, codec_id, type, count, payload_bytes);
//            ...kernels write w.payload() (device memory)...
//            w.finish();                      // payload CRC on the GPU, header written by compress::wire's code
//            (or w.finish(raw) with a payload CRC the codec's kernels computed themselves, e.g. join_tiles)
//   decode:  const device_message_view m = open(dev, bytes, {who, codec_id});   // header on the host, CRC on the GPU
//            payload_reader r(dev, m, who);   // compress::wire::reader's checks and texts over a device payload
//
// Everything runs on the device's stream; a call returns once its kernels are queued, except where the host must
// see a value (open, payload_reader's reads, read_back).
#if !defined(__CUDACC__)
#error "hitch/cuda/compress/detail/wire.cuh is CUDA code: compile it with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <cub/device/device_reduce.cuh>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "hitch/compress/wire.hpp"
#include "hitch/core/dtype.hpp"
#include "hitch/core/error.hpp"
#include "hitch/core/tensor.hpp"
#include "hitch/cuda/compress/detail/crc32c.cuh"
#include "hitch/cuda/compress/detail/wire.hpp"
#include "hitch/cuda/detail/launch.cuh"
#include "hitch/cuda/device.hpp"

namespace hitch::cuda::compress {

namespace wire = hitch::compress::wire;

/// A compressed message in device memory: `size()` bytes at `data()` (a device pointer), the size known on the host.
/// The bytes are those of the host codecs' messages (compress/wire.hpp); to_host() and assign() move them across.
/// Move-only; its memory comes from the device's stream-ordered allocator and grows as needed.
class device_message {
public:
    device_message() = default;
    explicit device_message(cuda::device& dev, std::size_t capacity = 0) : device_(&dev) { reserve(capacity); }
    device_message(const device_message&) = delete;
    device_message& operator=(const device_message&) = delete;
    device_message(device_message&& other) noexcept
        : device_(other.device_),
          data_(std::exchange(other.data_, nullptr)),
          size_(std::exchange(other.size_, 0)),
          capacity_(std::exchange(other.capacity_, 0)) {}
    device_message& operator=(device_message&& other) noexcept {
        if (this != &other) {
            release();
            device_ = other.device_;
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
            capacity_ = std::exchange(other.capacity_, 0);
        }
        return *this;
    }
    ~device_message() { release(); }

    [[nodiscard]] std::byte* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The message as a view of device bytes (what the decoders take).
    [[nodiscard]] tensor_view<const std::byte> view() const noexcept { return {data_, size_, memory_space::cuda}; }
    /// The device whose memory holds the bytes (null for a default-constructed message not yet used).
    [[nodiscard]] cuda::device* device() const noexcept { return device_; }

    /// Ties a default-constructed message to `dev`; a message of another device is refused.
    void bind(cuda::device& dev) {
        if (device_ == nullptr) device_ = &dev;
        if (device_ != &dev)
            throw config_error("hitch::cuda::compress::device_message: the message belongs to another device");
    }
    /// Room for `bytes` without reallocating (the bytes are not kept when it grows).
    void reserve(std::size_t bytes) {
        if (bytes <= capacity_) return;
        require_device();
        release();
        data_ = static_cast<std::byte*>(device_->allocate_bytes(bytes));
        capacity_ = bytes;
    }
    /// Sets the size to `bytes`; their contents are unspecified until a kernel writes them.
    void prepare(std::size_t bytes) {
        reserve(bytes);
        size_ = bytes;
    }
    /// Copies the message to the host (waits for the stream).
    void to_host(std::vector<std::byte>& out) const {
        out.resize(size_);
        if (size_ != 0) device_->copy_to_host(out.data(), data_, size_);
    }
    [[nodiscard]] std::vector<std::byte> to_host() const {
        std::vector<std::byte> out;
        to_host(out);
        return out;
    }
    /// Replaces the message by host bytes (a message received by a host rank, say).
    void assign(std::span<const std::byte> bytes) {
        prepare(bytes.size());
        if (!bytes.empty()) device_->copy_from_host(data_, bytes.data(), bytes.size());
    }

private:
    void require_device() const {
        if (device_ == nullptr)
            throw config_error(
                "hitch::cuda::compress::device_message: the message has no device yet: construct it with one or "
                "bind() it");
    }
    void release() noexcept {
        if (data_ != nullptr) device_->deallocate_bytes(data_, capacity_);
        data_ = nullptr;
        size_ = 0;
        capacity_ = 0;
    }

    cuda::device* device_ = nullptr;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

namespace detail {

/// An uninitialised device array for one call's intermediate values, freed in stream order when it goes out of scope
/// (the kernels queued before then still see it).
template <class T>
class device_scratch {
public:
    device_scratch(cuda::device& dev, std::size_t count) : device_(&dev), count_(count) {
        if (count != 0) data_ = static_cast<T*>(dev.allocate_bytes(count * sizeof(T)));
    }
    device_scratch(const device_scratch&) = delete;
    device_scratch& operator=(const device_scratch&) = delete;
    ~device_scratch() {
        if (data_ != nullptr) device_->deallocate_bytes(data_, count_ * sizeof(T));
    }
    [[nodiscard]] T* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    /// Sets every byte to zero (queued).
    void zero() {
        if (count_ != 0) device_->fill_zero(data_, count_ * sizeof(T));
    }

private:
    cuda::device* device_;
    T* data_ = nullptr;
    std::size_t count_;
};

/// Makes the device current for the kernels launched next.
inline void activate(cuda::device& dev) { cuda::detail::check(cudaSetDevice(dev.ordinal()), "cudaSetDevice"); }

/// One value from device memory (waits for the stream).
template <class T>
[[nodiscard]] T read_back(cuda::device& dev, const T* p) {
    T v{};
    dev.copy_to_host(&v, p, sizeof(T));
    return v;
}

/// Refuses a view that is not in CUDA memory, with the codec's name.
template <class T>
void require_device(const tensor_view<T>& v, std::string_view who) {
    if (v.space() != memory_space::cuda)
        throw config_error(hitch::detail::concat(who, ": the bucket is in ", name(v.space()),
                                                 " memory; the GPU codecs need CUDA memory (use the host codec, or "
                                                 "copy the bucket to the device)"));
}

/// Blocks of a grid-stride kernel over `tiles` tiles (at most launch.hpp's cap).
[[nodiscard]] inline unsigned tile_grid(std::size_t tiles) { return cuda::detail::grid_blocks(tiles, 1, 1); }

/// *out = XOR of `tiles` tile contributions (the payload's raw CRC32C state), by a CUB device reduction.
inline void join_tiles(cuda::device& dev, const std::uint32_t* contributions, std::size_t tiles, std::uint32_t* out) {
    if (tiles == 0) {
        cuda::detail::check(cudaMemsetAsync(out, 0, sizeof(std::uint32_t), dev.stream()), "cudaMemsetAsync");
        return;
    }
    if (tiles == 1) {
        cuda::detail::check(
            cudaMemcpyAsync(out, contributions, sizeof(std::uint32_t), cudaMemcpyDeviceToDevice, dev.stream()),
            "cudaMemcpyAsync D2D");
        return;
    }
    std::size_t temp_bytes = 0;
    cuda::detail::check(cub::DeviceReduce::Reduce(nullptr, temp_bytes, contributions, out, tiles, crc32c_xor{},
                                                  std::uint32_t{0}, dev.stream()),
                        "cub::DeviceReduce::Reduce");
    device_scratch<std::byte> temp(dev, temp_bytes);
    cuda::detail::check(cub::DeviceReduce::Reduce(temp.data(), temp_bytes, contributions, out, tiles, crc32c_xor{},
                                                  std::uint32_t{0}, dev.stream()),
                        "cub::DeviceReduce::Reduce");
}

/// *out = the raw CRC32C state (from 0) of the n device bytes at p: per-tile kernel, then join_tiles (queued).
inline void payload_crc(cuda::device& dev, const std::byte* p, std::size_t n, std::uint32_t* out) {
    activate(dev);
    const std::size_t tiles = crc_tiles(n);
    if (tiles == 0) {
        join_tiles(dev, nullptr, 0, out);
        return;
    }
    device_scratch<std::uint32_t> contributions(dev, tiles);
    crc32c_tiles_kernel<<<tile_grid(tiles), crc_tile_threads, 0, dev.stream()>>>(
        reinterpret_cast<const unsigned char*>(p), n, tiles == 1 ? out : contributions.data());
    cuda::detail::check_launch("hitch::cuda::compress crc32c_tiles_kernel");
    if (tiles > 1) join_tiles(dev, contributions.data(), tiles, out);
}

/// Up to 64 bytes a kernel copies into device memory (a payload's fixed fields), so no host copy waits for them.
struct small_bytes {
    unsigned char b[64];
};

static __global__ void store_small_kernel(unsigned char* to, small_bytes from, unsigned count) {
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x) to[i] = from.b[i];
}

/// Copies `bytes` (at most 64, host memory) to device memory at `to` (queued; the host bytes may go at once).
inline void store_small(cuda::device& dev, std::byte* to, std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    if (bytes.size() > sizeof(small_bytes))
        throw config_error("hitch::cuda::compress: store_small takes at most 64 bytes");
    small_bytes from{};
    for (std::size_t i = 0; i < bytes.size(); ++i) from.b[i] = static_cast<unsigned char>(bytes[i]);
    activate(dev);
    store_small_kernel<<<1, 64, 0, dev.stream()>>>(reinterpret_cast<unsigned char*>(to), from,
                                                   static_cast<unsigned>(bytes.size()));
    cuda::detail::check_launch("hitch::cuda::compress store_small_kernel");
}

/// The header of a message, as eight words a kernel writes.
struct header_words {
    std::uint32_t w[wire::header_bytes / 4];
};

static __global__ void seal_kernel(std::uint32_t* head, header_words words, std::uint32_t head_shifted,
                                   const std::uint32_t* payload_raw) {
    const unsigned k = threadIdx.x;
    if (k < 7) head[k] = words.w[k];
    if (k == 7) head[7] = seal_checksum(head_shifted, *payload_raw);
}

/// Writes the header of `h` (compress::wire::write_header's bytes) and its checksum over the payload whose raw state
/// the device holds at payload_raw, at the start of `message` (queued).
inline void seal(cuda::device& dev, std::byte* message, const wire::header& h, const std::uint32_t* payload_raw) {
    const header_plan plan = plan_header(h);
    header_words words{};
    for (std::size_t k = 0; k < plan.words.size(); ++k) words.w[k] = plan.words[k];
    activate(dev);
    seal_kernel<<<1, 32, 0, dev.stream()>>>(reinterpret_cast<std::uint32_t*>(message), words, plan.head_shifted,
                                            payload_raw);
    cuda::detail::check_launch("hitch::cuda::compress seal_kernel");
}

}  // namespace detail

/// Builds one message in a device_message: the constructor sizes it for header + payload, the codec's kernels write
/// payload(), finish() seals it (compress::wire::writer's counterpart for device memory).
class message_writer {
public:
    message_writer(cuda::device& dev, device_message& out, std::uint8_t codec, dtype type, std::uint64_t count,
                   std::size_t payload_bytes)
        : dev_(dev), out_(out), raw_(dev, 1) {
        head_.codec = codec;
        head_.type = type;
        head_.count = count;
        head_.payload_bytes = payload_bytes;
        out_.bind(dev);
        out_.prepare(wire::header_bytes + payload_bytes);
    }
    /// Where the payload goes (device memory, 8-byte aligned).
    [[nodiscard]] std::byte* payload() const noexcept { return out_.data() + wire::header_bytes; }
    [[nodiscard]] std::size_t payload_bytes() const noexcept { return head_.payload_bytes; }
    /// Device storage for the payload's raw CRC32C state, for codecs that compute it themselves (join_tiles).
    [[nodiscard]] std::uint32_t* payload_raw() const noexcept { return raw_.data(); }

    /// Checksums the payload on the GPU and seals the message; returns its size (queued).
    std::size_t finish() {
        detail::payload_crc(dev_, payload(), head_.payload_bytes, raw_.data());
        return finish_with_payload_crc();
    }
    /// Seals the message with the payload state already at payload_raw() (queued).
    std::size_t finish_with_payload_crc() {
        detail::seal(dev_, out_.data(), head_, raw_.data());
        return out_.size();
    }

private:
    cuda::device& dev_;
    device_message& out_;
    wire::header head_;
    detail::device_scratch<std::uint32_t> raw_;
};

/// A checked message in device memory: its header (on the host) and its payload (device pointer).
struct device_message_view {
    wire::header head;
    const std::byte* payload = nullptr;
    std::size_t payload_bytes = 0;
};

/// compress::wire::open for a message in device memory: the header is copied to the host and checked by
/// wire::check_header, the payload's CRC32C computed on the GPU and checked by wire::check_checksum, so a damaged
/// message gets the corrupt_message_error open() gives for the same bytes. Waits for the stream.
[[nodiscard]] inline device_message_view open(cuda::device& dev, tensor_view<const std::byte> bytes,
                                              const wire::expect& e) {
    detail::require_device(bytes, e.who);
    std::array<std::byte, wire::header_bytes> head{};
    const std::size_t got = std::min(bytes.size(), wire::header_bytes);
    if (got != 0) dev.copy_to_host(head.data(), bytes.data(), got);
    const wire::header h = wire::check_header(std::span<const std::byte>(head.data(), got), bytes.size(), e);
    const std::size_t payload_bytes = bytes.size() - wire::header_bytes;
    detail::device_scratch<std::uint32_t> raw(dev, 1);
    detail::payload_crc(dev, bytes.data() + wire::header_bytes, payload_bytes, raw.data());
    const std::uint32_t payload_raw = detail::read_back(dev, raw.data());
    wire::check_checksum(h, detail::message_checksum(head, payload_bytes, payload_raw), e.who);
    return {h, bytes.data() + wire::header_bytes, payload_bytes};
}

/// compress::wire::expect_count for a device message.
inline void expect_count(const device_message_view& m, std::size_t count, std::string_view who) {
    wire::expect_count(wire::message_view{m.head, {}}, count, who);
}

/// compress::wire::reader over a payload in device memory: every bounds check and failure text is wire::reader's
/// (a reader over the device span, which only counts), and the values get() returns are copied from the device (the
/// first `prefetch` bytes in one copy when it is made).
class payload_reader {
public:
    payload_reader(cuda::device& dev, const device_message_view& m, std::string_view who, std::size_t prefetch = 64)
        : dev_(dev), base_(m.payload), r_(std::span<const std::byte>(m.payload, m.payload_bytes), who), who_(who) {
        front_.resize(std::min(prefetch, m.payload_bytes));
        if (!front_.empty()) dev.copy_to_host(front_.data(), base_, front_.size());
    }

    template <class T>
    [[nodiscard]] T get(std::string_view what) {
        const std::span<const std::byte> at = r_.take(sizeof(T), what);
        return wire::load_le<T>(host_bytes(at).data());
    }
    /// wire::reader::count: a u64 at most `limit`, with its text.
    [[nodiscard]] std::uint64_t count(std::string_view what, std::uint64_t limit) {
        const std::span<const std::byte> at = r_.take(sizeof(std::uint64_t), what);
        wire::reader one(host_bytes(at), who_);
        return one.count(what, limit);
    }
    /// The next n bytes, as a device span.
    [[nodiscard]] std::span<const std::byte> take(std::uint64_t n, std::string_view what) { return r_.take(n, what); }
    [[nodiscard]] std::span<const std::byte> rest() const noexcept { return r_.rest(); }
    [[nodiscard]] std::size_t position() const noexcept { return r_.position(); }
    [[nodiscard]] std::size_t remaining() const noexcept { return r_.remaining(); }
    void expect_end() const { r_.expect_end(); }
    [[noreturn]] void fail(std::string_view what) const { r_.fail(what); }
    /// Bytes of the payload (a device span from take()) copied to the host.
    [[nodiscard]] std::vector<std::byte> copy(std::span<const std::byte> device_bytes) const {
        std::vector<std::byte> out(device_bytes.size());
        if (!out.empty()) dev_.copy_to_host(out.data(), device_bytes.data(), out.size());
        return out;
    }

private:
    std::span<const std::byte> host_bytes(std::span<const std::byte> device_bytes) {
        const auto offset = static_cast<std::size_t>(device_bytes.data() - base_);
        if (offset + device_bytes.size() <= front_.size())
            return std::span<const std::byte>(front_.data() + offset, device_bytes.size());
        scratch_ = copy(device_bytes);
        return scratch_;
    }

    cuda::device& dev_;
    const std::byte* base_;
    wire::reader r_;
    std::string_view who_;
    std::vector<std::byte> front_;
    std::vector<std::byte> scratch_;
};

}  // namespace hitch::cuda::compress
