#pragma once
// hitch::comm::node_memory: one POSIX shared-memory mapping that every rank of a communicator on one node maps,
// `bytes_per_rank` bytes for each rank. Made collectively by a communicator (comm::mpi::map_node_memory); the name
// is unlinked as soon as every rank has mapped it, so nothing is left in /dev/shm once the processes end, and
// freeing it is local (munmap): no rank waits for another to let go.
//
// Faults. A job killed in the short time between creating the object and unlinking it leaves its name behind:
// "/hitch-<pid of its creator>-<number>". The next mapping on the node first removes such names whose creator no
// longer runs (or that carry its own pid, from an earlier process that had it: pid reuse), and creates its own
// with O_EXCL, so it never attaches to an object it did not make. Too little shared memory (a small /dev/shm, or
// more than HITCH_SHM_LIMIT_BYTES asks) is refused before a page is touched: the space is reserved with
// posix_fallocate, so a rank never meets SIGBUS for want of it, and the communicator's callers fall back to messages.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "hitch/core/error.hpp"
#include "hitch/core/options.hpp"

namespace hitch::comm {

namespace detail {

/// Names this process is creating right now (between shm_open and shm_unlink): never stale.
struct node_memory_names {
    std::mutex m;
    std::set<std::string> in_flight;
    std::atomic<std::uint64_t> made{0};
};
[[nodiscard]] inline node_memory_names& own_node_memory_names() {
    static node_memory_names names;
    return names;
}

/// The pid in "hitch-<pid>-<number>" (an entry of /dev/shm, without the slash); 0 when the name is not hitch's.
[[nodiscard]] inline long creator_of(std::string_view entry) noexcept {
    constexpr std::string_view prefix = "hitch-";
    if (entry.substr(0, prefix.size()) != prefix) return 0;
    entry.remove_prefix(prefix.size());
    long pid = 0;
    std::size_t i = 0;
    for (; i < entry.size() && entry[i] >= '0' && entry[i] <= '9' && pid < (1L << 40); ++i)
        pid = pid * 10 + (entry[i] - '0');
    if (i == 0 || i >= entry.size() || entry[i] != '-' || i + 1 == entry.size()) return 0;
    for (std::size_t j = i + 1; j < entry.size(); ++j)
        if (entry[j] < '0' || entry[j] > '9') return 0;
    return pid;
}

/// HITCH_SHM_LIMIT_BYTES: the most shared memory one mapping may take (0 or unset: no limit beyond the system's).
[[nodiscard]] inline std::size_t shm_limit_from_environment() {
    const char* text = std::getenv("HITCH_SHM_LIMIT_BYTES");
    if (text == nullptr || *text == '\0') return 0;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end == text || *end != '\0' || *text == '-')
        option_validator("hitch: environment variable")
            .fail("HITCH_SHM_LIMIT_BYTES", std::string(text), "a whole number of bytes (0: no limit)");
    return static_cast<std::size_t>(value);
}

}  // namespace detail

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

    /// A fresh name for an object this process creates ("/hitch-<pid>-<number>"), marked in flight until
    /// finished_with(name): remove_stale() leaves it alone meanwhile.
    [[nodiscard]] static std::string new_name() {
        auto& names = detail::own_node_memory_names();
        std::string name = hitch::detail::concat("/hitch-", static_cast<long>(::getpid()), '-', names.made++);
        std::lock_guard lock(names.m);
        names.in_flight.insert(name);
        return name;
    }
    static void finished_with(const std::string& name) {
        auto& names = detail::own_node_memory_names();
        std::lock_guard lock(names.m);
        names.in_flight.erase(name);
    }
    /// The number the next new_name() will carry (for tests that leave a stale object in its way).
    [[nodiscard]] static std::uint64_t next_number() noexcept { return detail::own_node_memory_names().made.load(); }

    /// Removes from `directory` (where shm_open keeps its objects) the names of hitch's objects left by processes
    /// that no longer run, or by an earlier process with this one's pid, and not in flight here; returns them.
    /// An object a live process of another job is creating is left alone (its pid answers kill(pid, 0)).
    static std::vector<std::string> remove_stale(const std::filesystem::path& directory = "/dev/shm") {
        std::vector<std::string> removed;
        std::error_code ec;
        std::filesystem::directory_iterator it(directory, ec), end;
        const long me = static_cast<long>(::getpid());
        auto& names = detail::own_node_memory_names();
        for (; !ec && it != end; it.increment(ec)) {
            const std::string entry = it->path().filename().string();
            const long pid = detail::creator_of(entry);
            if (pid <= 0) continue;
            bool stale = false;
            if (pid == me) {
                std::lock_guard lock(names.m);
                stale = names.in_flight.count("/" + entry) == 0;
            } else if (pid <= static_cast<long>(std::numeric_limits<pid_t>::max())) {
                stale = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
            }
            if (stale && ::shm_unlink(("/" + entry).c_str()) == 0) removed.push_back(entry);
        }
        return removed;
    }

    /// Creates (and reserves, so touching a page can never fault for want of space) the object `name` holding
    /// `ranks` parts, then maps it. Returns nullptr with `why` set when the system refuses, when the name exists
    /// (it never attaches to an object it did not make), or when the whole would exceed `limit` bytes (0: none).
    [[nodiscard]] static node_memory* create(const std::string& name, int ranks, std::size_t bytes_per_rank,
                                             std::string& why, std::size_t limit = 0) {
        const std::size_t total = part_bytes(bytes_per_rank) * static_cast<std::size_t>(ranks);
        if (limit != 0 && total > limit) {
            why = hitch::detail::concat(total, " bytes of shared memory are more than the limit of ", limit,
                                        " (HITCH_SHM_LIMIT_BYTES)");
            return nullptr;
        }
        const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) {
            why = hitch::detail::concat("shm_open(", name, "): ", std::strerror(errno));
            return nullptr;
        }
        const int reserved = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
        if (reserved != 0) {
            why = hitch::detail::concat("reserving ", total, " bytes of shared memory for ", name, ": ",
                                        std::strerror(reserved),
                                        reserved == ENOSPC ? " (/dev/shm is too small: see docs/reliability.md)" : "");
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
