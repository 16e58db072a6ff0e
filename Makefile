# hitch: the two commands.
#   make demo   installs what the demo needs, builds the trainer alone, trains the Fashion-MNIST example on 2 MPI
#               ranks
#   make test   installs what is missing, builds everything buildable here, runs the whole test suite, then a fast
#               share of the sanitizer suites (test-sanitizers-fast). Its share of the second compiler: the suite's
#               header check compiles every public header with clang too, and the ThreadSanitizer share is built
#               with clang.
# Further targets: make test-clang-threads (the thread-heavy families built and run with clang), make test-clang
# (every test family with clang), make test-tsan (the thread-heavy families under
# ThreadSanitizer), make test-asan (the whole suite under AddressSanitizer and UndefinedBehaviorSanitizer), make
# test-sanitizers-fast (make test's share of those two), make check-headers (every header on its own with g++ and
# clang), make format / format-check (.clang-format).
BUILD ?= build
CLANG_BUILD ?= build-clang
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The GPU architectures the CUDA tests and benchmarks are compiled for: this machine's GPU when it has one, else
# sm_90 alone, which is enough to check that every CUDA source compiles and links (a machine without a GPU skips the
# GPU tests) and halves nvcc's time. Code of your own that uses hitch::cuda keeps CMake's default, 80;90.
CUDA_ARCHS ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ' \
	| grep -E '^[0-9]+$$' || echo 90)
# The families whose tests run threads against each other, built a second time with clang by make
# test-clang-threads (the lower layers; train and sync, whose tests take most of the build, run under clang in make
# test-clang).
CLANG_FAMILIES ?= core;parallel;comm;allreduce
CLANG_EXAMPLES ?= OFF
# The families make test-tsan builds with ThreadSanitizer (their tests of threads in one process: MPI's processes
# are not instrumented).
TSAN_FAMILIES ?= core;parallel;comm;allreduce;exchange;train;sync
SANITIZER_FILES = $(CURDIR)/tests/sanitizers
# make test's share of the sanitizer suites (the heavier whole suites keep their own targets above): only these test
# programs are built. ThreadSanitizer: the thread pool, comm::local (with comm::agree and the roll calls), the
# group's progress thread (the non-blocking collectives' case) and the stall inspector's service threads (comm::local's
# [faults] cases, which mostly wait out deadlines, are left to test-tsan). AddressSanitizer + UndefinedBehaviorSanitizer:
# comm::local and comm::agree (its [abort] case too: a never-received in-place send releases its lease with the
# message) and the group with the stall inspector; the readers of outside bytes run under both in the
# fuzz tests. On dev-2c (2 cores): its builds took 300 s of CPU (about 150 s with 2 jobs), its runs 70 s: about 4
# minutes in all.
TSAN_FAST_TARGETS ?= hitch_test_parallel hitch_test_comm_local hitch_test_allreduce_collectives hitch_test_allreduce_stall
TSAN_FAST_RUNS ?= parallel/hitch_test_parallel "comm/hitch_test_comm_local ~[faults]" \
	"allreduce/hitch_test_allreduce_collectives [async]" allreduce/hitch_test_allreduce_stall
ASAN_FAST_TARGETS ?= hitch_test_comm_local hitch_test_allreduce_stall
ASAN_FAST_RUNS ?= "comm/hitch_test_comm_local ~[faults]" allreduce/hitch_test_allreduce_stall
TSAN_ENV = TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(SANITIZER_FILES)/tsan.supp" \
	HITCH_TEST_TIME_SCALE=4
ASAN_ENV = ASAN_OPTIONS="detect_leaks=1 abort_on_error=1" LSAN_OPTIONS="suppressions=$(SANITIZER_FILES)/lsan.supp" \
	UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1" HITCH_TEST_TIME_SCALE=2

.PHONY: all deps deps-demo configure configure-demo configure-test build test test-gcc test-clang-threads \
	test-clang test-tsan test-asan test-sanitizers-fast demo check-headers format format-check clean

all: build

deps:
	@scripts/install-deps.sh

# The build directory make build, make test and make demo share; they differ only in the trainers' loops' level.
CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)

configure: deps
	$(CONFIGURE) -DHITCH_TRAINER_OPTIMIZE= $(CMAKE_ARGS)

# make test checks results: the trainers' training loops at -O1, as make demo builds them (so a make test after a
# make demo reuses them); make build recompiles them at -O3 for the trainer figures.
configure-test: deps
	$(CONFIGURE) -DHITCH_TRAINER_OPTIMIZE=-O1 $(CMAKE_ARGS)

deps-demo:
	@scripts/install-deps.sh --demo

# The same build directory and flags as make test's, so a later make test reuses what the demo built.
configure-demo: deps-demo
	$(CONFIGURE) -DHITCH_TRAINER_OPTIMIZE=-O1 $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test-gcc: configure-test
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-clang-threads: deps
	cmake -S . -B $(CLANG_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
	  -DHITCH_BUILD_EXAMPLES=$(CLANG_EXAMPLES) -DHITCH_BUILD_BENCH=OFF -DHITCH_ENABLE_CUDA=OFF \
	  "-DHITCH_TEST_FAMILIES=$(CLANG_FAMILIES)" $(CMAKE_ARGS)
	cmake --build $(CLANG_BUILD) -j $(JOBS)
	ctest --test-dir $(CLANG_BUILD) --output-on-failure -j $(JOBS)

test: test-gcc
	$(MAKE) test-sanitizers-fast

# Each entry of *_FAST_RUNS is "<family>/<program> [Catch2 filter]", run from the build's tests/ directory.
test-sanitizers-fast: deps
	cmake -S . -B $(BUILD)-tsan-fast -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DHITCH_SANITIZE=thread -DHITCH_BUILD_EXAMPLES=OFF -DHITCH_BUILD_BENCH=OFF -DHITCH_ENABLE_CUDA=OFF \
	  "-DHITCH_TEST_FAMILIES=core;parallel;comm;allreduce" $(CMAKE_ARGS)
	cmake --build $(BUILD)-tsan-fast -j $(JOBS) --target $(TSAN_FAST_TARGETS)
	cd $(BUILD)-tsan-fast/tests && set -f && for run in $(TSAN_FAST_RUNS); do \
	  echo "ThreadSanitizer: $$run"; $(TSAN_ENV) HITCH_TIMEOUT_S=600 ./$$run || exit 1; done
	cmake -S . -B $(BUILD)-asan-fast -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DHITCH_SANITIZE=address;undefined" \
	  -DHITCH_BUILD_EXAMPLES=OFF -DHITCH_BUILD_BENCH=OFF -DHITCH_ENABLE_CUDA=OFF \
	  "-DHITCH_TEST_FAMILIES=comm;allreduce" $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan-fast -j $(JOBS) --target $(ASAN_FAST_TARGETS)
	cd $(BUILD)-asan-fast/tests && set -f && for run in $(ASAN_FAST_RUNS); do \
	  echo "AddressSanitizer + UndefinedBehaviorSanitizer: $$run"; $(ASAN_ENV) HITCH_TIMEOUT_S=600 ./$$run || exit 1; done

test-clang:
	$(MAKE) test-clang-threads CLANG_FAMILIES="" CLANG_BUILD=$(CLANG_BUILD)-all CLANG_EXAMPLES=ON

test-tsan: deps
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DHITCH_SANITIZE=thread \
	  -DHITCH_BUILD_EXAMPLES=OFF -DHITCH_BUILD_BENCH=OFF -DHITCH_ENABLE_CUDA=OFF "-DHITCH_TEST_FAMILIES=$(TSAN_FAMILIES)" \
	  $(CMAKE_ARGS)
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(SANITIZER_FILES)/tsan.supp" \
	  HITCH_TEST_TIME_SCALE=10 ctest --test-dir $(BUILD)-tsan -LE mpi --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DHITCH_SANITIZE=address;undefined" \
	  -DHITCH_ENABLE_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS="detect_leaks=1 abort_on_error=1" LSAN_OPTIONS="suppressions=$(SANITIZER_FILES)/lsan.supp" \
	  UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1" ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS)

demo: configure-demo
	cmake --build $(BUILD) -j $(JOBS) --target hitch-mnist
	@scripts/demo.sh $(BUILD)

# Every public header on its own with both compilers (make test's suite checks them with clang).
check-headers: deps
	scripts/check-headers.sh g++ $(JOBS)
	scripts/check-headers.sh clang++ $(JOBS)

format:
	@scripts/format.sh

format-check:
	@scripts/format.sh --check

clean:
	rm -rf $(BUILD) $(CLANG_BUILD) $(CLANG_BUILD)-all $(BUILD)-tsan $(BUILD)-asan $(BUILD)-tsan-fast $(BUILD)-asan-fast
