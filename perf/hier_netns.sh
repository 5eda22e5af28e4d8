#!/bin/bash
# The hierarchical algorithm against the best flat one across simulated hosts: H network
# namespaces of R ranks each (shared memory inside a host, TCP between hosts), every host's link
# optionally tbf-shaped to RATE. For each size, the perf tool runs with CHORUS_ALGO=hier and
# with CHORUS_ALGO=^hier (the selector's best flat algorithm), alternating, ROUNDS times. Prints
# per size the median time of each (us per call, out of place), the flat/hier ratio (above 1:
# hierarchical is faster) and what the ranks' own selector picks with nothing forced.
# Needs root and iproute2; nothing is configured outside the namespaces.
# usage: perf/hier_netns.sh [hosts] [ranks per host] [rate|none] [rounds] [sizes] [perf tool]
#   e.g. perf/hier_netns.sh 2 2 1gbit 5 "8 64K 1M 8M" all_reduce_perf
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
hosts=${1:-2}
per=${2:-2}
rate=${3:-none}
rounds=${4:-5}
sizes=${5:-"8 64K 1M 8M"}
tool=${6:-all_reduce_perf}
tag="chorus-hier-$$"
# shellcheck source=perf/netns_hosts.sh
. "$here/perf/netns_hosts.sh"
netns_hosts_start "$tag" "$hosts" "$rate"

nranks=$((hosts * per))
port=29900
# run NAME ALGO SIZE [extra env...]: one run of the tool on every rank; rank 0's output kept.
run() {
  local name=$1 algo=$2 size=$3 r h
  shift 3
  port=$((port + 1))
  for ((r = 0; r < nranks; r++)); do
    h=$((r / per))
    ip netns exec "$tag-$h" env CHORUS_RANK=$r CHORUS_NRANKS=$nranks \
      NCCL_COMM_ID=10.216.0.1:$port CHORUS_COMM_SECRET=0123456789abcdef \
      CHORUS_SOCKET_IFNAME=eth0 CHORUS_ALGO="$algo" "$@" \
      "$build/perf/$tool" -b "$size" -e "$size" -n 10 -w 3 -c 0 \
      > "$tmp/$name.$r" 2>&1 &
  done
  wait
}
# Rank 0 logs the selector's choice for each size class once.
log() { echo CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNING "CHORUS_DEBUG_FILE=$tmp/$1.log.%p"; }
for ((round = 1; round <= rounds; round++)); do
  for size in $sizes; do
    run "hier.$round.$size" hier "$size"
    # shellcheck disable=SC2046
    run "flat.$round.$size" "^hier" "$size" $(log "flat.$round.$size")
  done
done
# What the selector picks with nothing forced.
for size in $sizes; do
  # shellcheck disable=SC2046
  run "auto.$size" "" "$size" $(log "auto.$size")
done

python3 - "$tmp" "$rounds" "$sizes" "$here/perf" "$tool" "$hosts" "$per" "$rate" <<'PY'
import os, re, statistics, sys
tmp, rounds, sizes, perf, tool, hosts, per, rate = sys.argv[1:9]
rounds, sizes = int(rounds), sizes.split()
sys.dont_write_bytecode = True
sys.path.insert(0, perf)
from perf_output import times
print("# %s, %s hosts x %s ranks, link %s, %d rounds; median us per call (out of place)"
      % (tool, hosts, per, rate, rounds))
print("%10s %12s %12s %10s  %-12s %s" % ("size (B)", "hier", "flat", "flat/hier", "flat algo",
                                          "chosen"))
for s in sizes:
    med = {}
    for kind in ("hier", "flat"):
        runs = [times(os.path.join(tmp, "%s.%d.%s.0" % (kind, r, s))) for r in range(1, rounds + 1)]
        size = next(iter(runs[0]))
        med[kind] = statistics.median(run[size] for run in runs)
    def choice(prefix):
        # The first TUNING line of the top communicator (its phases' communicators log too).
        for name in sorted(os.listdir(tmp)):
            if name.startswith(prefix + ".log."):
                found = re.findall(r"class \(\d+ B\): (\w+)", open(os.path.join(tmp, name)).read())
                if found:
                    return found[0]
        return "?"
    flat_algo = choice("flat.1.%s" % s)
    auto = choice("auto.%s" % s)
    print("%10d %12.1f %12.1f %10.2f  %-12s %s" % (size, med["hier"], med["flat"],
                                                   med["flat"] / med["hier"], flat_algo, auto))
PY
