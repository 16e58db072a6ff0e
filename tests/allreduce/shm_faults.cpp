// Shared-memory faults of the staged path over comm::mpi (2 and 3 processes on one node): what killed jobs left in
// /dev/shm (a dead creator's object, an object with this process's own pid from an earlier process that had it, in
// the way of the next name) is removed before a group maps its pipes, and never attached to; a live process's object
// is left alone; a mapping larger than mpi_options::shm_limit_bytes (HITCH_SHM_LIMIT_BYTES) is refused on every rank
// alike, the calls take messages, and the observer hears why once; nothing of hitch's is left in /dev/shm after.
// "[.small_shm]" (run by run_small_shm.cmake under a private, small /dev/shm): a /dev/shm with too little room left
// is refused the same way (ENOSPC, before any page is touched) and a later group maps once there is room again.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hitch/allreduce/allreduce.hpp"
#include "hitch/comm/mpi.hpp"

using namespace hitch::allreduce;
using hitch::comm::mpi;

namespace {

bool everywhere(bool ok) {
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

/// Makes a POSIX shared-memory object of `bytes` bytes named `name` ("/..."), as a killed job would have left it.
void leave_object(const std::string& name, std::size_t bytes) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(bytes)) == 0);
    ::close(fd);
}
bool exists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

/// A pid no process has now.
long dead_pid() {
    for (long pid = 4000000; pid > 1000; pid -= 7919)
        if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return pid;
    return 0;
}

/// hitch's objects in /dev/shm created by this job's rank 0 (its pid is in their names).
std::vector<std::string> objects_of(long pid) {
    std::vector<std::string> out;
    const std::string prefix = "hitch-" + std::to_string(pid) + "-";
    if (std::filesystem::exists("/dev/shm"))
        for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
            if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
    return out;
}

long rank0_pid() {
    long pid = static_cast<long>(::getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return pid;
}

bool sums_right(group<mpi>& g, int p) {
    std::vector<float> v(300000, 1.0f);
    allreduce(g, hitch::view(v), reduce_op::sum, ring{});
    bool ok = true;
    for (const float x : v) ok = ok && x == static_cast<float>(p);
    return ok;
}

}  // namespace

TEST_CASE("shm faults: objects killed jobs left are removed and never attached to; live ones stay",
          "[allreduce][mpi][shm_faults]") {
    mpi comm;
    const int me = comm.rank(), p = comm.size();
    const long creator = rank0_pid();
    std::string dead, own, live;
    if (me == 0) {
        const long gone = dead_pid();
        REQUIRE(gone != 0);
        dead = "/hitch-" + std::to_string(gone) + "-7";
        // What an earlier process with this pid left, under the very name this one makes next (1 byte, not a
        // mapping of pipes: attaching to it would fail or corrupt).
        own = "/hitch-" + std::to_string(creator) + "-" + std::to_string(hitch::comm::node_memory::next_number());
        live = "/hitch-" + std::to_string(static_cast<long>(::getppid())) + "-3";  // the launcher's: alive
        leave_object(dead, 4096);
        leave_object(own, 1);
        leave_object(live, 4096);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    {
        group g(comm);
        bool staged = false;
        call_options o;
        o.check = false;
        g.run(
            o,
            [] {
                call_descriptor d;
                d.operation = static_cast<std::uint8_t>(operation::allreduce);
                d.set_schedule("probe");
                return d;
            },
            [&](transport<mpi>& t, const call_descriptor&) { staged = t.staged(); });
        CHECK(staged);
        CHECK(g.shared_memory_refusal().empty());
        REQUIRE(everywhere(staged && sums_right(g, p)));
    }
    if (me == 0) {
        CHECK(!exists(dead));
        CHECK(!exists(own));
        CHECK(exists(live));
        ::shm_unlink(live.c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    REQUIRE(everywhere(objects_of(creator).empty()));
}

TEST_CASE("shm faults: an existing name is refused, not attached to; a wrong size is refused",
          "[allreduce][mpi][shm_faults]") {
    mpi comm;
    if (comm.rank() == 0) {
        const std::string name = hitch::comm::node_memory::new_name();
        std::string why;
        std::unique_ptr<hitch::comm::node_memory> first(hitch::comm::node_memory::create(name, 2, 4096, why));
        REQUIRE(first != nullptr);
        std::unique_ptr<hitch::comm::node_memory> again(hitch::comm::node_memory::create(name, 2, 4096, why));
        CHECK(again == nullptr);
        CHECK(why.find("shm_open(" + name + "): File exists") != std::string::npos);
        std::unique_ptr<hitch::comm::node_memory> other(hitch::comm::node_memory::open(name, 3, 4096, why));
        CHECK(other == nullptr);
        CHECK(why.find("has 8192 bytes, expected 12288") != std::string::npos);
        ::shm_unlink(name.c_str());
        hitch::comm::node_memory::finished_with(name);
        // Names: "hitch-<pid>-<n>" only.
        CHECK(hitch::comm::detail::creator_of("hitch-123-4") == 123);
        CHECK(hitch::comm::detail::creator_of("hitch-123-") == 0);
        CHECK(hitch::comm::detail::creator_of("hitch--4") == 0);
        CHECK(hitch::comm::detail::creator_of("hitch-12x-4") == 0);
        CHECK(hitch::comm::detail::creator_of("sem.hitch-1-2") == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("shm faults: a mapping over the limit is refused everywhere; messages carry the calls; told once",
          "[allreduce][mpi][shm_faults]") {
    hitch::comm::mpi_options mo;
    mo.shm_limit_bytes = 64 * 1024;  // the pipes need about 1 MiB per rank
    mpi comm(MPI_COMM_WORLD, mo);
    const int me = comm.rank(), p = comm.size();
    const long creator = rank0_pid();
    std::vector<std::string> notices;
    hitch::observer watch;
    watch.notice = [&](const std::string& line) { notices.push_back(line); };
    {
        group g(comm, watch);
        INFO(g.shared_memory_refusal());
        CHECK(g.shared_memory_refusal().find("rank 0: ") == 0);
        CHECK(g.shared_memory_refusal().find("bytes of shared memory are more than the limit of 65536 "
                                             "(HITCH_SHM_LIMIT_BYTES)") != std::string::npos);
        CHECK(comm.split(0, me).map_node_memory(1 << 20) == nullptr);  // the limit travels with split()
        REQUIRE(everywhere(!g.shared_memory_refusal().empty() && sums_right(g, p)));
    }
    if (me == 0) {
        REQUIRE(notices.size() == 1);
        CHECK(notices[0].find("hitch: shared memory refused (rank 0: ") == 0);
        CHECK(notices[0].find("); this group's calls take messages") != std::string::npos);
    } else {
        CHECK(notices.empty());
    }
    // Under the limit the same communicator maps.
    CHECK(comm.map_node_memory(1024) != nullptr);
    CHECK(comm.node_memory_refusal().empty());
    MPI_Barrier(MPI_COMM_WORLD);
    REQUIRE(everywhere(objects_of(creator).empty()));
}

TEST_CASE("shm faults: HITCH_SHM_LIMIT_BYTES is read and checked", "[allreduce][mpi][shm_faults]") {
    ::setenv("HITCH_SHM_LIMIT_BYTES", "12345", 1);
    CHECK(hitch::comm::mpi_options{}.shm_limit_bytes == 12345);
    ::setenv("HITCH_SHM_LIMIT_BYTES", "a lot", 1);
    CHECK_THROWS_WITH(hitch::comm::mpi_options{},
                      Catch::Contains("HITCH_SHM_LIMIT_BYTES") && Catch::Contains("a whole number of bytes"));
    ::unsetenv("HITCH_SHM_LIMIT_BYTES");
    CHECK(hitch::comm::mpi_options{}.shm_limit_bytes == 0);
}

TEST_CASE("shm faults: a /dev/shm with too little room is refused before any page is touched",
          "[.small_shm][allreduce][mpi]") {
    mpi comm;
    const int me = comm.rank(), p = comm.size();
    const std::string filler = "/dev/shm/hitch-test-filler";
    if (me == 0) {
        // Leave 256 KiB free: MPI's own shared memory is already mapped, the pipes need about 1 MiB per rank.
        struct statvfs fs {};
        REQUIRE(::statvfs("/dev/shm", &fs) == 0);
        const auto free_bytes = static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize;
        INFO("free in /dev/shm: " << free_bytes);
        REQUIRE(free_bytes <
                (std::size_t{1} << 30));  // a private small /dev/shm (run_small_shm.cmake), never the real one
        const int fd = ::open(filler.c_str(), O_CREAT | O_RDWR, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::posix_fallocate(fd, 0, static_cast<off_t>(free_bytes - (std::size_t{256} << 10))) == 0);
        ::close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    {
        group g(comm);
        INFO(g.shared_memory_refusal());
        CHECK(g.shared_memory_refusal().find("rank 0: reserving ") == 0);
        CHECK(g.shared_memory_refusal().find("No space left on device (/dev/shm is too small") != std::string::npos);
        REQUIRE(everywhere(!g.shared_memory_refusal().empty() && sums_right(g, p)));
    }
    if (me == 0) std::filesystem::remove(filler);
    MPI_Barrier(MPI_COMM_WORLD);
    {
        group g(comm);  // room again: the pipes are mapped
        REQUIRE(everywhere(g.shared_memory_refusal().empty() && sums_right(g, p)));
    }
    REQUIRE(everywhere(objects_of(rank0_pid()).empty()));
}
