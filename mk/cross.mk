# aarch64 (issue #17): a cross build with Debian's toolchain, its unit tests and the CLI under
# qemu-user (emulating the RK3588's Cortex-A76), and the board tarball. Included by the Makefile.
CROSS_DIR ?= build-aarch64
CROSS_STAGE := $(CROSS_DIR)/stage
CROSS_TARGETS := onnxruntime_npuflow ggml-npuflow npuflow npuflow_unit_tests npuflow_fake_cpuinfo

.PHONY: setup-cross build-aarch64 test-cross dist-aarch64

setup-cross: setup
	bash tools/setup_cross.sh

$(CROSS_DIR)/build.ninja:
	cmake -S . -B $(CROSS_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
	  -DNPUFLOW_ORT_DIR=$$(bash tools/setup_cross.sh path ort) \
	  -DNPUFLOW_LLAMA_BIN=$$(bash tools/setup_cross.sh path llama)/bin \
	  -DDNNL_INCLUDE_DIR=$$(bash tools/setup_cross.sh path dnnl)/include \
	  -DDNNL_LIBRARY=/usr/lib/aarch64-linux-gnu/libdnnl.so.2 $(CMAKE_FLAGS)

build-aarch64: setup-cross $(CROSS_DIR)/build.ninja
	cmake --build $(CROSS_DIR) -j $(JOBS) --target $(CROSS_TARGETS)

# Every unit test (the ggml harnesses need a whole aarch64 llama.cpp and stay native), then the
# aarch64 CLI and EP on aarch64 ONNX Runtime: an encoder and a QDQ model against its CPU EP.
test-cross: dist-aarch64
	ctest --test-dir $(CROSS_DIR) --output-on-failure -j $(JOBS) -E '^(ggml_|default_|knobs_|npuflow_ggml_)'
	NPUFLOW_CROSS_DIR=$(abspath $(CROSS_DIR)) $(PYTHON) -m pytest -q tests/packaging/test_cross.py

# dist/npuflow-<version>-linux-aarch64.tar.gz: the aarch64 install tree, the libraries a board's
# distribution may lack (oneDNN, OpenMP, OpenCL loader; ONNX Runtime for the CLI) and the board
# recipe.
dist-aarch64: build-aarch64
	rm -rf $(CROSS_STAGE)
	cmake --install $(CROSS_DIR) --prefix $(abspath $(CROSS_STAGE))
	bash tools/dist_aarch64.sh $(CROSS_STAGE) $$(bash tools/setup_cross.sh path ort) dist
