#!/usr/bin/env bash
# The threaded parts under ThreadSanitizer (a build with -DADAKV_TSAN=ON): the scheduler, replica
# set, metrics and HTTP decoder unit tests, then `adakv serve` (the engine thread beside the HTTP
# threads, client disconnects, drain) and `adakv router` (its threads and the upstream calls it
# cuts) through the OpenAI client. One OpenMP thread: libgomp is not instrumented. Reports inside
# Open MPI are suppressed by library (tsan.supp); the first race stops a process.
#   bash tests/sanitizers/run_tsan.sh build-tsan
set -euo pipefail
build="$(cd "$1" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fresh_logs "$build"
export OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$logs/tsan:suppressions=$repo/tests/sanitizers/tsan.supp"

step unit "$build/tests/adakv_tsan_unit_tests"
step openai_api.tp1 "$client_python" "$repo/tests/server/test_openai_api.py" \
  --adakv "$build/adakv" --tp 1 --start-timeout 300
step router "$client_python" "$repo/tests/server/test_replica_router.py" --adakv "$build/adakv"
