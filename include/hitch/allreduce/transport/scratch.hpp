#pragma once
// Memory a group keeps between calls: the scratch arena the transport's calls lease buffers from, and typed slots
// for objects schedules build once per communicator (hierarchical's sub-communicators, automatic's measurements).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hitch::allreduce {

/// Reusable scratch memory of one group: buffers are handed out per call and come back when the call ends, so a
/// steady stream of collectives allocates (and page-faults) nothing.
class scratch_arena {
public:
    class lease {
    public:
        lease() = default;
        lease(const lease&) = delete;
        lease& operator=(const lease&) = delete;
        lease(lease&& o) noexcept
            : arena_(std::exchange(o.arena_, nullptr)), index_(o.index_), data_(o.data_), bytes_(o.bytes_) {}
        lease& operator=(lease&& o) noexcept {
            if (this != &o) {
                give_back();
                arena_ = std::exchange(o.arena_, nullptr);
                index_ = o.index_;
                data_ = o.data_;
                bytes_ = o.bytes_;
            }
            return *this;
        }
        ~lease() { give_back(); }
        [[nodiscard]] std::byte* data() const noexcept { return data_; }
        [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

    private:
        friend class scratch_arena;
        lease(scratch_arena* a, std::size_t i, std::byte* d, std::size_t b)
            : arena_(a), index_(i), data_(d), bytes_(b) {}
        void give_back() noexcept {
            if (arena_ != nullptr) arena_->release(index_);
            arena_ = nullptr;
        }
        scratch_arena* arena_ = nullptr;
        std::size_t index_ = 0;
        std::byte* data_ = nullptr;
        std::size_t bytes_ = 0;
    };

    scratch_arena() = default;
    scratch_arena(const scratch_arena&) = delete;
    scratch_arena& operator=(const scratch_arena&) = delete;

    /// At least `bytes` bytes, 64-byte aligned, until the lease is destroyed.
    [[nodiscard]] lease acquire(std::size_t bytes) {
        bytes = std::max<std::size_t>(bytes, 64);
        std::lock_guard lock(m_);
        std::size_t best = buffers_.size();
        for (std::size_t i = 0; i < buffers_.size(); ++i)
            if (!buffers_[i].in_use && buffers_[i].bytes >= bytes &&
                (best == buffers_.size() || buffers_[i].bytes < buffers_[best].bytes))
                best = i;
        if (best == buffers_.size()) {
            // Replace the largest idle buffer that is too small, so the arena does not grow without bound.
            for (std::size_t i = 0; i < buffers_.size(); ++i)
                if (!buffers_[i].in_use) {
                    best = i;
                    break;
                }
            if (best == buffers_.size()) buffers_.emplace_back();
            auto& b = buffers_[best];
            b.memory.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})));
            b.bytes = bytes;
        }
        buffers_[best].in_use = true;
        return lease(this, best, buffers_[best].memory.get(), buffers_[best].bytes);
    }

    /// Bytes held (in use or idle).
    [[nodiscard]] std::size_t capacity() const {
        std::lock_guard lock(m_);
        std::size_t total = 0;
        for (const auto& b : buffers_) total += b.bytes;
        return total;
    }

private:
    struct aligned_delete {
        void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
    };
    struct buffer {
        std::unique_ptr<std::byte[], aligned_delete> memory;
        std::size_t bytes = 0;
        bool in_use = false;
    };
    void release(std::size_t i) noexcept {
        std::lock_guard lock(m_);
        buffers_[i].in_use = false;
    }
    mutable std::mutex m_;
    std::vector<buffer> buffers_;
};

/// Names an object of type T in a slot_store: the same name with another type is another slot, so a reader can
/// never take an object for what it is not.
template <class T>
struct slot_key {
    std::string_view name;
};

/// Objects kept per communicator, keyed by slot_key<T>. Thread-safe.
class slot_store {
public:
    /// The object under `key`, or null.
    template <class T>
    [[nodiscard]] std::shared_ptr<T> find(slot_key<T> key) const {
        std::lock_guard lock(m_);
        const auto it = objects_.find(index{tag_of<T>(), key.name});
        return it == objects_.end() ? nullptr : std::static_pointer_cast<T>(it->second);
    }
    /// Stores `object` under `key`, replacing what was there.
    template <class T>
    void put(slot_key<T> key, std::shared_ptr<T> object) {
        std::lock_guard lock(m_);
        objects_.insert_or_assign(owned{tag_of<T>(), std::string(key.name)}, std::move(object));
        version_.store(next_version(), std::memory_order_release);
    }
    /// Changes whenever an object is stored or erased, and differs between stores (a process-wide counter): a
    /// reader that cached what find() gave may keep using it while the version it saw is still the store's.
    [[nodiscard]] std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }
    /// The object under `key`, made by `make()` (returning std::shared_ptr<T>) on first use. make() runs outside the
    /// lock, so it may run collectives: every rank reaches the same first use in the same call.
    template <class T, class Make>
    std::shared_ptr<T> get_or_make(slot_key<T> key, Make&& make) {
        if (auto found = find(key)) return found;
        std::shared_ptr<T> made = make();
        std::lock_guard lock(m_);
        const auto [it, inserted] = objects_.emplace(owned{tag_of<T>(), std::string(key.name)}, std::move(made));
        if (inserted) version_.store(next_version(), std::memory_order_release);
        return std::static_pointer_cast<T>(it->second);
    }
    template <class T>
    void erase(slot_key<T> key) {
        std::lock_guard lock(m_);
        if (const auto it = objects_.find(index{tag_of<T>(), key.name}); it != objects_.end()) {
            objects_.erase(it);
            version_.store(next_version(), std::memory_order_release);
        }
    }

private:
    static std::uint64_t next_version() noexcept {
        static std::atomic<std::uint64_t> counter{0};
        return counter.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    template <class T>
    static const void* tag_of() noexcept {
        static constexpr char tag = 0;  // one address per type
        return &tag;
    }
    using index = std::pair<const void*, std::string_view>;
    using owned = std::pair<const void*, std::string>;
    struct order {
        using is_transparent = void;
        template <class A, class B>
        bool operator()(const A& a, const B& b) const noexcept {
            if (a.first != b.first) return std::less<const void*>{}(a.first, b.first);
            return std::string_view(a.second) < std::string_view(b.second);
        }
    };
    mutable std::mutex m_;
    std::map<owned, std::shared_ptr<void>, order> objects_;
    std::atomic<std::uint64_t> version_{next_version()};
};

}  // namespace hitch::allreduce
