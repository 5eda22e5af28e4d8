#!/bin/sh
# Usage: run_ranks.sh NRANKS PROGRAM [ARGS...]
# Starts NRANKS processes of PROGRAM with CHORUS_RANK / CHORUS_NRANKS and a shared
# NCCL_COMM_ID on a free local port; fails unless every rank exits 0.
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 NRANKS PROGRAM [ARGS...]" >&2
  exit 2
fi
nranks=$1
shift

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') ||
  { echo "could not pick a free port" >&2; exit 2; }
NCCL_COMM_ID="127.0.0.1:$port"
CHORUS_NRANKS=$nranks
export NCCL_COMM_ID CHORUS_NRANKS

pids=""
rank=0
while [ "$rank" -lt "$nranks" ]; do
  CHORUS_RANK=$rank "$@" &
  pids="$pids $!"
  rank=$((rank + 1))
done

status=0
rank=0
for pid in $pids; do
  if ! wait "$pid"; then
    echo "rank $rank failed" >&2
    status=1
  fi
  rank=$((rank + 1))
done
exit "$status"
