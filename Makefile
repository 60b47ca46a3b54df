# Two commands on a fresh machine: `make run` and `make test`.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MOEX := $(BUILD_DIR)/moex

.PHONY: deps build run test test-sanitize bench clean format

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

bench: build
	bash bench/run-all.sh $(BUILD_DIR)

format:
	find src tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
