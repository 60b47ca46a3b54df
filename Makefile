# Two commands on a fresh machine: `make run` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MOEX := $(BUILD_DIR)/moex

.PHONY: deps build run test test-sanitize test-tsan fuzz bench clean format

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: generate text with the bundled model.
run: build
	bash scripts/run-main-job.sh $(MOEX)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its own build
# directory (every object is compiled again; see README.md for the time it takes).
test-sanitize: deps
	cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEX_SANITIZE=ON \
		-DMOEX_BUILD_BENCH=OFF
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ctest --output-on-failure -j $(JOBS)

# ThreadSanitizer over the threaded parts: the fetch engine (io_uring completions), the host
# tier, the thread pool and the server (scheduler, HTTP threads), in build-tsan/ (only those
# suites are compiled; see README.md for the time it takes).
TSAN_TESTS := tiers_fetch_engine_test|tiers_host_tier_test|kernels_thread_pool_test|serve_.*_test
test-tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 -DMOEX_SANITIZE=thread \
		-DMOEX_BUILD_BENCH=OFF "-DMOEX_TEST_SOURCES=$(TSAN_TESTS)"
	cmake --build build-tsan -j $(JOBS) --target moex moex_tests
	cd build-tsan && TSAN_OPTIONS="second_deadlock_stack=1" \
		ctest --output-on-failure -j $(JOBS) -E '^(layers|fuzz_corpus_)'

# The libFuzzer targets of fuzz/ (clang, ASan, UBSan) in build-fuzz/; run one with
# `bash scripts/run-fuzzer.sh NAME SECONDS` (docs/fuzzing.md).
fuzz:
	@bash scripts/install-deps.sh --fuzz
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
		-DMOEX_FUZZ=ON -DMOEX_BUILD_TESTS=OFF -DMOEX_BUILD_BENCH=OFF
	cmake --build build-fuzz --target fuzzers -j $(JOBS)

bench: build
	bash bench/run-all.sh $(BUILD_DIR)

format:
	find src tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
