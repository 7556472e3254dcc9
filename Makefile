# npuflow: `make demo` runs the main job on a bundled default, `make test` the whole suite.
# Both set up everything they need first (tools/setup.sh is idempotent; heavy downloads are
# cached under ~/.cache/npuflow keyed by the versions pinned in tools/versions.env).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
JOBS ?= 2
PYTHON := .venv/bin/python
CMAKE_FLAGS ?= -DNPUFLOW_WERROR=ON
DEMO_MODEL := $(BUILD_DIR)/demo/qwen3_layer_projections.onnx

.PHONY: all setup build build-asan test test-unit test-asan test-python test-python-asan demo bench \
        bench-encoders bench-ggml format clean fuzz test-fuzz

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
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q tests/integration

# The integration suite again, with ONNX Runtime loading the ASan+UBSan build of the EP (the
# sanitizer runtimes preloaded into the uninstrumented Python; leak checks stay in test-asan).
test-python-asan: build-asan
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  NPUFLOW_BUILD_DIR=$(abspath $(ASAN_DIR)) $(PYTHON) -m pytest -q tests/integration

test: test-unit test-asan test-python test-python-asan test-fuzz

$(DEMO_MODEL): build tools/qdq_models.py
	@mkdir -p $(dir $(DEMO_MODEL))
	$(PYTHON) tools/qdq_models.py demo $(DEMO_MODEL)

# The main job: a small SigLIP vision encoder (a committed fixture exported from transformers'
# SiglipVisionModel) claimed as one fused node: the claim, the outputs against the CPU EP, and
# the projected RK3588 time. Then the A8W8 QDQ layer of issue #2.
DEMO_VISION_MODEL := tests/fixtures/vision/siglip_dynamo.onnx

demo: build $(DEMO_MODEL)
	$(BUILD_DIR)/bin/npuflow explain $(DEMO_VISION_MODEL)
	$(BUILD_DIR)/bin/npuflow demo $(DEMO_VISION_MODEL)
	$(BUILD_DIR)/bin/npuflow plan $(DEMO_VISION_MODEL)
	$(BUILD_DIR)/bin/npuflow explain $(DEMO_MODEL)
	$(BUILD_DIR)/bin/npuflow demo $(DEMO_MODEL)

bench: build bench-encoders
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/qdq_matmul.py

# The encoder families at real size against the CPU EP; writes the cost table claim=faster reads.
bench-encoders: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/encoders.py --write-costs

# llama-bench pp512/tg128 on SmolLM2-135M Q4_1 with and without libggml-npuflow.so.
bench-ggml: build
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) bash bench/llama_bench.sh

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)

# Vision-encoder fixtures (issue #5): exported from `transformers` classes with random weights in a
# separate cached venv (~/.cache/npuflow/fixtures-venv-<key>, PyTorch from PyPI: large). The small
# ones are committed under tests/fixtures/vision; the tests never need PyTorch.
FIXTURES_DIR := tests/fixtures/vision
FIXTURES_FULL_DIR ?= $(BUILD_DIR)/fixtures-full

.PHONY: fixtures fixtures-full faithfulness fixtures-matrix
fixtures:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_vision.py small $(FIXTURES_DIR)

fixtures-full:
	"$$(bash tools/fixtures/venv.sh)/bin/python" tools/fixtures/export_vision.py full $(FIXTURES_FULL_DIR)

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
