#!/usr/bin/env bash
# What the aarch64 build needs beyond tools/setup.sh, idempotently (`make build-aarch64`):
#   - Debian's cross toolchain and qemu-user; oneDNN's library and GoogleTest for arm64 as Debian
#     multiarch packages (dpkg --add-architecture arm64), the same oneDNN release as the x86 build,
#     and the headers of libdnnl-dev:arm64 unpacked into ~/.cache/npuflow/dnnl-dev-arm64-<version>
#     (installing it would overwrite the amd64 package's dnnl_config.h);
#   - ONNX Runtime's aarch64 library, from the pinned onnxruntime wheel on PyPI, into
#     ~/.cache/npuflow/onnxruntime-aarch64-<version>/lib beside the headers of the x86 SDK;
#   - ggml-base for aarch64, cross-built from the cached llama.cpp tree into
#     ~/.cache/npuflow/llama.cpp-<version>/build-aarch64 (the ggml module links it).
# `tools/setup_cross.sh path ort|llama|dnnl` prints a path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
source "$root/tools/versions.env"
cache=${NPUFLOW_CACHE:-$HOME/.cache/npuflow}

log() { printf 'setup-cross: %s\n' "$*" >&2; }

ort_dir() { echo "$cache/onnxruntime-aarch64-$ORT_AARCH64_WHEEL_VERSION"; }
# ggml-base and ggml (its backend registry; backends stay loadable modules): the ggml module links both.
llama_build_dir() { echo "$cache/llama.cpp-$LLAMA_CPP_PYTHON_VERSION/build-aarch64-ggml"; }
dnnl_version() { dpkg-query -W -f='${Version}' libdnnl2:arm64 2>/dev/null || echo none; }
dnnl_dir() { echo "$cache/dnnl-dev-arm64-$(dnnl_version)"; }

if [[ ${1:-} == path ]]; then
  case ${2:-} in
    ort) ort_dir ;;
    llama) llama_build_dir ;;
    dnnl) dnnl_dir ;;
    *) echo "usage: $0 path ort|llama|dnnl" >&2; exit 2 ;;
  esac
  exit 0
fi

install_cross_packages() {
  local missing=() pkg
  for pkg in $CROSS_DEBIAN_PACKAGES $CROSS_ARM64_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    log "adding the arm64 architecture to dpkg (multiarch) for oneDNN and GoogleTest"
    $sudo dpkg --add-architecture arm64
  fi
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The headers for the arm64 library: the -dev package of the same version, unpacked.
install_dnnl_headers_arm64() {
  local dest
  dest=$(dnnl_dir)
  [[ -f $dest/.complete ]] && return
  log "unpacking libdnnl-dev:arm64 $(dnnl_version) (headers) into $dest"
  local work
  work=$(mktemp -d)
  chmod 777 "$work"  # apt's download sandbox user writes here
  (cd "$work" && apt-get download -qq "libdnnl-dev:arm64=$(dnnl_version)")
  rm -rf "$dest" && mkdir -p "$dest"
  dpkg -x "$work"/libdnnl-dev_*_arm64.deb "$work/tree"
  mv "$work/tree/usr/include" "$dest/include"
  rm -rf "$work"
  touch "$dest/.complete"
}

install_onnxruntime_aarch64() {
  local dest
  dest=$(ort_dir)
  [[ -f $dest/.complete ]] && return
  log "fetching ONNX Runtime $ORT_AARCH64_WHEEL_VERSION for aarch64 (its PyPI wheel's library)"
  local work
  work=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --only-binary :all: --no-deps \
    --python-version 3.11 --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 \
    --platform manylinux2014_aarch64 "onnxruntime==$ORT_AARCH64_WHEEL_VERSION" -d "$work"
  rm -rf "$dest" && mkdir -p "$dest/lib"
  (cd "$work" && unzip -q -o -j ./onnxruntime-*.whl \
    "onnxruntime/capi/libonnxruntime.so.$ORT_AARCH64_WHEEL_VERSION" -d "$dest/lib")
  ln -sf "libonnxruntime.so.$ORT_AARCH64_WHEEL_VERSION" "$dest/lib/libonnxruntime.so.1"
  ln -sf libonnxruntime.so.1 "$dest/lib/libonnxruntime.so"
  # The C and C++ API headers are the x86 SDK's (tools/setup.sh): the same release's.
  ln -sfn "$cache/onnxruntime-$ORT_HEADERS_VERSION-npm-$ORT_NPM_VERSION/include" "$dest/include"
  rm -rf "$work"
  touch "$dest/.complete"
}

install_ggml_base_aarch64() {
  local src="$cache/llama.cpp-$LLAMA_CPP_PYTHON_VERSION/src" dest
  dest=$(llama_build_dir)
  [[ -f $dest/.complete ]] && return
  log "cross-building ggml-base and ggml $LLAMA_CPP_PYTHON_VERSION for aarch64 into $dest"
  cmake -S "$src" -B "$dest" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DBUILD_SHARED_LIBS=ON \
    -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
  cmake --build "$dest" -j "${JOBS:-2}" --target ggml-base ggml
  touch "$dest/.complete"
}

install_cross_packages
install_dnnl_headers_arm64
install_onnxruntime_aarch64
install_ggml_base_aarch64
