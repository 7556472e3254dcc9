#!/usr/bin/env bash
# dist_aarch64.sh STAGE ORT_DIR OUT: the board tarball OUT/npuflow-<version>-linux-aarch64.tar.gz
# from the aarch64 `cmake --install` tree STAGE (the EP, the ggml backend, the CLI, headers, the
# CMake package, and any device module the build installs), plus:
#   - the libraries a board's distribution may lack, from the Debian arm64 packages the build
#     linked (oneDNN, libgomp), found by the binaries through their $ORIGIN run paths;
#   - ONNX Runtime's aarch64 library from ORT_DIR, for the CLI (an application brings its own);
#   - README.md (the board recipe), CHANGELOG.md and LICENSE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stage=$1 ort_dir=$2 out=$3
version=$(cat "$root/VERSION")
name="npuflow-$version-linux-aarch64"
multiarch=/usr/lib/aarch64-linux-gnu

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$stage" "$work/$name"
lib="$work/$name/lib"
# ONNX Runtime for the CLI, which loads libonnxruntime.so.1 from lib/ (its run path).
cp -L "$ort_dir/lib/libonnxruntime.so.1" "$lib/libonnxruntime.so.1"

# Every library a binary here needs is bundled from the arm64 packages the build linked (oneDNN,
# libgomp, and what they need in turn), except glibc's and the C++ runtime's, which every board
# has, and ggml-base and ggml, which the program that loads the ggml module (llama.cpp) provides. Each
# keeps its SONAME, so a program that already loaded the system's copy (llama.cpp's libgomp)
# shares it instead of loading a second one, and finds its own dependencies beside it.
provided() {
  case $1 in
    libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | libstdc++.so.6 | \
      libgcc_s.so.1 | ld-linux-aarch64.so.1 | libggml-base.so* | libggml.so*) return 0 ;;
  esac
  return 1
}
needed() { aarch64-linux-gnu-readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
queue=("$work/$name"/bin/* "$lib"/*.so*)
while ((${#queue[@]})); do
  file=${queue[0]}
  queue=("${queue[@]:1}")
  for soname in $(needed "$file"); do
    provided "$soname" || [[ -e $lib/$soname ]] && continue
    [[ -e $multiarch/$soname ]] ||
      { echo "dist_aarch64: $(basename "$file") needs $soname, found in no arm64 package" >&2; exit 1; }
    cp -L "$multiarch/$soname" "$lib/$soname"
    patchelf --set-rpath '$ORIGIN' "$lib/$soname"
    queue+=("$lib/$soname")
  done
done

glibc=$(for f in "$work/$name"/bin/* "$lib"/*.so*; do
  aarch64-linux-gnu-objdump -T "$f" | grep -o 'GLIBC_[0-9.]*'
done | sort -uV | tail -1)
sed -e "s/@VERSION@/$version/g" -e "s/@GLIBC@/${glibc#GLIBC_}/g" \
  "$root/tools/dist/README-aarch64.md" > "$work/$name/README.md"
cp "$root/CHANGELOG.md" "$root/LICENSE" "$work/$name/"
mkdir -p "$out"
tar -C "$work" -czf "$out/$name.tar.gz" "$name"
echo "$out/$name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1), needs glibc >= ${glibc#GLIBC_})"
