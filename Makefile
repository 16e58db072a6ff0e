# hitch: the two commands.
#   make demo   installs what the demo needs, builds the trainer alone, trains the Fashion-MNIST example on 2 MPI
#               ranks
#   make test   installs what is missing, builds everything buildable here, runs the whole test suite, then
#               builds the thread-heavy test families with clang and runs them too
# Further targets: make test-clang (every test family with clang), make format / format-check (.clang-format).
BUILD ?= build
CLANG_BUILD ?= build-clang
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The families whose tests run threads against each other: built a second time with clang by make test.
CLANG_FAMILIES ?= core;parallel;comm;allreduce;train;sync
CLANG_EXAMPLES ?= OFF

.PHONY: all deps deps-demo configure configure-demo build test test-gcc test-clang-threads test-clang demo format format-check clean

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

demo: configure-demo
	cmake --build $(BUILD) -j $(JOBS) --target hitch-mnist
	@scripts/demo.sh $(BUILD)

format:
	@scripts/format.sh

format-check:
	@scripts/format.sh --check

clean:
	rm -rf $(BUILD) $(CLANG_BUILD) $(CLANG_BUILD)-all
