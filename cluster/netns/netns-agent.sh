#!/usr/bin/env bash
# OpenMPI launch agent for the simulated nodes (mpi.launch_agent, i.e. --mca plm_rsh_agent):
# mpirun calls it as ssh would be called,
#   netns-agent.sh HOST COMMAND...
# where HOST is a node name from the hostfile (= its namespace, see sim-env.sh) and COMMAND is
# the daemon's command line, written for a shell. It runs that command inside HOST's network
# namespace and in a UTS namespace of its own whose host name is HOST. Without its own host
# name every simulated node would be "the same host" to Open MPI, which names per-host files
# after gethostname(): the session directory /tmp/ompi.HOST.UID and the shared-memory segment
# vader_segment.HOST.JOBID.LOCAL_RANK. Daemons and ranks of different nodes then share (and
# delete, and re-initialise) each other's files, and a job hangs now and then.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 HOST COMMAND..." >&2
  exit 2
fi
host="$1"
shift
if [ ! -e "/run/netns/$host" ]; then
  echo "netns-agent: no network namespace '$host'; start the simulation with" \
    "cluster/netns/netns-up.sh" >&2
  exit 1
fi
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$1" && exec sh -c "$2"' agent "$host" "$*"
