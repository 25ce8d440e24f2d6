#!/usr/bin/env bash
# Runs every fuzz target of a build (ADAKV_FUZZ=ON) for a bounded time: first its committed
# regression inputs (tests/fuzz/regressions/<target>/, each once), then fuzzing from its seed
# corpus (tests/tools/make_fuzz_corpus.py) plus what earlier runs found. Fails when any target
# crashes, leaks, exceeds the memory limit or hangs; the input that did it is left in
# BUILD/fuzz-crashes/. A target's tests/fuzz/targets/<target>.dict (keys and syntax of its
# format) is handed to libFuzzer.
#   run_fuzz_smoke.sh BUILD [SECONDS]
set -euo pipefail
build=$1
seconds=${2:-20}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$build/fuzz-crashes" "$build/fuzz-logs"

run_one() {
  local bin=$1 seconds=$2 src=$3 build=$4
  local name=${bin##*/fuzz_}
  local log="$build/fuzz-logs/$name.log"
  local common=(-rss_limit_mb=2048 -timeout=10 -malloc_limit_mb=2048
                -artifact_prefix="$build/fuzz-crashes/$name-")
  local reg="$src/tests/fuzz/regressions/$name"
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
    if ! "$bin" "${common[@]}" "$reg"/* > "$log.regressions" 2>&1; then
      echo "FAIL $name: a regression input fails ($log.regressions)"
      tail -30 "$log.regressions"
      return 1
    fi
  fi
  local work="$build/fuzz-work/$name"
  mkdir -p "$work"
  local dict="$src/tests/fuzz/targets/$name.dict"
  [ -f "$dict" ] && common+=(-dict="$dict")
  if ! "$bin" "${common[@]}" -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
      "$work" "$build/fuzz-corpus/$name" > "$log" 2>&1; then
    echo "FAIL $name ($log)"
    tail -40 "$log"
    return 1
  fi
  local runs cov
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  echo "ok   $name: ${runs:-?} runs, ${cov:-?}"
}
export -f run_one

# Two targets at a time: the fuzzers are single-threaded.
find "$build/tests/fuzz/targets" -maxdepth 1 -type f -executable -name 'fuzz_*' | sort |
  xargs -P 2 -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$src" "$build"
