#!/bin/bash
# Runs benchmark ranks in network namespaces, one rank each (compare.py --netns), every
# namespace with a host name of its own (a separate UTS namespace), so that every library
# treats the ranks as hosts that share no memory.
#
#   nsrun.sh [agent] [OPTIONS] HOST COMMAND...
#       An rsh-style agent for mpirun (Open MPI's plm_rsh_agent, Hydra's -launcher-exec, which
#       call it with ssh's arguments: "agent" may be left out when NSRUN_HOSTS is set): runs
#       COMMAND through sh in the namespace that owns address HOST; NSRUN_HOSTS maps addresses
#       to namespaces ("10.78.0.1=nsA 10.78.0.2=nsB"). OPTIONS (ssh's, e.g. -x) are ignored.
#   nsrun.sh pair NS0 NS1 ADDR0 COMMAND...
#       Runs COMMAND in NS0 as rank 0 and in NS1 as rank 1 of 2 (RANK/WORLD_SIZE and
#       MASTER_ADDR/MASTER_PORT for torch, CHORUS_RANK/CHORUS_NRANKS and NCCL_COMM_ID for
#       Chorus; the rendezvous listens at ADDR0); prints rank 0's output (rank 1's on stderr)
#       and fails when either rank fails.
set -u

in_ns() {  # in_ns NS COMMAND... : COMMAND in namespace NS with host name NS
  local ns=$1
  shift
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

agent() {
  while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
  if [[ $# -lt 2 ]]; then
    echo "nsrun.sh agent: expected HOST COMMAND..." >&2
    exit 2
  fi
  host=$1
  shift
  for pair in ${NSRUN_HOSTS:-}; do
    if [[ "${pair%%=*}" == "$host" ]]; then
      in_ns "${pair#*=}" sh -c "$*"
    fi
  done
  echo "nsrun.sh agent: no namespace for host '$host' in NSRUN_HOSTS='${NSRUN_HOSTS:-}'" >&2
  exit 2
}

case "${1:-}" in
agent)
  shift
  agent "$@"
  ;;
pair)
  shift
  if [[ $# -lt 4 ]]; then
    echo "nsrun.sh pair: expected NS0 NS1 ADDR0 COMMAND..." >&2
    exit 2
  fi
  ns0=$1 ns1=$2 addr0=$3
  shift 3
  port=$((20000 + RANDOM % 20000))
  export WORLD_SIZE=2 CHORUS_NRANKS=2 MASTER_ADDR=$addr0 MASTER_PORT=$port
  export NCCL_COMM_ID=$addr0:$((port + 1))
  unset CHORUS_COMM_ID
  err1=$(mktemp)
  (RANK=1 CHORUS_RANK=1 in_ns "$ns1" "$@") >"$err1" 2>&1 &
  pid1=$!
  (RANK=0 CHORUS_RANK=0 in_ns "$ns0" "$@")
  rc0=$?
  wait "$pid1"
  rc1=$?
  sed 's/^/[rank 1] /' "$err1" >&2
  rm -f "$err1"
  if [[ $rc0 -ne 0 ]]; then exit $rc0; fi
  exit $rc1
  ;;
*)
  if [[ -n "${NSRUN_HOSTS:-}" ]]; then agent "$@"; fi
  echo "usage: nsrun.sh agent [OPTIONS] HOST COMMAND... | nsrun.sh pair NS0 NS1 ADDR0 COMMAND..." >&2
  exit 2
  ;;
esac
