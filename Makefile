# Two commands on a fresh machine: `make run` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MOEX := $(BUILD_DIR)/moex

.PHONY: deps build run test test-sanitize test-sanitize-ci test-tsan fuzz bench clean format

deps:
	@bash scripts/install-deps.sh

# Tests and benchmarks on (`make run` may have configured the directory without them).
build: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEX_BUILD_TESTS=ON \
		-DMOEX_BUILD_BENCH=ON -DMOEX_KERNEL_TARGETS=all
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: generate text with the bundled model. Installs and builds only what running
# needs (no test libraries, Python, browsers or npm; one target; the kernels for this CPU
# alone: MOEX_KERNEL_TARGETS in CMakeLists.txt).
run:
	@bash scripts/install-deps.sh --run
	@test -f $(BUILD_DIR)/build.ninja || cmake -S . -B $(BUILD_DIR) -G Ninja \
		-DCMAKE_BUILD_TYPE=Release -DMOEX_BUILD_TESTS=OFF -DMOEX_BUILD_BENCH=OFF \
		-DMOEX_KERNEL_TARGETS=native
	cmake --build $(BUILD_DIR) -j $(JOBS) --target moex
	bash scripts/run-main-job.sh $(MOEX)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its own build
# directory (every object is compiled again; see README.md for the time it takes).
test-sanitize: deps
	cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DMOEX_SANITIZE=ON \
		-DMOEX_BUILD_BENCH=OFF
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && ctest --output-on-failure -j $(JOBS)

# What CI runs under the sanitizers (the whole suite's sanitizer builds above take far longer
# than CI's time allows on 2 vCPUs: README.md). AddressSanitizer and UndefinedBehaviorSanitizer
# over the layers that read untrusted input -- files (safetensors, GGUF, expert store, traces,
# tokenizers, chat templates, configs) and the server's requests -- with their test suites and
# the fuzz corpus replays, in build-asan/; ThreadSanitizer over the thread pool and the fetch
# engine (io_uring completions), in build-tsan-ci/. Each builds only those layers. (The clang
# thread-safety check, ctest thread_safety, runs once, in the Release suite.)
# (Make turns a continued line's break into a space, which a regex must not have: the lists
# are joined without spaces.)
ASAN_CI_LIB := core/.* io/.* text/.* model/.* kernels/(quantize|elementwise|interleave|activation_precision) engine/sampler \
	trace/trace_(format|reader|writer) \
	serve/(api_request|stop_text|messages_api|responses_api|dialect_json|tool_calls|pass_pacer) \
	dist/(expert_messages|event_messages)
ASAN_CI_TESTS := io_.*_test text_.*_test expert_store_format_test expert_layout_test trace_format_test \
	tokenizer_.*_test chat_template_test quant_format_test dtype_test model_config_validation_test \
	fuzz_parsers_test serve_api_request_test serve_api_request_fuzz_test model_identity_test \
	store_catalog_test serve_tool_calls_test hf_fp8_test serve_pass_pacer_test core_budget_test \
	dist_expert_messages_test dist_event_messages_test
ASAN_CI_SUPPORT := random_weight_source reference_model shared_data temp_dir tiny_models external_tools
regex_of = $(subst $() $(),|,$(strip $(1)))
TSAN_CI_LIB := core/.*|tiers/(fetch_engine|storage_link)
TSAN_CI_TESTS := tiers_fetch_engine_test|kernels_thread_pool_test
test-sanitize-ci: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DMOEX_SANITIZE=ON -DMOEX_UBSAN_SKIP=null \
		"-DMOEX_LIB_SOURCES=$(call regex_of,$(ASAN_CI_LIB))" \
		"-DMOEX_TEST_SOURCES=$(call regex_of,$(ASAN_CI_TESTS))" \
		"-DMOEX_TEST_SUPPORT_SOURCES=$(call regex_of,$(ASAN_CI_SUPPORT))"
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest --output-on-failure -j $(JOBS) -E '^thread_safety$$'
	cmake -S . -B build-tsan-ci -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DMOEX_SANITIZE=thread \
		"-DMOEX_LIB_SOURCES=$(TSAN_CI_LIB)" "-DMOEX_TEST_SOURCES=$(TSAN_CI_TESTS)" \
		"-DMOEX_TEST_SUPPORT_SOURCES=temp_dir"
	cmake --build build-tsan-ci -j $(JOBS) --target moex_tests
	cd build-tsan-ci && TSAN_OPTIONS="second_deadlock_stack=1" ctest --output-on-failure -j $(JOBS) \
		-R '^(FetchEngineTest|KernelsThreadPoolTest|StorageLinkTest)\.'

# ThreadSanitizer over the threaded parts: the fetch engine (io_uring completions), the host
# tier, the thread pool and the server (scheduler, HTTP threads), in build-tsan/ (only those
# suites are compiled; see README.md for the time it takes).
TSAN_TESTS := tiers_fetch_engine_test|tiers_host_tier_test|kernels_thread_pool_test|serve_.*_test
test-tsan: deps
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DMOEX_SANITIZE=thread \
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
