#!/usr/bin/env bash
# The sanitized set under AddressSanitizer + UndefinedBehaviorSanitizer (a build with
# -DADAKV_SANITIZE=ON): corrupt files, the unit suite, the MPI suite as 2 and 3 ranks, `adakv
# batch` as 3 ranks, hostile HTTP requests, the OpenAI client suite at TP 1 and the data-parallel
# router. Leaks are reported in every process, MPI ranks included (Open MPI's own allocations
# suppressed, lsan.supp); the first error stops a process.
#   bash tests/sanitizers/run_asan.sh build-asan
set -euo pipefail
build="$(cd "$1" && pwd)"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fresh_logs "$build"
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$repo/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --timeout 600)

step corrupt_files "$build/tests/adakv_corrupt_file_tests"
# handle_segv=0: a death test makes the guarded backend fault on purpose (a host read of device
# memory) in a child process; that SIGSEGV is the expected death, not a report.
step unit env ASAN_OPTIONS="$ASAN_OPTIONS:handle_segv=0" "$build/tests/adakv_unit_tests"
# MPI ranks keep Open MPI's components loaded (keep_loaded_modules.so, preloaded into the ranks
# alone, hence verify_asan_link_order=0) so that what those keep until exit matches lsan.supp by
# library. fast_unwind_on_malloc=0: Open MPI's libraries have no frame pointers, and a stack
# cut at their first frame would hide the library a suppression names. use_tls=0: on some
# hosts a rank's dynamic TLS table holds a bogus range (0x3ef7-0x400004ff9) that the leak
# check's thread-local scan faults on ("Tracer caught signal 11"); without thread-local roots
# the check can only report more, never less.
rank_env=(-x LD_PRELOAD="$build/tests/libadakv_keep_loaded_modules.so"
  -x ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0:fast_unwind_on_malloc=0"
  -x LSAN_OPTIONS="$LSAN_OPTIONS:use_tls=0" -x UBSAN_OPTIONS -x OMP_NUM_THREADS=1)
for np in 2 3; do
  step "mpi.np$np" "${mpirun[@]}" "${rank_env[@]}" -np "$np" "$build/tests/adakv_mpi_tests"
done
# The serving loop on the real model as 3 ranks: a plain request, one compressed by Ada-KV and a
# compressed chat context (scored by reconstruction), then every rank's leak check at exit.
step batch.tp3 "${mpirun[@]}" "${rank_env[@]}" -np 3 "$build/adakv" batch \
  "$repo/tests/sanitizers/batch_requests.jsonl" --min-keep 0 --budget 0.5 --kv-pool-mb 64 \
  --threads 1 --quiet -o "$build/sanitizer-batch.jsonl"
step bad_input python3 "$repo/tests/server/bad_input_suite.py" --adakv "$build/adakv"
step openai_api.tp1 "$client_python" "$repo/tests/server/test_openai_api.py" \
  --adakv "$build/adakv" --tp 1 --start-timeout 300
step router "$client_python" "$repo/tests/server/test_replica_router.py" --adakv "$build/adakv"
