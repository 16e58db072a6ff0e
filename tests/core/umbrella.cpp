// hitch/hitch.hpp is host-only: it compiles without MPI or CUDA on the include path and pulls in neither.
#include "hitch/hitch.hpp"

#include <catch2/catch.hpp>

#if defined(MPI_VERSION) || defined(OMPI_MPI_H) || defined(MPICH_VERSION)
#error "hitch/hitch.hpp must not include <mpi.h>"
#endif
#if defined(__CUDA_RUNTIME_H__) || defined(CUDART_VERSION)
#error "hitch/hitch.hpp must not include CUDA headers"
#endif

TEST_CASE("the umbrella header gives the core, the concepts, the cpu device and comm::local", "[umbrella]") {
    STATIC_REQUIRE(hitch::device<hitch::cpu>);
    STATIC_REQUIRE(hitch::communicator<hitch::comm::local>);
    const auto sizes = hitch::comm::run_local(2, [](hitch::comm::local& comm) { return comm.size(); });
    CHECK(sizes == std::vector<int>{2, 2});
}
