# npuflow: `make demo` runs the main job on a bundled default, `make test` the whole suite.
# Both set up everything they need first (tools/setup.sh is idempotent; heavy downloads are
# cached under ~/.cache/npuflow keyed by the versions pinned in tools/versions.env).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
JOBS ?= 2
PYTHON := .venv/bin/python
CMAKE_FLAGS ?= -DNPUFLOW_WERROR=ON
# `make demo` builds only the EP and the CLI, in its own tree, and needs no llama.cpp.
DEMO_DIR ?= build-demo
DEMO_CLI := $(DEMO_DIR)/bin/npuflow
DEMO_MODEL := $(DEMO_DIR)/demo/qwen3_layer_projections.onnx

.PHONY: all setup demo-setup demo-build build build-asan test test-unit test-asan test-python test-python-asan demo bench \
        bench-encoders bench-quantized bench-conv bench-ggml format clean fuzz test-fuzz build-fuzz fuzz-bytes \
        test-fuzz-bytes build-tsan test-tsan validate-sim test-validate-sim test-ggml-fa-all \
        test-ggml-moe-all fixtures-dit bench-diffusion bench-ggml-quant bench-ggml-whisper

all: build

setup:
	@bash tools/setup.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: setup $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

$(ASAN_DIR)/build.ninja:
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DNPUFLOW_SANITIZE=address,undefined $(CMAKE_FLAGS)

build-asan: setup $(ASAN_DIR)/build.ninja
	cmake --build $(ASAN_DIR) -j $(JOBS)

test-unit: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test-asan: build-asan
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS)

test-python: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q --durations=15 tests/integration

# The integration suite again, with ONNX Runtime loading the ASan+UBSan build of the EP (the
# sanitizer runtimes preloaded into the uninstrumented Python; leak checks stay in test-asan).
# A fixed slice of it (every test function, a fifth of each parametrized one's cases: conftest.py):
# a third of them took 22 minutes on two cores at fddbc7d and held CI near 50 minutes, so the
# whole is over an hour.
# ASAN_SLICE=1 runs all of it. Both integration runs print their slowest tests.
ASAN_SLICE ?= 5
test-python-asan: build-asan
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  NPUFLOW_TEST_SLICE=$(ASAN_SLICE) NPUFLOW_BUILD_DIR=$(abspath $(ASAN_DIR)) \
	  $(PYTHON) -m pytest -q --durations=15 tests/integration

# libFuzzer targets for the parsers of untrusted bytes: knob values, the claim report, model files
# through `explain`/`plan` (tests/fuzz_bytes; clang, ASan+UBSan). `make fuzz-bytes` fuzzes each
# for FUZZ_SECONDS from a fresh seed; `make test` runs a short fixed-seed round.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 300
CLANG_VERSION := $(shell sed -n 's/^CLANG_VERSION=//p' tools/versions.env)

$(FUZZ_DIR)/build.ninja:
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=clang++-$(CLANG_VERSION) -DNPUFLOW_FUZZ=ON -DNPUFLOW_GGML=OFF \
	  -DBUILD_TESTING=OFF $(CMAKE_FLAGS)

build-fuzz: setup $(FUZZ_DIR)/build.ninja
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target knob_values_fuzzer json_report_fuzzer \
	  model_bytes_fuzzer

fuzz-bytes: build-fuzz
	tests/fuzz_bytes/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

test-fuzz-bytes: build-fuzz
	FUZZ_SEED=1 tests/fuzz_bytes/run.sh $(FUZZ_DIR) 25

# ThreadSanitizer (gcc): one session run from 4 threads, QDQ and an encoder, host and sim with
# faults (tests/tsan). Only the EP and the test program are built.
TSAN_DIR ?= build-tsan
TSAN_RUNS ?= 200

$(TSAN_DIR)/build.ninja:
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DNPUFLOW_SANITIZE=thread -DNPUFLOW_GGML=OFF $(CMAKE_FLAGS)

build-tsan: setup $(TSAN_DIR)/build.ninja
	cmake --build $(TSAN_DIR) -j $(JOBS) --target onnxruntime_npuflow npuflow_session_threads \
	  npuflow_rocket_libraries

test-tsan: build-tsan
	tests/tsan/run.sh $(TSAN_DIR) $(TSAN_RUNS)

test: test-unit test-asan test-python test-python-asan test-fuzz test-fuzz-bytes test-tsan \
      test-packaging test-validate-sim

include mk/packaging.mk
include mk/cross.mk

demo-setup:
	@bash tools/setup.sh demo

$(DEMO_DIR)/build.ninja:
	cmake -S . -B $(DEMO_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DNPUFLOW_GGML=OFF \
	  -DBUILD_TESTING=OFF $(CMAKE_FLAGS)

demo-build: demo-setup $(DEMO_DIR)/build.ninja
	cmake --build $(DEMO_DIR) -j $(JOBS) --target npuflow

$(DEMO_MODEL): tools/qdq_models.py | demo-setup
	@mkdir -p $(dir $(DEMO_MODEL))
	$(PYTHON) tools/qdq_models.py demo $(DEMO_MODEL)

# The main job: SigLIP-B/16 at its real size (224 px, 12 layers, d 768; random weights under a
# fixed seed), written as an ONNX graph by tools/siglip_onnx.py without torch and cached under
# ~/.cache/npuflow keyed by that script: the claim, faithfulness against the CPU EP on the host
# device and on the RK3588 simulator, and one inference priced on a board (plan, with a PNG of the
# phases). Then the A8W8 QDQ layer of issue #2.
NPUFLOW_CACHE ?= $(HOME)/.cache/npuflow
DEMO_SIGLIP := $(NPUFLOW_CACHE)/demo-siglip-b16-$(shell cat tools/siglip_onnx.py tools/versions.env | sha1sum | cut -c1-12).onnx
DEMO_PLOT := $(DEMO_DIR)/demo/siglip_b16_plan.png

$(DEMO_SIGLIP): tools/siglip_onnx.py | demo-setup
	@mkdir -p $(dir $@)
	$(PYTHON) tools/siglip_onnx.py $@.partial && mv $@.partial $@

# The demo shows every claim (NPUFLOW_CLAIM=all): on a machine without an NPU the default,
# claim=faster, keeps only the claims this machine's measured cost table says are not slower
# than the CPU EP (docs/knobs.md), and a fresh machine has no table yet.
demo: demo-build $(DEMO_SIGLIP) $(DEMO_MODEL)
	@echo "== SigLIP-B/16, 224 px, random weights ($(notdir $(DEMO_SIGLIP))): what npuflow claims"
	@NPUFLOW_CLAIM=all $(DEMO_CLI) explain $(DEMO_SIGLIP)
	@echo "== against the CPU EP on this machine: the host device, then the RK3588 simulator"
	@NPUFLOW_CLAIM=all $(DEMO_CLI) demo $(DEMO_SIGLIP) --runs 3
	@NPUFLOW_CLAIM=all $(DEMO_CLI) demo $(DEMO_SIGLIP) --runs 1 --knob device=sim
	@echo "== one inference priced on an RK3588 board (chart: $(DEMO_PLOT))"
	@mkdir -p $(dir $(DEMO_PLOT))
	@$(DEMO_CLI) plan $(DEMO_SIGLIP) --runs 0 --plot $(DEMO_PLOT)
	@echo "   how far to trust it: make validate-sim sets the plan beside every published board figure"
	@echo "   (docs/simulator.md): text encoders land within +-20%; SigLIP-B/16 and CLIP-B/16, priced as"
	@echo "   ort-rocket runs them, come out 81-87% above its measured 1.22-1.27x. Read vision figures as"
	@echo "   optimistic."
	@echo "== one Qwen3-0.6B-shaped layer's seven A8W8 projections as a QDQ model"
	@NPUFLOW_CLAIM=all $(DEMO_CLI) explain $(DEMO_MODEL)
	@NPUFLOW_CLAIM=all $(DEMO_CLI) demo $(DEMO_MODEL)

bench: build bench-encoders bench-quantized bench-conv
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/qdq_matmul.py --runs 10 --rounds 3 \
	  --threads 2

# Quantized sentence encoders as users have them (QDQ int8, uint4 blocks, dynamic int8) against
# the CPU EP running the same models.
bench-quantized: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/quantized_encoders.py --runs 10 --write-costs

# ConvTranspose nodes at pix2pix's decoder shapes against the CPU EP; writes their cost rows.
bench-conv: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/conv_transpose.py --runs 10 --write-costs

# The encoder families at real size against the CPU EP; writes the cost table claim=faster reads.
bench-encoders: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/encoders.py --write-costs

# llama-bench pp512 on three GGUFs (Q4_K_M, Q8_0, Q4_1): the CPU backend, libggml-npuflow.so at
# device=auto and at device=host (default claim policy), side by side (bench/llama_bench.sh).
bench-ggml: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) bash bench/llama_bench.sh
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/ggml_quant_paths.py
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/whisper_encoder.py

# whisper.cpp's encoder alone (whisper-bench with and without the backend; the sim's RK3588 model).
bench-ggml-whisper: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/whisper_encoder.py

# The quantized datapaths alone (NPUFLOW_QUANT_PATH native against dequant and the CPU backend).
bench-ggml-quant: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/ggml_quant_paths.py

# Every test-backend-ops FLASH_ATTN_EXT case on host and sim (make test runs those up to 1024
# keys; the 2K-8K key cases add minutes on two cores).
test-ggml-fa-all: build
	NPUFLOW_TEST_FA_ALL=1 NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q \
	  tests/integration/test_ggml_flash_attn.py -k backend_ops

# Every test-backend-ops MUL_MAT_ID case on host and sim (make test runs the 4- and 8-expert
# ones; the 128/256-expert cases take about nine minutes on two cores).
test-ggml-moe-all: build
	NPUFLOW_TEST_MOE_ALL=1 NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q \
	  tests/integration/test_ggml_mul_mat_id.py

# The DiT twin of docs/diffusion.md (random weights, written by tools/dit_twin.py into the cache,
# keyed by that script, and linked as build/fixtures/dit-twin.safetensors).
DIT_TWIN := $(NPUFLOW_CACHE)/dit-twin-$(shell sha1sum tools/dit_twin.py | cut -c1-12).safetensors
$(DIT_TWIN): tools/dit_twin.py | setup
	@mkdir -p $(dir $@)
	$(PYTHON) tools/dit_twin.py write $@
fixtures-dit: $(DIT_TWIN)
	@mkdir -p $(BUILD_DIR)/fixtures
	ln -sfn $(DIT_TWIN) $(BUILD_DIR)/fixtures/dit-twin.safetensors

# The twin at 20 and 50 steps on host: uncached, Spectrum and adaptive Spectrum, with evaluations,
# time and the PSNR of each latent against the uncached one (bench/diffusion.py).
bench-diffusion: build fixtures-dit
	for steps in 20 50; do NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/diffusion.py \
	  $(BUILD_DIR)/fixtures/dit-twin.safetensors --steps $$steps --thresholds 0.12,0.18,0.19,0.2 \
	  $(BENCH_DIFFUSION_ARGS) || exit 1; done

# `npuflow plan` beside every published RK3588 figure (docs/simulator.md, "Validation against the
# boards"): real-size models exported once into the bench cache. --fit re-solves the two fitted
# constants; `make test` checks a fixed slice (a fitted row reproduces, a held-out row in band).
VALIDATE_SLICE ?= mmbert_58_ratio mmbert_58_cpu clip_ratio
validate-sim: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tools/validate_sim.py $(VALIDATE_ARGS)

test-validate-sim: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tools/validate_sim.py --check \
	  --only $(VALIDATE_SLICE)
	@echo "the same check must fail with a constant that is not the fit:"
	! NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tools/validate_sim.py --check \
	  --only mmbert_58_cpu --constant cpu_ep_gemm_gflops=40

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(DEMO_DIR) $(ASAN_DIR) $(FUZZ_DIR) $(TSAN_DIR) $(CROSS_DIR) dist

# Vision-encoder fixtures (issue #5): exported from `transformers` classes with random weights in a
# separate cached venv (~/.cache/npuflow/fixtures-venv-<key>, PyTorch from PyPI: large). The small
# ones are committed under tests/fixtures/vision; the tests never need PyTorch.
FIXTURES_DIR := tests/fixtures/vision
FIXTURES_FULL_DIR ?= $(BUILD_DIR)/fixtures-full

.PHONY: fixtures fixtures-full fixtures-unet fixtures-sam fixtures-windowed faithfulness fixtures-matrix
fixtures:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_vision.py small $(FIXTURES_DIR)

fixtures-full:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_vision.py full $(FIXTURES_FULL_DIR)

# The pix2pix-style U-Net generators of the ConvTranspose claim (issue #14), committed.
fixtures-unet:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_unet.py tests/fixtures/conv

# transformers' SamModel at a tiny random configuration (issue #14), committed.
fixtures-sam:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_sam.py tests/fixtures/sam

# RF-DETR's windowed DINOv2 backbone (issue #14) at random weights, committed; transformers 5.x.
fixtures-windowed:
	"$$(bash tools/fixtures/venv.sh next)/bin/python" tools/fixtures/export_windowed.py tests/fixtures/windowed

# A larger draw of generated windowed-DINOv2 configurations than `make test`'s 12 (seed 7).
WINDOWED_SEED ?= 8
WINDOWED_COUNT ?= 60
.PHONY: test-windowed-matrix
test-windowed-matrix: build
	NPUFLOW_WINDOWED_SEED=$(WINDOWED_SEED) NPUFLOW_WINDOWED_COUNT=$(WINDOWED_COUNT) \
	  NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q \
	  tests/integration/test_windowed_dinov2.py -k generated

# A larger draw of generated SAM image encoders than `make test`'s 12 (seed 11).
SAM_SEED ?= 12
SAM_COUNT ?= 48
.PHONY: test-sam-matrix
test-sam-matrix: build
	NPUFLOW_SAM_SEED=$(SAM_SEED) NPUFLOW_SAM_COUNT=$(SAM_COUNT) \
	  NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q \
	  tests/integration/test_sam_encoder.py -k generated

# The cosine tables of docs/faithfulness.md (add FIXTURES=dir to measure other fixtures,
# DEVICE=sim for the simulator's table).
DEVICE ?= host
faithfulness: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tools/faithfulness.py --device $(DEVICE) $(FIXTURES)

# The export matrix of issue #8: N models from transformers classes at random sizes, exporters,
# opsets and versions (generated into ~/.cache/npuflow/matrix-<key>), each checked for a whole
# claim and against the CPU EP on host and sim. Without SEED a fresh seed is drawn and printed.
# The fixed slice in tests/integration/test_export_matrix.py runs in `make test`.
N ?= 20
fixtures-matrix: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tools/fixtures/run_matrix.py --count $(N) \
	  $(if $(SEED),--seed $(SEED)) --report $(BUILD_DIR)/matrix-report.txt

# The graph fuzzer of issue #9 (tests/fuzz): N seeded mutants of the committed fixtures and the
# generated QDQ models, each run on the CPU EP and, in child processes, with npuflow on host and
# sim. Without SEED a fresh seed is drawn and printed; ONLY=I reruns mutant I of SEED. Failures
# are minimized and saved under tests/fuzz/regressions. `make test` runs a fixed seeded batch and
# every saved regression (once, with the release build).
fuzz: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tests/fuzz/fuzz.py --count $(N) --jobs $(JOBS) \
	  $(if $(SEED),--seed $(SEED)) $(if $(ONLY),--only $(ONLY))

test-fuzz: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q tests/fuzz
