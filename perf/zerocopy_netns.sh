#!/bin/bash
# MSG_ZEROCOPY against ordinary sends between two simulated hosts (network namespaces joined by
# a bridge, perf/netns_hosts.sh), the link optionally shaped with tbf: tcp_zerocopy_probe sends
# BYTES in CHUNK-byte sends, with and without zero-copy, ROUNDS interleaved rounds; prints each
# run's line and the median throughput and sender CPU per GB of each. Needs root and iproute2;
# nothing is configured outside the namespaces.
# usage: perf/zerocopy_netns.sh [rate|none] [rounds] [bytes] [chunk]
#   e.g. perf/zerocopy_netns.sh none 5 4294967296 1048576
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
rate=${1:-none}
rounds=${2:-5}
bytes=${3:-4294967296}
chunk=${4:-1048576}
probe="$build/perf/tcp_zerocopy_probe"
tag="chorus-zc-$$"
# shellcheck source=perf/netns_hosts.sh
. "$here/perf/netns_hosts.sh"
netns_hosts_start "$tag" 2 "$rate"

port=29900
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then order="0 1"; else order="1 0"; fi
  for zc in $order; do
    port=$((port + 1))
    ip netns exec "$tag-1" "$probe" --listen "$port" > /dev/null &
    ip netns exec "$tag-0" "$probe" --send "10.216.0.2:$port" --bytes "$bytes" --chunk "$chunk" \
      --zerocopy "$zc" | tee -a "$tmp/runs"
    wait
  done
done
python3 - "$tmp/runs" <<'PY'
import re, statistics, sys
runs = {0: [], 1: []}
for line in open(sys.argv[1]):
    m = re.match(r"zerocopy (\d) .*: ([\d.]+) GB/s, sender CPU ([\d.]+) s per GB, notices (\d+), "
                 r"copied (\d+)", line)
    if m:
        runs[int(m.group(1))].append((float(m.group(2)), float(m.group(3)), int(m.group(4)),
                                      int(m.group(5))))
for zc, name in ((0, "ordinary sends"), (1, "MSG_ZEROCOPY")):
    r = runs[zc]
    if not r:
        continue
    print("%-15s median %.3f GB/s, sender CPU %.3f s per GB; notices %d, of which copied %d"
          % (name, statistics.median(x[0] for x in r), statistics.median(x[1] for x in r),
             sum(x[2] for x in r), sum(x[3] for x in r)))
PY
