# hitch: the two commands.
#   make demo   installs what the demo needs, builds the trainer alone, trains the Fashion-MNIST example on 2 MPI
#               ranks
#   make test   installs what is missing, builds everything buildable here, runs the whole test suite, then
#               builds the thread-heavy test families with clang and runs them too
# Further targets: make test-clang (every test family with clang), make test-tsan (the thread-heavy families under
# ThreadSanitizer), make test-asan (the whole suite under AddressSanitizer and UndefinedBehaviorSanitizer), make
# format / format-check (.clang-format).
BUILD ?= build
CLANG_BUILD ?= build-clang
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The families whose tests run threads against each other: built a second time with clang by make test.
CLANG_FAMILIES ?= core;parallel;comm;allreduce;train;sync
CLANG_EXAMPLES ?= OFF
# The families make test-tsan builds with ThreadSanitizer (their tests of threads in one process: MPI's processes
# are not instrumented).
TSAN_FAMILIES ?= core;parallel;comm;allreduce;exchange;train;sync
SANITIZER_FILES = $(CURDIR)/tests/sanitizers

.PHONY: all deps deps-demo configure configure-demo build test test-gcc test-clang-threads test-clang test-tsan \
	test-asan demo format format-check clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

deps-demo:
	@scripts/install-deps.sh --demo

# The same build directory as make test's, so a later make test reuses what the demo built.
configure-demo: deps-demo
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test-gcc: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-clang-threads: deps
	cmake -S . -B $(CLANG_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
	  -DHITCH_BUILD_EXAMPLES=$(CLANG_EXAMPLES) -DHITCH_BUILD_BENCH=OFF -DHITCH_ENABLE_CUDA=OFF \
	  "-DHITCH_TEST_FAMILIES=$(CLANG_FAMILIES)" $(CMAKE_ARGS)
	cmake --build $(CLANG_BUILD) -j $(JOBS)
	ctest --test-dir $(CLANG_BUILD) --output-on-failure -j $(JOBS)

test: test-gcc
	$(MAKE) test-clang-threads

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

format:
	@scripts/format.sh

format-check:
	@scripts/format.sh --check

clean:
	rm -rf $(BUILD) $(CLANG_BUILD) $(CLANG_BUILD)-all $(BUILD)-tsan $(BUILD)-asan
