# Shared by run_asan.sh and run_tsan.sh: step timing and the sanitizer report folder.
# Every sanitizer writes its reports to files under $logs (log_path), so that a report from any
# process (a server, an mpirun rank, a replica behind the router) fails the run even where the
# test that started the process only looks at its exit code.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
client_python="$(bash "$repo/cluster/setup-node.sh" client)"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_WAIT_POLICY=passive

fresh_logs() {
  logs="$1/sanitizer-logs"
  rm -rf "$logs"
  mkdir -p "$logs"
}

# step NAME COMMAND...: runs the command, prints its wall time, stops at the first failure.
step() {
  local name="$1" t0 rc
  shift
  t0=$(date +%s)
  echo "== [$name] $*"
  set +e
  "$@"
  rc=$?
  set -e
  echo "== [$name] exit $rc, $(($(date +%s) - t0)) s"
  # The reports first: a process that a sanitizer stopped makes the test fail too, and the
  # report says why.
  if ! no_reports || [ $rc -ne 0 ]; then
    exit 1
  fi
}

no_reports() {
  local found=0 f
  for f in "$logs"/*; do
    [ -e "$f" ] || continue
    found=1
    echo "== sanitizer report $f:"
    cat "$f"
  done
  return $found
}
