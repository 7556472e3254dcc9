#!/usr/bin/env bash
# Installs everything npuflow needs, idempotently. Heavy artefacts live in a cache outside the
# clone (~/.cache/npuflow/<name>-<pinned version>) so fresh clones on the same machine reuse them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
source "$root/tools/versions.env"
cache=${NPUFLOW_CACHE:-$HOME/.cache/npuflow}
mkdir -p "$cache" "$root/third_party"

log() { printf 'setup: %s\n' "$*"; }

install_debian_packages() {
  local missing=()
  for pkg in $DEBIAN_PACKAGES; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_python_env() {
  local key
  key=$(printf '%s ' "$PY_ONNXRUNTIME" "$PY_ONNX" "$PY_NUMPY" "$PY_PYTEST" "$(python3 -V)" | sha1sum | cut -c1-12)
  local venv="$cache/venv-$key"
  if [[ ! -x $venv/bin/python || ! -f $venv/.complete ]]; then
    log "creating Python environment $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "onnxruntime==$PY_ONNXRUNTIME" "onnx==$PY_ONNX" "numpy==$PY_NUMPY" "pytest==$PY_PYTEST"
    touch "$venv/.complete"
  fi
  ln -sfn "$venv" "$root/.venv"
}

install_onnxruntime_sdk() {
  local dest="$cache/onnxruntime-$ORT_HEADERS_VERSION-npm-$ORT_NPM_VERSION"
  if [[ ! -f $dest/.complete ]]; then
    log "fetching ONNX Runtime $ORT_HEADERS_VERSION headers and library from npm $ORT_NPM_PACKAGE@$ORT_NPM_VERSION"
    local work
    work=$(mktemp -d)
    (cd "$work" && npm pack --silent "$ORT_NPM_PACKAGE@$ORT_NPM_VERSION" >/dev/null)
    tar -xzf "$work"/*.tgz -C "$work"
    rm -rf "$dest" && mkdir -p "$dest/include" "$dest/lib"
    unzip -q -o -j "$work/package/Plugins/Android/onnxruntime.aar" 'headers/*' -d "$dest/include"
    cp "$work/package/Plugins/Linux/x64/libonnxruntime.so" "$dest/lib/"
    # Its SONAME is libonnxruntime.so.1: programs linked against it look for that name.
    ln -sf libonnxruntime.so "$dest/lib/libonnxruntime.so.1"
    rm -rf "$work"
    grep -q "ORT_API_VERSION 29" "$dest/include/onnxruntime_c_api.h" ||
      { echo "setup: unexpected ONNX Runtime header version" >&2; exit 1; }
    touch "$dest/.complete"
  fi
  ln -sfn "$dest" "$root/third_party/onnxruntime"
}

install_debian_packages
install_python_env
install_onnxruntime_sdk
log "ready"
