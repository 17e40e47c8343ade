# zoomd: the two commands of the README, and helpers.
#
#   make test   install missing Debian packages, configure, build, run ctest
#   make run    (arrives with the server issue)
#
# BUILD_DIR, BUILD_TYPE, JOBS and CMAKE_ARGS may be overridden.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: deps configure build test test-asan bench-io clean

deps:
	@bash deploy/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DZOOM_BUILD_TESTS=ON -DZOOM_BUILD_BENCHMARKS=ON $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600
	@$(MAKE) --no-print-directory test-asan

# The concurrency tests again under AddressSanitizer + UBSan.
ASAN_DIR ?= build-asan
ASAN_TESTS ?= Concurrent|ManyThreads
test-asan: deps
	@cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZOOM_SANITIZE=ON \
	  -DZOOM_BUILD_TESTS=ON -DZOOM_BUILD_BENCHMARKS=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS) --target storage_test engine_test
	@cd $(ASAN_DIR) && ctest --output-on-failure -R '$(ASAN_TESTS)' --timeout 900

# The fullview I/O benchmark (io_uring batch vs pread loop, with fio beside).
bench-io: build
	@$(BUILD_DIR)/loadtest/zoombench --benchmarks=io

clean:
	@rm -rf $(BUILD_DIR)
