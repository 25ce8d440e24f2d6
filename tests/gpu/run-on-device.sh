#!/bin/bash
# Issue 42's GPU checks as one script, for a GPU machine lent for a few minutes (one H200, the
# CUDA 13 driver and toolkit, python3 with the nvidia-* wheels, no network, no MPI, no dev
# packages) or a GPU box of one's own. It runs, each under its own timeout, each recorded and none
# stopping the others, and prints ONE table at the end:
#   a. cuda_tests   adakv_cuda_backend_tests, one process per op group (ctest's gpu.cuda.*): every
#                   CUDA op against its CPU twin
#   b. nccl         adakv_gpu_tests at 1 rank under mpirun (ctest's gpu.nccl.np1, NCCL)
#   c. e2e.*        `adakv generate`, 64 greedy tokens, against the CPU backend's tokens of the same
#                   model and prompt (computed by `prepare`): a short prompt, a chat prompt and a
#                   3,854-token one with the full cache, and the long one with Ada-KV (the model's
#                   preset), whose per-head budget vectors must equal the CPU's. A divergence is
#                   reported with its index and whether it is a near-tie (the two tokens' logits
#                   within 1e-3 of the largest logit on the CPU)
#   d. tp3          the Ada-KV case as 3 ranks on one device (mpirun -np 3; the device group then
#                   stages through host memory over MPI) against step c's TP 1 tokens and budgets
#   e. batch        `adakv batch` of 6 requests (5 to ~1,500 tokens) against the CPU's tokens
#   f. serve        `adakv serve` hit by the official openai client: a chat completion and a
#                   streaming one, against the CPU server's text
#   g. bench        adakv_bench_cuda: copy bandwidth, decode attention over 32k-token heads,
#                   prefill GEMMs against cuBLAS, Ada-KV scoring per layer, against the
#                   targets (>= 0.70 of copy, >= 0.70 of Sgemm, < 2 ms)
# Every `adakv` run uses --decode-dots float: the CUDA backend always decodes on float dots, so
# the CPU goldens then do the same arithmetic up to summation order.
#
# Modes
#   prepare DIR [--build B] [--layers N]
#       Here, after building B (default build/) with the CUDA backend, best for sm_90 alone:
#         cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#         cmake --build build --target adakv adakv_cuda_backend_tests adakv_gpu_tests adakv_bench_cuda
#       DIR must be a git-ignored folder of the repo (.device-pack/ is). It receives the stripped
#       binaries and the shared libraries they need that a bare machine lacks (CUDA's, NCCL's and
#       glibc's excepted: the device has those) as bin.tar.xz; the Open MPI 4.1 Debian packages;
#       wheels of the openai client and its dependencies for python 3.12; the default model cut
#       to its first N layers (default 2; tests/tools/truncate_gguf.py: the real weights in their
#       formats) as model.gguf.xz, since the whole model (98 MB) is over the 64 MiB that travels;
#       and goldens/, the CPU backend's results on that model for steps c-f. It prints the size
#       of what will travel (the repo's files and DIR) and fails over 55 MiB
#       (ADAKV_PACK_LIMIT_MIB). Needs apt-get download and pip download (network), and the `gguf`
#       package (installed into $ADAKV_HOME/venv-gguf when python3 lacks it).
#   run DIR [--backend cuda|cpu|guarded] [--budget SECONDS]
#       There (or here with --backend cpu or guarded, which runs the same steps on that backend
#       and checks the whole flow; the device-only steps then report skip). Unpacks everything
#       under a private temporary folder (the Debian packages too: nothing is written over /),
#       finds the machine's cudart, cuBLAS and NCCL (ldconfig, python's nvidia-* wheels, the
#       toolkit), and runs the steps. The steps share a budget (default 300 s with cuda, 1500 s
#       otherwise): a step never runs past it, and those left when it is spent report skip.
#       Logs: $OUT (the device tool's folder) when set, else a folder it names at the end; at most
#       8 files there (steps.log, table.txt, bench.txt, results.tar.xz).
#   build BUILD_DIR [--backend B] [--model PATH] [--budget SECONDS]
#       A GPU box with the dev packages (MPI, gtest, OpenBLAS, yaml-cpp, ...) and the openai
#       client: configures BUILD_DIR with -DADAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, builds,
#       computes the goldens there with the CPU backend on the whole default model (or --model),
#       and runs as `run` does.
#
# On the lent machine (the device tool), after `prepare .device-pack` here:
#   carry [".device-pack"], command "bash tests/gpu/run-on-device.sh run .device-pack",
#   timeout_s 360: the steps stop within the budget (300 s), the unpacking takes seconds, so a
#   second call still fits in a 15-minute lease.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ADAKV_HOME="${ADAKV_HOME:-$HOME/.cache/adakv}"
DEFAULT_MODEL="$ADAKV_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PACK_LIMIT_MIB="${ADAKV_PACK_LIMIT_MIB:-55}"
# Open MPI 4.1 and the libraries its own libraries load (Debian 12's names). Left out, to keep
# the pack small: the network fabrics' libraries (UCX, libfabric, PSM, verbs), which only the
# plugins of those fabrics load; on one machine ranks talk through shared memory (vader), and
# `run` silences the plugins' load errors.
MPI_DEBS=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libevent-2.1-7 libmunge2 libudev1)
BINARIES=(adakv tests/gpu/adakv_cuda_backend_tests tests/gpu/adakv_gpu_tests tests/adakv_bench_cuda)
# The generate cases of step c (case_args gives their arguments).
CASES=(short.full chat.full long.full long.adakv)
GEN_FLAGS=(--max-tokens 64 --ignore-eos --json --decode-dots float)
MPI_FLAGS=(--allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

die() {
  echo "run-on-device: $*" >&2
  exit 1
}
log() { echo "== $*" >&2; }

case_args() {
  local g=$1
  case "$2" in
    short.full) echo "--prompt-file $g/short.txt --policy full" ;;
    chat.full) echo "--chat --prompt-file $g/chat.txt --policy full" ;;
    long.full) echo "--chat --prompt-file $g/long.txt --policy full" ;;
    long.adakv) echo "--chat --prompt-file $g/long.txt --policy adakv" ;;
    *) die "unknown case $2" ;;
  esac
}

# The python helper: goldens' top logits, comparisons, the batch requests and the serve client
# (stdlib only, except the client, which needs openai).
write_helper() {
  cat >"$1" <<'PY'
import json, os, re, signal, struct, subprocess, sys, time

NEAR_TIE = 1e-3  # two tokens whose logits differ by at most this much of the largest


def load(path):
    with open(path) as f:
        return json.load(f)


def logits_rows(path, steps):
    data = open(path, "rb").read()
    vocab = len(data) // 4 // steps
    for i in range(steps):
        yield struct.unpack_from(f"<{vocab}f", data, i * vocab * 4)


def topk(logits_path, gen_path, out_path, k=8):
    """The k largest logits of every decode step (token, value) and the largest |logit|."""
    steps = len(load(gen_path)["tokens"])
    rows = []
    for row in logits_rows(logits_path, steps):
        best = sorted(range(len(row)), key=row.__getitem__, reverse=True)[:k]
        rows.append({"top": [[t, row[t]] for t in best], "amax": max(abs(min(row)), abs(max(row)))})
    with open(out_path, "w") as f:
        json.dump(rows, f)


def first_divergence(want, got):
    for i, (a, b) in enumerate(zip(want, got)):
        if a != b:
            return i
    return None if len(want) == len(got) else min(len(want), len(got))


def compare_gen(golden_path, top_path, got_path, logits_path=None):
    """Tokens (and Ada-KV budgets) of a run against the golden; near-ties are not failures."""
    want, got = load(golden_path), load(got_path)
    notes, ok, near_tie = [], True, False
    i = first_divergence(want["tokens"], got["tokens"])
    n = len(want["tokens"])
    if i is None:
        notes.append(f"{n}/{n} tokens same")
    elif i >= len(got["tokens"]) or i >= n:
        notes.append(f"{len(got['tokens'])} tokens, not {n}")
        ok = False
    else:
        a, b = want["tokens"][i], got["tokens"][i]
        step = load(top_path)[i] if top_path and os.path.exists(top_path) else None
        top = dict((t, v) for t, v in step["top"]) if step else {}
        text = f"diverges at {i}/{n}: cpu {a}, this {b}"
        if b in top and a in top:
            gap = top[a] - top[b]
            rel = gap / step["amax"]
            text += f"; cpu logit gap {gap:.4g} ({rel:.2g} of max)"
            if logits_path and os.path.exists(logits_path):
                row = list(logits_rows(logits_path, len(got["tokens"])))[i]
                text += f", this run's {row[b] - row[a]:.4g}"
            if rel <= NEAR_TIE:
                text += ": near-tie"
                near_tie = True
            else:
                ok = False
        else:
            text += " (not in the cpu's top 8)"
            ok = False
        notes.append(text)
    wb, gb = want.get("kv", {}).get("budgets"), got.get("kv", {}).get("budgets")
    if want.get("kv", {}).get("policy") not in (None, "full") and wb is not None:
        if wb == gb:
            notes.append(f"budgets same ({sum(len(r) for r in wb)} heads)")
        else:
            flat_w = [x for r in wb for x in r]
            flat_g = [x for r in (gb or []) for x in r]
            differ = sum(1 for x, y in zip(flat_w, flat_g) if x != y) + abs(len(flat_w) - len(flat_g))
            notes.append(f"budgets DIFFER in {differ} of {len(flat_w)} heads")
            # Look-ahead tokens are decoded before the budgets are set: after a near-tie among
            # them the two runs scored different queries.
            lookahead = want.get("compression", {}).get("lookahead") or 0
            if near_tie and i < lookahead:
                notes[-1] += f" (after the near-tie, inside the {lookahead} look-ahead tokens)"
            else:
                ok = False
    print("; ".join(notes))
    return 0 if ok else 1


def make_requests(long_path, out_path):
    """Six requests, 5 to ~1,500 tokens: plain and chat, the longest compressed by Ada-KV."""
    words = open(long_path).read().split()
    reqs = [{"prompt": "The capital of France is"},
            {"messages": [{"role": "user", "content": "Name three colours."}]}]
    for start, n in ((0, 60), (200, 300), (500, 700), (900, 1100)):
        reqs.append({"prompt": " ".join(words[start:start + n])})
    with open(out_path, "w") as f:
        for r in reqs:
            r.update({"max_tokens": 32, "temperature": 0, "ignore_eos": True})
            f.write(json.dumps(r) + "\n")


def compare_batch(golden_path, got_path):
    def rows(path):
        out = {}
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                out[r.get("index")] = r
        return out
    want, got = rows(golden_path), rows(got_path)
    errors = [r["error"] for r in got.values() if "error" in r]
    if errors:
        print(f"error: {errors[0]}")
        return 1
    same, notes = 0, []
    for idx, w in sorted(want.items()):
        g = got.get(idx)
        if g is None:
            notes.append(f"request {idx} missing")
            continue
        i = first_divergence(w["tokens"], g["tokens"])
        if i is None and w["kv"].get("budgets") == g["kv"].get("budgets"):
            same += 1
        elif i is None:
            notes.append(f"request {idx}: budgets differ")
        else:
            notes.append(f"request {idx} diverges at {i}")
    print(f"{same}/{len(want)} requests same tokens and budgets" + ("; " if notes else "") +
          "; ".join(notes))
    return 0 if same == len(want) else 1


def serve_check(out_path, *cmd):
    """Starts `adakv serve --port 0`, asks a chat completion and a streaming one through the
    openai client, stops the server (SIGTERM; it must exit 0) and writes what it got."""
    import openai
    env = dict(os.environ)
    if os.environ.get("ADAKV_CHILD_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["ADAKV_CHILD_LD_LIBRARY_PATH"]
    err_path = out_path + ".server.log"
    err = open(err_path, "w+")
    proc = subprocess.Popen(list(cmd) + ["--port", "0"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err, env=env)
    result = {}
    try:
        ready = re.compile(r"\[adakv\] serving (\S+) on http://([^\s:]+):(\d+)")
        deadline, m = time.monotonic() + 90, None
        while time.monotonic() < deadline and not m:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited {proc.returncode}: {open(err_path).read()[-2000:]}")
            time.sleep(0.2)
            m = ready.search(open(err_path).read())
        if not m:
            raise RuntimeError("serve printed no '[adakv] serving NAME on http://HOST:PORT' in 90 s")
        name, host, port = m.group(1), m.group(2), m.group(3)
        client = openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="none", timeout=60,
                               max_retries=0)
        messages = [{"role": "user", "content": "Write one sentence about graphics cards."}]
        args = dict(model=name, messages=messages, max_tokens=24, temperature=0,
                    extra_body={"ignore_eos": True})
        r = client.chat.completions.create(**args)
        result["model"] = name
        result["chat"] = r.choices[0].message.content
        result["chat_tokens"] = r.usage.completion_tokens if r.usage else None
        pieces = []
        for chunk in client.chat.completions.create(stream=True, **args):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        result["stream"] = "".join(pieces)
        result["stream_chunks"] = len(pieces)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        result["server_exit"] = proc.returncode
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"openai {openai.__version__}: chat {len(result.get('chat') or '')} chars, stream "
          f"{result.get('stream_chunks')} chunks, server exit {proc.returncode}")
    return 0 if proc.returncode == 0 else 1


def compare_serve(golden_path, got_path):
    want, got = load(golden_path), load(got_path)
    notes, ok = [], True
    if got.get("chat") == want.get("chat"):
        notes.append(f"chat text as the cpu's ({got.get('chat_tokens')} tokens)")
    else:
        notes.append(f"chat text DIFFERS: {got.get('chat')!r} vs cpu {want.get('chat')!r}")
        ok = False
    if got.get("stream") == got.get("chat"):
        notes.append(f"stream = chat ({got.get('stream_chunks')} chunks)")
    else:
        notes.append("stream DIFFERS from chat")
        ok = False
    if got.get("server_exit") != 0:
        notes.append(f"server exit {got.get('server_exit')}")
        ok = False
    print("; ".join(notes))
    return 0 if ok else 1


def bench_note(path):
    """The benchmark's summary line against its targets."""
    line = [l for l in open(path) if l.startswith("summary ")]
    if not line:
        print("no summary line")
        return 1
    v = dict(kv.split("=") for kv in line[-1].split()[1:])
    num = lambda k: None if v.get(k, "n/a") == "n/a" else float(v[k])
    checks = [("attention", num("attention_ratio"), lambda x: x >= 0.70, "of copy, >= 0.70"),
              ("GEMM", num("gemm_ratio"), lambda x: x >= 0.70, "of Sgemm, >= 0.70"),
              ("scores", num("scores_ms"), lambda x: x < 2.0, "ms/layer, < 2")]
    notes, ok = [f"copy {v.get('copy_gbs')} GB/s"], v.get("failed") == "0"
    for name, x, good, text in checks:
        if x is None:
            notes.append(f"{name} n/a")
            ok = False
        else:
            notes.append(f"{name} {x:g} {text}{'' if good(x) else ' MISSED'}")
            ok = ok and good(x)
    notes.append(f"GEMM@4096 {v.get('gemm_vs_large')} of Sgemm 8192^3")
    print("; ".join(notes))
    return 0 if ok else 1


def gtest_note(log_path):
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(log_path, errors="replace").read())
    passed = re.findall(r"\[  PASSED  \] (\d+) test", text)
    failed = sorted(set(re.findall(r"\[  FAILED  \] (\w+\.\w+)", text)))
    skipped = re.findall(r"\[  SKIPPED \] (\d+) test", text)
    out = f"{sum(map(int, passed))} passed, {len(failed)} failed"
    if skipped:
        out += f", {sum(map(int, skipped))} skipped"
    if failed:
        out += ": " + " ".join(failed[:6]) + (" ..." if len(failed) > 6 else "")
    print(out)


if __name__ == "__main__":
    fn = globals()[sys.argv[1].replace("-", "_")]
    sys.exit(fn(*sys.argv[2:]) or 0)
PY
}

# ---- prepare ---------------------------------------------------------------------------------

# A python with the gguf package: python3's, else a venv of its own in $ADAKV_HOME.
gguf_python() {
  if python3 -c "import gguf" 2>/dev/null; then
    echo python3
    return
  fi
  local venv="$ADAKV_HOME/venv-gguf"
  if ! "$venv/bin/python" -c "import gguf" 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/python" -m pip install --quiet gguf >&2 ||
      die "cannot install the gguf package into $venv"
  fi
  echo "$venv/bin/python"
}

# A python with the openai client: python3's, else the project's client venv
# (cluster/setup-node.sh client), else the pack's wheels installed into $2 (python 3.12).
client_python() {
  local wheels=$1 site=$2
  if python3 -c "import openai" 2>/dev/null; then
    echo python3
  elif [ -n "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
      "$wheels"/*.whl >&2 && PYTHONPATH="$site" python3 -c "import openai" 2>/dev/null; then
    echo "env PYTHONPATH=$site python3"
  elif [ -x "$ADAKV_HOME/venv/bin/python" ] && "$ADAKV_HOME/venv/bin/python" -c "import openai" 2>/dev/null; then
    echo "$ADAKV_HOME/venv/bin/python"
  else
    bash "$REPO/cluster/setup-node.sh" client
  fi
}

# The goldens of steps c-f, from the CPU backend: make_goldens GOLDENS MODEL ADAKV MPIRUN...
make_goldens() {
  local g=$1 model=$2 adakv=$3
  shift 3
  local mpirun=("$@") helper="$g/.helper.py" tmp
  tmp=$(mktemp -d)
  mkdir -p "$g"
  write_helper "$helper"
  printf 'The capital of France is' >"$g/short.txt"
  printf 'Write a haiku about graphics cards.' >"$g/chat.txt"
  python3 "$REPO/tests/tools/make_demo_prompt.py" >"$g/long.txt" || die "make_demo_prompt.py failed"
  export ADAKV_CONFIGS="$REPO/configs" ADAKV_BACKEND=cpu OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  local c
  for c in "${CASES[@]}"; do
    log "golden: generate $c (cpu)"
    # shellcheck disable=SC2046
    "$adakv" generate --model "$model" $(case_args "$g" "$c") "${GEN_FLAGS[@]}" \
      --logits-file "$tmp/logits.bin" >"$g/gen-$c.json" 2>"$tmp/err" ||
      die "golden generate $c failed: $(tail -5 "$tmp/err")"
    python3 "$helper" topk "$tmp/logits.bin" "$g/gen-$c.json" "$g/top-$c.json" || die "topk failed"
  done
  log "golden: generate long.adakv at TP 3 (cpu)"
  # shellcheck disable=SC2046
  "${mpirun[@]}" -np 3 -x ADAKV_BACKEND -x ADAKV_CONFIGS -x OMP_NUM_THREADS "$adakv" generate \
    --model "$model" $(case_args "$g" long.adakv) "${GEN_FLAGS[@]}" >"$g/gen-long.adakv.tp3.json" \
    2>"$tmp/err" || die "golden TP 3 generate failed: $(tail -5 "$tmp/err")"
  log "golden: batch (cpu)"
  python3 "$helper" make_requests "$g/long.txt" "$g/requests.jsonl"
  "$adakv" batch "$g/requests.jsonl" --model "$model" --kv-pool-mb 256 --decode-dots float -q \
    >"$g/batch.jsonl" 2>"$tmp/err" || die "golden batch failed: $(tail -5 "$tmp/err")"
  log "golden: serve + openai client (cpu)"
  local client
  client=$(client_python "" "")
  # shellcheck disable=SC2086
  $client "$helper" serve_check "$g/serve.json" "$adakv" serve --model "$model" --kv-pool-mb 256 \
    --decode-dots float || die "golden serve failed: $(tail -5 "$g/serve.json.server.log" 2>/dev/null)"
  rm -f "$g/serve.json.server.log" "$helper"
  rm -rf "$tmp"
  python3 - "$g" <<'PY'
import json, sys
g = sys.argv[1]
for c in ("short.full", "chat.full", "long.full", "long.adakv"):
    d = json.load(open(f"{g}/gen-{c}.json"))
    print(f"  {c}: {d['prompt_tokens']} prompt tokens, 64 tokens {d['tokens'][:6]}..., "
          f"budgets {'per head' if d['kv'].get('policy') != 'full' else '-'}")
tp1 = json.load(open(f"{g}/gen-long.adakv.json"))
tp3 = json.load(open(f"{g}/gen-long.adakv.tp3.json"))
print(f"  cpu TP 3 vs TP 1: tokens {'same' if tp1['tokens'] == tp3['tokens'] else 'DIFFER'}, "
      f"budgets {'same' if tp1['kv']['budgets'] == tp3['kv']['budgets'] else 'DIFFER'}")
PY
}

# Bytes of what the device tool sends: the repo's tracked and untracked-not-ignored files, and DIR.
travel_bytes() {
  local dir=$1
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  du -sb "$dir" | cut -f1
}

prepare() {
  local dir="" build="$REPO/build" layers=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --build) build=$2; shift 2 ;;
      --layers) layers=$2; shift 2 ;;
      -*) die "prepare: unknown option $1" ;;
      *) dir=$1; shift ;;
    esac
  done
  [ -n "$dir" ] || die "usage: $0 prepare DIR [--build B] [--layers N]"
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
  case "$dir" in "$REPO"/*) ;; *) die "$dir is not inside the repo: the device tool sends only the repo" ;; esac
  (cd "$REPO" && git check-ignore -q "$dir") || die "$dir is not git-ignored: add it to .gitignore and carry it"
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$build/$b" ] || die "$build/$b is missing: build with the CUDA backend first (see the header)"
  done
  if command -v cuobjdump >/dev/null && ! cuobjdump --list-elf "$build/adakv" 2>/dev/null | grep -q sm_90; then
    die "$build/adakv holds no sm_90 code: configure with -DCMAKE_CUDA_ARCHITECTURES=90"
  fi
  [ -f "$DEFAULT_MODEL" ] || die "no $DEFAULT_MODEL: run cluster/setup-node.sh"
  rm -rf "${dir:?}"/* && mkdir -p "$dir/debs" "$dir/wheels"
  local stage
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-gcc"

  log "Open MPI packages"
  (cd "$dir/debs" && apt-get download "${MPI_DEBS[@]}" >/dev/null 2>&1) ||
    (apt-get update >/dev/null && cd "$dir/debs" && apt-get download "${MPI_DEBS[@]}" >/dev/null) ||
    die "apt-get download of the Open MPI packages failed"
  # Libraries the packages bring are not copied from this machine.
  local mpi_root
  mpi_root=$(mktemp -d)
  for b in "$dir"/debs/*.deb; do dpkg -x "$b" "$mpi_root"; done
  local provided
  provided=$(find "$mpi_root" -name '*.so*' -printf '%f\n' | sort -u)

  log "binaries and the libraries a bare machine lacks"
  for b in "${BINARIES[@]}"; do
    cp "$build/$b" "$stage/bin/" && strip --strip-unneeded "$stage/bin/$(basename "$b")"
  done
  local name path
  while read -r name path; do
    case "$name" in
      linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | \
        libutil.so* | libresolv.so*) continue ;;                                    # glibc
      libcuda.so* | libcudart.so* | libnccl.so* | libcublas*.so* | libnvidia*) continue ;;  # the device's
    esac
    grep -qxF "$name" <<<"$provided" && continue
    case "$name" in
      libstdc++.so* | libgcc_s.so*) cp -L "$path" "$stage/lib-gcc/$name" ;;
      *) cp -L "$path" "$stage/lib/$name" ;;
    esac
  done < <(for b in "${BINARIES[@]}"; do ldd "$build/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
  rm -rf "$mpi_root"
  # The newest libstdc++ symbol version the binaries need: `run` adds lib-gcc only when the
  # machine's libstdc++ lacks it.
  objdump -T "$stage"/bin/* | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1 >"$stage/needs-glibcxx"
  objdump -T "$stage"/bin/* "$stage"/lib/* | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 >"$stage/needs-glibc"
  tar -C "$stage" -cf - . | xz -T2 -6 >"$dir/bin.tar.xz" || die "packing the binaries failed"

  log "openai client wheels (python 3.12, manylinux x86-64)"
  local client version
  client=$(client_python "" "") || die "no python with the openai client"
  # shellcheck disable=SC2086
  version=$($client -c 'import openai; print(openai.__version__)')
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dir/wheels" "openai==$version" ||
    die "pip download of openai $version failed"

  log "the default model cut to $layers layers"
  local py
  py=$(gguf_python)
  "$py" "$REPO/tests/tools/truncate_gguf.py" "$DEFAULT_MODEL" "$stage/model.gguf" --layers "$layers" ||
    die "truncate_gguf.py failed"
  xz -T2 -6 -c "$stage/model.gguf" >"$dir/model.gguf.xz"

  log "CPU goldens"
  make_goldens "$dir/goldens" "$stage/model.gguf" "$build/adakv" mpirun "${MPI_FLAGS[@]}" ||
    die "goldens failed"
  {
    echo "made $(date -u +%FT%TZ) from $(cd "$REPO" && git rev-parse --short HEAD) (+ the working tree)"
    echo "build $build; model $(basename "$DEFAULT_MODEL"), first $layers layers"
    echo "needs $(cat "$stage/needs-glibc") and $(cat "$stage/needs-glibcxx")"
  } >"$dir/manifest.txt"
  rm -rf "$stage"

  local repo_bytes pack_bytes total limit
  read -r repo_bytes pack_bytes < <(travel_bytes "$dir" | paste -sd' ')
  total=$((repo_bytes + pack_bytes))
  limit=$((PACK_LIMIT_MIB * 1024 * 1024))
  du -sh "$dir"/* | sed 's/^/  /'
  awk -v p="$pack_bytes" -v r="$repo_bytes" -v l="$PACK_LIMIT_MIB" 'BEGIN {
    printf "pack %.1f MiB + repo %.1f MiB = %.1f MiB to travel (limit %d MiB)\n", p / 1048576,
      r / 1048576, (p + r) / 1048576, l }'
  [ "$total" -le "$limit" ] || die "over $PACK_LIMIT_MIB MiB: use --layers 1 or carry less"
}

# ---- run -------------------------------------------------------------------------------------

# Directories holding the CUDA runtime, cuBLAS and NCCL on this machine, for LD_LIBRARY_PATH:
# none for those the loader finds already (ldconfig), else python's nvidia-* wheels, the
# toolkit's folders, and last a search.
cuda_lib_dirs() {
  local lib d found dirs=() py_dirs
  py_dirs=$(python3 -c 'import nvidia, sys; print(" ".join(nvidia.__path__))' 2>/dev/null)
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    ldconfig -p 2>/dev/null | grep -q "$lib " && continue
    found=""
    for d in $py_dirs; do
      found=$(ls "$d"/*/lib/"$lib" 2>/dev/null | head -1)
      [ -n "$found" ] && break
    done
    if [ -z "$found" ]; then
      found=$(ls /usr/local/cuda/lib64/"$lib" /usr/local/cuda/lib/"$lib" \
        /usr/local/cuda/targets/x86_64-linux/lib/"$lib" /usr/local/cuda-*/lib64/"$lib" 2>/dev/null | head -1)
    fi
    if [ -z "$found" ]; then
      found=$(timeout 60 find / -name "$lib" -not -path '/proc/*' 2>/dev/null | head -1)
    fi
    [ -n "$found" ] && dirs+=("$(dirname "$found")") || echo "run-on-device: $lib not found" >&2
  done
  [ -d /usr/local/nvidia/lib64 ] && dirs+=(/usr/local/nvidia/lib64)
  printf '%s\n' "${dirs[@]}" | awk '!seen[$0]++' | paste -sd:
}

# step NAME SECONDS FUNCTION ARGS...: runs FUNCTION in a subshell that is a process group of its
# own (run sets -m) with a time limit (never past the run's budget), its output to
# logs/NAME.log, and records the result: exit 0 pass, 77 skip, anything else FAIL; the last line
# of logs/NAME.note is the table's note. The whole group is killed when the step ends, so a
# server or mpirun ranks it left behind go with it.
step() {
  local name=$1 limit=$2
  shift 2
  local now left t0 pid rc=0 result note
  now=$(date +%s)
  left=$((DEADLINE - now))
  if [ "$left" -lt 5 ]; then
    printf '%s\tskip\t0\tthe run'"'"'s budget is spent\n' "$name" >>"$WORK/results.tsv"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "$name (at most ${limit}s)"
  t0=$(date +%s.%N)
  ("$@") >"$WORK/logs/$name.log" 2>&1 </dev/null &
  pid=$!
  local waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge $((limit * 5)) ]; then
      kill -TERM -- "-$pid" 2>/dev/null
      sleep 3
      kill -KILL -- "-$pid" 2>/dev/null
      rc=124
      break
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  if [ "$rc" -ne 124 ]; then
    wait "$pid"
    rc=$?
  else
    wait "$pid" 2>/dev/null
  fi
  kill -KILL -- "-$pid" 2>/dev/null
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  case "$rc" in
    0) result=pass ;;
    77) result=skip ;;
    *) result=FAIL ;;
  esac
  note=$(tail -1 "$WORK/logs/$name.note" 2>/dev/null)
  [ "$rc" -eq 124 ] && note="timed out after ${limit}s; $note"
  [ -z "$note" ] && note="exit $rc: $(grep -v '^\s*$' "$WORK/logs/$name.log" | tail -1 | cut -c1-150)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$result" "$secs" "$note" >>"$WORK/results.tsv"
  echo "   $result ($secs s): $note" >&2
}

note() { echo "$*" >>"$WORK/logs/$STEP_NAME.note"; }
py() { env -u LD_LIBRARY_PATH python3 "$WORK/helper.py" "$@"; }
adakv() { "$PACK/bin/adakv" "$@"; }
# mpirun passing on the variables the ranks need (those that are set).
mpirun_() {
  local v x=()
  for v in LD_LIBRARY_PATH OPAL_PREFIX OPAL_SYSCONFDIR PMIX_MCA_pcompress_base_silence_warning \
    OMPI_MCA_btl_vader_single_copy_mechanism OMPI_MCA_mca_base_component_show_load_errors GTEST_COLOR \
    ADAKV_BACKEND ADAKV_CONFIGS OMP_NUM_THREADS; do
    [ -n "${!v:-}" ] && x+=(-x "$v")
  done
  "$MPIRUN" "${MPI_FLAGS[@]}" "${x[@]}" "$@"
}

# a. Every gtest suite of adakv_cuda_backend_tests in a process of its own, as ctest runs them
# (a fault in one group's kernel cannot take the others with it).
step_cuda_tests() {
  STEP_NAME=cuda_tests
  local bin="$PACK/bin/adakv_cuda_backend_tests" suites s rc passed=0 failed=() skipped=0
  "$bin" --gtest_list_tests >"$WORK/cuda_suites.txt" 2>&1
  suites=$(awk '/^[^ ].*\.$/ {sub(/\.$/, ""); print}' "$WORK/cuda_suites.txt")
  [ -n "$suites" ] || { note "no suites listed: $(tail -1 "$WORK/cuda_suites.txt")"; return 1; }
  for s in $suites; do
    echo "---- $s"
    timeout 120 "$bin" --gtest_filter="$s.*" --gtest_brief=1
    rc=$?
    case $rc in
      0) passed=$((passed + 1)) ;;
      77) skipped=$((skipped + 1)) ;;
      *) failed+=("$s($rc)") ;;
    esac
  done
  local total
  total=$(wc -w <<<"$suites")
  if [ "$skipped" -eq "$total" ]; then
    note "skipped: $(grep -m1 -i 'no usable\|device\|skip' "$WORK/logs/cuda_tests.log" | cut -c1-120)"
    return 77
  fi
  note "$passed/$total groups pass; $(py gtest_note "$WORK/logs/cuda_tests.log")${failed[*]:+; failed groups: ${failed[*]}}"
  [ ${#failed[@]} -eq 0 ]
}

# b. The NCCL communicator at one rank (NCCL refuses two ranks on one GPU), as ctest's
# gpu.nccl.np1 runs it: 77 when every test skipped itself (no device).
step_nccl() {
  STEP_NAME=nccl
  mpirun_ -np 1 --timeout 150 "$PACK/bin/adakv_gpu_tests" --gtest_filter='NcclCommunicatorTest.*'
  local rc=$?
  if [ "$rc" -eq 77 ]; then
    note "skipped: $(grep -m1 -iE 'needs|no usable|no cuda' "$WORK/logs/nccl.log" | cut -c1-120)"
  else
    note "$(py gtest_note "$WORK/logs/nccl.log")"
  fi
  return $rc
}

# c. One generate case on the backend under test against the CPU's golden.
step_e2e() {
  local c=$1
  STEP_NAME=e2e.$c
  # shellcheck disable=SC2046
  adakv generate --model "$MODEL" $(case_args "$GOLD" "$c") "${GEN_FLAGS[@]}" \
    --logits-file "$WORK/logits-$c.bin" >"$WORK/results/gen-$c.json" || {
    note "generate exited $?"
    return 1
  }
  local out rc
  out=$(py compare_gen "$GOLD/gen-$c.json" "$GOLD/top-$c.json" "$WORK/results/gen-$c.json" \
    "$WORK/logits-$c.bin")
  rc=$?
  note "$out"
  return $rc
}

# d. The Ada-KV case as 3 ranks on this machine against this run's TP 1 (step c).
step_tp3() {
  STEP_NAME=tp3
  # shellcheck disable=SC2046
  mpirun_ -np 3 "$PACK/bin/adakv" generate --model "$MODEL" $(case_args "$GOLD" long.adakv) \
    "${GEN_FLAGS[@]}" >"$WORK/results/gen-long.adakv.tp3.json" || {
    note "mpirun exited $?"
    return 1
  }
  [ -s "$WORK/results/gen-long.adakv.json" ] || {
    note "no TP 1 result (e2e.long.adakv) to compare with"
    return 1
  }
  local vs_tp1 vs_cpu rc
  # Near-ties judged on this backend's TP 1 logits.
  py topk "$WORK/logits-long.adakv.bin" "$WORK/results/gen-long.adakv.json" "$WORK/top-tp1.json"
  vs_tp1=$(py compare_gen "$WORK/results/gen-long.adakv.json" "$WORK/top-tp1.json" \
    "$WORK/results/gen-long.adakv.tp3.json")
  rc=$?
  vs_cpu=$(py compare_gen "$GOLD/gen-long.adakv.tp3.json" "$GOLD/top-long.adakv.json" \
    "$WORK/results/gen-long.adakv.tp3.json")
  note "vs TP 1: $vs_tp1 | vs cpu TP 3: $vs_cpu"
  return $rc
}

# e. adakv batch against the CPU's results.
step_batch() {
  STEP_NAME="batch"
  adakv batch "$GOLD/requests.jsonl" --model "$MODEL" --kv-pool-mb 256 --decode-dots float \
    >"$WORK/results/batch.jsonl" || {
    note "batch exited $?"
    return 1
  }
  local out rc
  out=$(py compare_batch "$GOLD/batch.jsonl" "$WORK/results/batch.jsonl")
  rc=$?
  note "$out"
  return $rc
}

# f. adakv serve through the openai client against the CPU server's text.
step_serve() {
  STEP_NAME=serve
  local client
  client=$(client_python "$PACK_DIR/wheels" "$WORK/site") || {
    note "no python with the openai client"
    return 1
  }
  # shellcheck disable=SC2086
  ADAKV_CHILD_LD_LIBRARY_PATH="$LD_LIBRARY_PATH" env -u LD_LIBRARY_PATH $client "$WORK/helper.py" \
    serve_check "$WORK/results/serve.json" "$PACK/bin/adakv" serve --model "$MODEL" \
    --kv-pool-mb 256 --decode-dots float || {
    note "serve check failed: $(tail -3 "$WORK/results/serve.json.server.log" 2>/dev/null | tr '\n' ' ')"
    return 1
  }
  local out rc
  out=$(py compare_serve "$GOLD/serve.json" "$WORK/results/serve.json")
  rc=$?
  note "$out"
  return $rc
}

# g. The GPU benchmarks.
step_bench() {
  STEP_NAME=bench
  "$PACK/bin/adakv_bench_cuda" | tee "$WORK/results/bench.txt"
  local rc=$?
  if [ "$rc" -eq 2 ]; then
    note "skipped: $(tail -1 "$WORK/logs/bench.log" | cut -c1-120)"
    return 77
  fi
  local out ok
  out=$(py bench_note "$WORK/results/bench.txt")
  ok=$?
  note "$out"
  [ "$ok" -eq 0 ] && [ "$rc" -eq 0 ]
}

# unpack_deb DEB ROOT: dpkg -x, or where there is no dpkg, the package's data.tar.* read
# from its ar archive by python.
unpack_deb() {
  if command -v dpkg >/dev/null; then
    dpkg -x "$1" "$2"
    return
  fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
at = 8
while at < len(data):
    name, size = data[at:at + 16].decode().strip().rstrip("/"), int(data[at + 48:at + 58])
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(data[at + 60:at + 60 + size])).extractall(sys.argv[2])
        break
    at += 60 + size + size % 2
else:
    sys.exit("no data.tar member")
PY
}

# Unpacks DIR (or uses an unpacked one: bin/ and model.gguf, as `build` leaves them) into WORK
# and sets up the environment of the steps.
setup_run() {
  local dir=$1
  PACK_DIR=$dir
  WORK=$(mktemp -d /tmp/adakv-device.XXXXXX)
  mkdir -p "$WORK/logs" "$WORK/results"
  write_helper "$WORK/helper.py"
  if [ -d "$dir/bin" ]; then
    PACK=$dir
  else
    PACK=$WORK/pack
    mkdir -p "$PACK"
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$dir/bin.tar.xz" "$PACK" || die "cannot unpack $dir/bin.tar.xz"
  fi
  if [ -f "$dir/model.gguf" ] || [ -L "$dir/model.gguf" ]; then
    MODEL=$dir/model.gguf
  else
    MODEL=$WORK/model.gguf
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$dir/model.gguf.xz" "$MODEL" || die "cannot unpack $dir/model.gguf.xz"
  fi
  GOLD=$dir/goldens

  local ld=""
  [ -d "$PACK/lib" ] && ld=$PACK/lib
  if [ -s "$PACK/needs-glibcxx" ]; then
    local need sys_lib
    need=$(cat "$PACK/needs-glibcxx")
    sys_lib=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
    if [ -z "$sys_lib" ] || ! grep -aq "$need" "$sys_lib"; then
      log "this machine's libstdc++ (${sys_lib:-none}) lacks $need: using the pack's"
      ld=$PACK/lib-gcc:$ld
    fi
  fi
  if [ -d "$dir/debs" ]; then
    # Open MPI in a private prefix: OPAL_PREFIX relocates it.
    local root=$WORK/mpi
    mkdir -p "$root"
    for deb in "$dir"/debs/*.deb; do unpack_deb "$deb" "$root" || die "cannot unpack $deb"; done
    MPIRUN=$root/usr/bin/orterun
    export OPAL_PREFIX=$root/usr OPAL_SYSCONFDIR=$root/etc/openmpi
    export PMIX_MCA_pcompress_base_silence_warning=1 OMPI_MCA_mca_base_component_show_load_errors=0
    ld=$ld:$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu
    ld=$ld:$root/usr/lib/x86_64-linux-gnu/openmpi/lib:$root/usr/lib/x86_64-linux-gnu/pmix2/lib
  else
    MPIRUN=$(command -v mpirun) || die "no mpirun and no Open MPI packages in $dir"
  fi
  local cuda
  cuda=$(cuda_lib_dirs)
  export LD_LIBRARY_PATH="${ld#:}${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ADAKV_CONFIGS="$REPO/configs" OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
  export OMPI_MCA_btl_vader_single_copy_mechanism=none GTEST_COLOR=no
}

run() {
  local dir="" backend=cuda budget=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --backend) backend=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      -*) die "run: unknown option $1" ;;
      *) dir=$1; shift ;;
    esac
  done
  [ -n "$dir" ] || die "usage: $0 run DIR [--backend cuda|cpu|guarded] [--budget SECONDS]"
  case "$backend" in cuda | cpu | guarded) ;; *) die "--backend is cuda, cpu or guarded" ;; esac
  [ -n "$budget" ] || { [ "$backend" = cuda ] && budget=300 || budget=1500; }
  dir=$(cd "$dir" && pwd) || die "no $dir"
  local started
  started=$(date +%s)
  set -m
  setup_run "$dir"
  export ADAKV_BACKEND=$backend
  DEADLINE=$(($(date +%s) + budget))
  log "backend $backend; work folder $WORK; budget ${budget}s"
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "pack: $(cat "$dir/manifest.txt" 2>/dev/null | paste -sd' ')"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "mpirun: $MPIRUN"
    echo "glibc: $(ldd --version 2>&1 | head -1)"
    ldd "$PACK/bin/adakv" | grep -E 'not found|cudart|nccl|cublas|mpi\.so|stdc'
  } >"$WORK/logs/environment.log" 2>&1
  grep -q 'not found' "$WORK/logs/environment.log" && log "unresolved libraries: $(grep 'not found' "$WORK/logs/environment.log" | paste -sd' ')"

  : >"$WORK/results.tsv"
  step cuda_tests 150 step_cuda_tests
  step nccl 60 step_nccl
  local c
  for c in "${CASES[@]}"; do step "e2e.$c" 90 step_e2e "$c"; done
  step tp3 120 step_tp3
  step batch 90 step_batch
  step serve 90 step_serve
  step bench 150 step_bench

  local table="$WORK/table.txt" total
  total=$(($(date +%s) - started))
  {
    printf '\nrun-on-device: backend %s, %s, %s s in all\n' "$backend" "$(date -u +%FT%TZ)" "$total"
    printf '%-15s %-6s %7s  %s\n' step result seconds note
    while IFS=$'\t' read -r name result secs text; do
      printf '%-15s %-6s %7s  %s\n' "$name" "$result" "$secs" "$text"
    done <"$WORK/results.tsv"
    printf '%s passed, %s failed, %s skipped\n' "$(grep -c $'\tpass\t' "$WORK/results.tsv")" \
      "$(grep -c $'\tFAIL\t' "$WORK/results.tsv")" "$(grep -c $'\tskip\t' "$WORK/results.tsv")"
  } >"$table"

  local out=${OUT:-$WORK/out} f
  mkdir -p "$out"
  cp "$table" "$out/table.txt"
  [ -s "$WORK/results/bench.txt" ] && cp "$WORK/results/bench.txt" "$out/bench.txt"
  for f in environment "$WORK"/logs/*.log; do
    case "$f" in
      environment) f=$WORK/logs/environment.log ;;
      */environment.log) continue ;;
    esac
    echo "==================== $(basename "$f")"
    cat "$f"
  done >"$out/steps.log"
  python3 - "$WORK" "$out/results.tar.xz" <<'PY'
import os, sys, tarfile
with tarfile.open(sys.argv[2], "w:xz") as t:
    for name in ("logs", "results", "table.txt"):
        t.add(os.path.join(sys.argv[1], name), arcname=name)
PY
  echo "logs: $out (steps.log, table.txt, bench.txt, results.tar.xz); work folder $WORK"
  cat "$table"
  ! grep -q $'\tFAIL\t' "$WORK/results.tsv"
}

# ---- build (a GPU box with the dev packages) ---------------------------------------------------

build() {
  local bdir="" model="$DEFAULT_MODEL" run_args=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --model) model=$2; shift 2 ;;
      --backend | --budget) run_args+=("$1" "$2"); shift 2 ;;
      -*) die "build: unknown option $1" ;;
      *) bdir=$1; shift ;;
    esac
  done
  [ -n "$bdir" ] || die "usage: $0 build BUILD_DIR [--backend B] [--model PATH] [--budget S]"
  [ -f "$model" ] || die "no model $model (cluster/setup-node.sh fetches the default one)"
  cmake -S "$REPO" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DADAKV_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 || die "configure failed"
  cmake --build "$bdir" --target adakv adakv_cuda_backend_tests adakv_gpu_tests adakv_bench_cuda ||
    die "build failed"
  local dir
  dir=$(cd "$bdir" && pwd)/device-run
  rm -rf "$dir" && mkdir -p "$dir/bin"
  local b
  for b in "${BINARIES[@]}"; do ln -s "$(cd "$bdir" && pwd)/$b" "$dir/bin/"; done
  ln -s "$(cd "$(dirname "$model")" && pwd)/$(basename "$model")" "$dir/model.gguf"
  make_goldens "$dir/goldens" "$dir/model.gguf" "$dir/bin/adakv" mpirun "${MPI_FLAGS[@]}" ||
    die "goldens failed"
  run "$dir" "${run_args[@]}"
}

mode=${1:-}
[ $# -gt 0 ] && shift
case "$mode" in
  prepare) prepare "$@" ;;
  run) run "$@" ;;
  build) build "$@" ;;
  *) die "usage: $0 prepare DIR [--build B] [--layers N] | run DIR [--backend cuda|cpu|guarded] [--budget S] | build BUILD_DIR [--backend B] [--model PATH]" ;;
esac
