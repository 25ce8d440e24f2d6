#!/usr/bin/env bash
# The threaded parts under ThreadSanitizer (a build with -DADAKV_TSAN=ON): the scheduler, replica
# set, metrics and HTTP decoder unit tests and the serving loop's door (HTTP threads beside the
# engine thread, on a synthetic model), then `adakv serve` (the engine thread beside the HTTP
# threads, client disconnects, drain) and `adakv router` (its threads and the upstream calls it
# cuts) through the OpenAI client. One OpenMP thread: libgomp is not instrumented. Reports inside
# Open MPI are suppressed by library (tsan.supp). A process goes on after a report (the tests
# after it still run and it may report more) and exits 66; the step then fails and prints every
# report.
#   bash tests/sanitizers/run_tsan.sh build-tsan
set -euo pipefail
build="$(cd "$1" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fresh_logs "$build"
export OMP_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:log_path=$logs/tsan:suppressions=$repo/tests/sanitizers/tsan.supp"

step unit "$build/tests/adakv_tsan_unit_tests"
# Of the client suite, the tests that drive the server's threads: streams, concurrent and
# pipelined requests, disconnects, the queue limit, the API key and drain, errors and metrics.
# The ones left out compare the server with `adakv generate` runs: compute on one thread, many
# times slower under ThreadSanitizer, and run by ctest and the ASan build.
step openai_api.tp1 "$client_python" "$repo/tests/server/test_openai_api.py" \
  --adakv "$build/adakv" --tp 1 --start-timeout 300 -k stream -k concurrent -k pipelined \
  -k Disconnect -k QueueLimit -k ApiKeyAndDrain -k Errors -k Metrics.test_names \
  -k Metrics.test_counters
# The router with 16 concurrent clients, and a replica killed under it (streams of 60 tokens
# are still going 1.5 s in here); the third test (where questions about a cached context go) is
# routing logic the unit tests cover.
step router "$client_python" "$repo/tests/server/test_replica_router.py" --adakv "$build/adakv" \
  --kill-tokens 60 -k test_16_clients -k test_a_killed_replica
