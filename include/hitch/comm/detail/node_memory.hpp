#pragma once
// hitch::comm::node_memory: one POSIX shared-memory mapping that every rank of a communicator on one node maps,
// `bytes_per_rank` bytes for each rank. Made collectively by a communicator (comm::mpi::map_node_memory); the name
// is unlinked as soon as every rank has mapped it, so nothing is left in /dev/shm once the processes end, and
// freeing it is local (munmap): no rank waits for another to let go.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "hitch/core/error.hpp"

namespace hitch::comm {

class node_memory {
public:
    node_memory(const node_memory&) = delete;
    node_memory& operator=(const node_memory&) = delete;
    ~node_memory() {
        if (base_ != nullptr) ::munmap(base_, total_);
    }

    /// Rank `r`'s part (bytes_per_rank() bytes, 4 KiB aligned); readable and writable by every rank.
    [[nodiscard]] std::byte* part(int r) const noexcept {
        return static_cast<std::byte*>(base_) + static_cast<std::size_t>(r) * bytes_per_rank_;
    }
    [[nodiscard]] std::size_t bytes_per_rank() const noexcept { return bytes_per_rank_; }
    [[nodiscard]] int ranks() const noexcept { return ranks_; }

    /// Rounds a part up to whole pages, so every rank's part starts on a page of its own.
    [[nodiscard]] static std::size_t part_bytes(std::size_t bytes) noexcept { return (bytes + 4095) / 4096 * 4096; }

    /// Creates (and reserves, so touching a page can never fault for want of space) the object `name` holding
    /// `ranks` parts, then maps it. Returns nullptr with `why` set when the system refuses.
    [[nodiscard]] static node_memory* create(const std::string& name, int ranks, std::size_t bytes_per_rank,
                                             std::string& why) {
        const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            why = hitch::detail::concat("shm_open(", name, "): ", std::strerror(errno));
            return nullptr;
        }
        const std::size_t total = part_bytes(bytes_per_rank) * static_cast<std::size_t>(ranks);
        const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
        if (reserved != 0) {
            why = hitch::detail::concat("reserving ", total, " bytes of shared memory: ", std::strerror(reserved));
            ::close(fd);
            ::shm_unlink(name.c_str());
            return nullptr;
        }
        node_memory* m = map(fd, ranks, bytes_per_rank, why);
        if (m == nullptr) ::shm_unlink(name.c_str());
        return m;
    }
    /// Maps the object another rank created.
    [[nodiscard]] static node_memory* open(const std::string& name, int ranks, std::size_t bytes_per_rank,
                                           std::string& why) {
        const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0) {
            why = hitch::detail::concat("shm_open(", name, "): ", std::strerror(errno));
            return nullptr;
        }
        struct stat st {};
        const std::size_t total = part_bytes(bytes_per_rank) * static_cast<std::size_t>(ranks);
        if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != total) {
            why = hitch::detail::concat("shared memory object ", name, " has ", st.st_size, " bytes, expected ", total);
            ::close(fd);
            return nullptr;
        }
        return map(fd, ranks, bytes_per_rank, why);
    }

private:
    node_memory(void* base, std::size_t total, std::size_t per_rank, int ranks)
        : base_(base), total_(total), bytes_per_rank_(per_rank), ranks_(ranks) {}

    static node_memory* map(int fd, int ranks, std::size_t bytes_per_rank, std::string& why) {
        const std::size_t per = part_bytes(bytes_per_rank);
        const std::size_t total = per * static_cast<std::size_t>(ranks);
        void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (base == MAP_FAILED) {
            why = hitch::detail::concat("mmap of ", total, " bytes of shared memory: ", std::strerror(errno));
            return nullptr;
        }
        return new node_memory(base, total, per, ranks);
    }

    void* base_ = nullptr;
    std::size_t total_ = 0;
    std::size_t bytes_per_rank_ = 0;
    int ranks_ = 0;
};

}  // namespace hitch::comm
