# Packaging (issue #17): the CMake package (`cmake --install`), the Python wheel, and their tests.
# Included by the Makefile.
VERSION := $(shell cat VERSION)
STAGE_DIR := $(BUILD_DIR)/stage
WHEEL_RAW_DIR := $(BUILD_DIR)/wheel-raw
DIST_DIR := dist

.PHONY: install-stage wheel test-wheel test-consumer test-packaging

# The release build installed into a prefix inside the build tree: what `cmake --install` gives
# a user, and the input of the wheel.
install-stage: build
	rm -rf $(STAGE_DIR)
	cmake --install $(BUILD_DIR) --prefix $(abspath $(STAGE_DIR))

# dist/npuflow-<version>-py3-none-manylinux_*.whl: the install tree as a package, repaired by
# auditwheel (oneDNN and its OpenMP / OpenCL loaders vendored into npuflow.libs). ONNX Runtime
# (the user's, a dependency) and ggml-base and ggml (the host program's own) are never vendored.
wheel: install-stage
	bash tools/setup_packaging.sh
	rm -rf $(WHEEL_RAW_DIR) $(DIST_DIR)/npuflow-$(VERSION)-*.whl
	$(PYTHON) python/build_wheel.py --stage $(STAGE_DIR) --version-file VERSION --license LICENSE \
	  --out $(WHEEL_RAW_DIR)
	tools=$$(bash tools/setup_packaging.sh path tools); PATH=$$tools/bin:$$PATH \
	  $$tools/bin/auditwheel repair --exclude 'libggml-base.so*' --exclude 'libggml.so*' \
	    --exclude 'libonnxruntime.so*' \
	  -w $(DIST_DIR) $(WHEEL_RAW_DIR)/npuflow-$(VERSION)-*.whl && \
	  PATH=$$tools/bin:$$PATH $$tools/bin/auditwheel show $(DIST_DIR)/npuflow-$(VERSION)-*.whl

# A fresh venv with the wheel and stock onnxruntime (the pinned release and the EP's floor) from
# the cached wheelhouse; nothing of the source tree on the path.
test-wheel: wheel
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q tests/packaging/test_wheel.py

# tests/consumer: find_package(npuflow) against the install prefix, a C++ program on the EP.
test-consumer: install-stage
	NPUFLOW_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) -m pytest -q tests/packaging/test_consumer.py

test-packaging: test-wheel test-consumer
