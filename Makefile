# The two commands of the README, and their parts. Each target does its own setup.
#   make demo   long-prompt generation on the default model
#   make test   every test: unit, MPI, hostile files and HTTP requests, the server and router
#               under ASan+UBSan and under TSan, the fuzz targets for a short while, real model
BUILD ?= build
BUILD_ASAN ?= build-asan
BUILD_TSAN ?= build-tsan
BUILD_FUZZ ?= build-fuzz
FUZZ_SECONDS ?= 20
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup build demo test test-asan test-tsan fuzz-smoke bench bench-tp format clean

setup:
	bash cluster/setup-node.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a ~3,800-token document with a fact hidden in its middle, and a question.
# One prefill serves Ada-KV at 20% and the full cache (and SnapKV at 20%), side by side, on
# the tensor-parallel ranks of configs/cluster/local.yaml (mpirun through `adakv launch`);
# then the per-head budgets of that prompt as a picture.
# It builds only the `adakv` CLI it runs (not the tests: `make test` builds everything).
CLUSTER ?= configs/cluster/local.yaml
demo: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target adakv
	python3 tests/tools/make_demo_prompt.py > $(BUILD)/demo_prompt.txt
	@echo "== question: what is the access code hidden in a $$(wc -c < $(BUILD)/demo_prompt.txt)-byte document? (expected: 7391)"
	$(BUILD)/adakv launch --cluster $(CLUSTER) -- generate --chat \
	  --prompt-file $(BUILD)/demo_prompt.txt --max-tokens 32 \
	  --policy adakv --budget 0.2 --compare full,snapkv
	$(BUILD)/adakv profile --chat --prompt-file $(BUILD)/demo_prompt.txt --policy adakv \
	  --budget 0.2 --out $(BUILD)/demo-profile > $(BUILD)/demo-profile.txt
	@grep -E "^kept|^roles" $(BUILD)/demo-profile.txt
	@echo "== head budgets: $(BUILD)/demo-profile/head_budgets.svg (and .png)"

test: build test-asan test-tsan fuzz-smoke
	cd $(BUILD) && ctest --output-on-failure --timeout 1200

# AddressSanitizer + UndefinedBehaviorSanitizer, leaks included (MPI ranks too): corrupt GGUF
# files, the unit suite, the MPI suite as 2 and 3 ranks, `adakv batch` as 3 ranks, hostile HTTP
# requests, the OpenAI client suite at TP 1 and the data-parallel router
# (tests/sanitizers/run_asan.sh). No CUDA backend: nothing in it runs on a GPU.
test-asan: setup
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DADAKV_SANITIZE=ON -DADAKV_CUDA=OFF \
	  $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target adakv adakv_corrupt_file_tests \
	  adakv_unit_tests adakv_mpi_tests adakv_keep_loaded_modules
	bash tests/sanitizers/run_asan.sh $(BUILD_ASAN)

# ThreadSanitizer over the threaded parts: the scheduler, server and serving-loop unit tests,
# `adakv serve` (engine thread and HTTP threads) and `adakv router` through the OpenAI client
# (tests/sanitizers/run_tsan.sh; Open MPI and libgomp internals suppressed in tsan.supp).
test-tsan: setup
	cmake -S . -B $(BUILD_TSAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DADAKV_TSAN=ON -DADAKV_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target adakv adakv_tsan_unit_tests
	bash tests/sanitizers/run_tsan.sh $(BUILD_TSAN)

# Every libFuzzer target (tests/fuzz/targets: the parsers of files, requests, configs and
# control-plane messages) under ASan+UBSan: its regression inputs, then FUZZ_SECONDS of fuzzing
# from the seed corpora. Clang only, in its own build folder.
fuzz-smoke: setup
	cmake -S . -B $(BUILD_FUZZ) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DADAKV_FUZZ=ON -DADAKV_CUDA=OFF \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ $(CMAKE_FLAGS)
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target adakv_fuzz
	python3 tests/tools/make_fuzz_corpus.py $(BUILD_FUZZ)/fuzz-corpus
	bash tests/fuzz/run_fuzz_smoke.sh $(BUILD_FUZZ) $(FUZZ_SECONDS)

# Prefill/decode tokens/s at 512, 2048 and 8000 tokens, next to llama.cpp on the same file.
bench: build
	$(BUILD)/adakv bench --python "$$(bash cluster/setup-node.sh bench-peer)" \
	  --llama-batched-bench "$$(bash cluster/setup-node.sh serve-peer)/llama-batched-bench"

# TP 1 against TP 3 (mpirun ranks on this machine): tokens/s and the time in collectives.
bench-tp: build
	python3 tests/tools/bench_tp.py --adakv $(BUILD)/adakv --tp 1,3

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_FUZZ)
