#!/bin/bash
# Settings compared across simulated hosts: H network namespaces of R rank processes each (shared
# memory inside a host, TCP between hosts), every host's link optionally tbf-shaped to RATE. For
# each size the perf tool runs once per VARIANT (environment settings, e.g. "CHORUS_ALGO=hier"
# or "CHORUS_COMPRESS=bf16 CHORUS_SPIN_COUNT=20"; BUILD=DIR takes the tool from another build
# directory), the variants alternating, ROUNDS times.
# Prints per size and variant the median time (us per call, out of place), its bus bandwidth,
# the time of the first variant over its own (above 1: faster than the first) and the algorithm
# rank 0's selector logged for it. Needs root and iproute2; nothing is configured outside the
# namespaces.
# usage: perf/variants_netns.sh hosts ranks-per-host rate|none rounds "sizes" tool VARIANT...
#   e.g. perf/variants_netns.sh 2 2 1gbit 5 "8 64K 1M 8M" all_reduce_perf \
#          CHORUS_ALGO=hier CHORUS_ALGO=^hier
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
if [ $# -lt 7 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
hosts=$1
per=$2
rate=$3
rounds=$4
sizes=$5
tool=$6
shift 6
variants=("$@")
tag="chorus-var-$$"
# shellcheck source=perf/netns_hosts.sh
. "$here/perf/netns_hosts.sh"
netns_hosts_start "$tag" "$hosts" "$rate"

nranks=$((hosts * per))
port=29900
# run NAME SIZE SETTINGS: one run of the tool on every rank with the settings (word-split; a
# setting BUILD=DIR runs DIR's perf tool, to compare two builds); rank 0's output and every
# rank's log (TUNING lines) kept.
run() {
  local name=$1 size=$2 settings=$3 r h s exe="$build/perf/$tool"
  for s in $settings; do
    case $s in BUILD=*) exe="${s#BUILD=}/perf/$tool" ;; esac
  done
  port=$((port + 1))
  for ((r = 0; r < nranks; r++)); do
    h=$((r / per))
    # shellcheck disable=SC2086
    ip netns exec "$tag-$h" env CHORUS_RANK=$r CHORUS_NRANKS=$nranks \
      NCCL_COMM_ID=10.216.0.1:$port CHORUS_COMM_SECRET=0123456789abcdef \
      CHORUS_SOCKET_IFNAME=eth0 CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNING \
      CHORUS_DEBUG_FILE="$tmp/$name.log.%p" $settings \
      "$exe" -b "$size" -e "$size" -n 10 -w 3 -c 0 \
      > "$tmp/$name.$r" 2>&1 &
  done
  wait
}
for ((round = 1; round <= rounds; round++)); do
  for size in $sizes; do
    for v in "${!variants[@]}"; do run "v$v.$round.$size" "$size" "${variants[$v]}"; done
  done
done

python3 - "$tmp" "$rounds" "$sizes" "$here/perf" "$tool" "$hosts" "$per" "$rate" \
  "${variants[@]}" <<'PY'
import os, re, statistics, sys
tmp, rounds, sizes, perf, tool, hosts, per, rate = sys.argv[1:9]
variants = sys.argv[9:]
rounds, sizes, n = int(rounds), sizes.split(), int(hosts) * int(per)
sys.dont_write_bytecode = True
sys.path.insert(0, perf)
from perf_output import times
factor = {"all_reduce_perf": 2.0 * (n - 1) / n, "all_gather_perf": (n - 1) / n,
          "reduce_scatter_perf": (n - 1) / n}.get(tool, 1.0)
print("# %s, %s hosts x %s ranks, link %s, %d rounds; median us per call (out of place), "
      "busbw GB/s, first/this, rank 0's choice" % (tool, hosts, per, rate, rounds))
for i, v in enumerate(variants):
    print("#   v%d: %s" % (i, v))

def choice(prefix):
    # The first TUNING line of the communicator the tool made (phases' communicators log later).
    for name in sorted(os.listdir(tmp)):
        if name.startswith(prefix + ".log."):
            text = open(os.path.join(tmp, name)).read()
            found = re.findall(r"class \(\d+ B\): (\w+)", text)
            if "compressed to" in text:
                return "compressed"
            if found:
                return found[0]
    return "?"

print("%10s" % "size (B)" + "".join("  %28s" % ("v%d" % i) for i in range(len(variants))))
for s in sizes:
    cells, first = [], None
    for i in range(len(variants)):
        runs = [times(os.path.join(tmp, "v%d.%d.%s.0" % (i, r, s))) for r in range(1, rounds + 1)]
        size = next(iter(runs[0]))
        med = statistics.median(run[size] for run in runs)
        first = med if first is None else first
        busbw = size / (med * 1e3) * factor if med > 0 else 0
        cells.append("%10.1f %6.3f %5.2f %-5s" % (med, busbw, first / med if med > 0 else 0,
                                                   choice("v%d.1.%s" % (i, s))[:5]))
    print("%10d" % size + "".join("  %28s" % c for c in cells))
PY
