#!/bin/bash
# What collective-mismatch detection costs: 2-rank all-reduce on host memory with
# CHORUS_CHECK_CALLS=1 (the default) and 0, and optionally with another build of Chorus (e.g.
# one without the detection), in interleaved rounds; prints each round's time per call and the
# median ratio of each variant to the default. The time comes from the run's average bus
# bandwidth, which is printed with six digits (the time columns have two decimals, too coarse
# at 8 B): with 2 ranks busbw = algbw, so time = size / busbw, averaged over the out-of-place
# and in-place calls.
# usage: perf/check_calls_overhead.sh [rounds] [sizes] [other build dir]
#   e.g. perf/check_calls_overhead.sh 7 "8 1024 1048576" /tmp/base/build
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
rounds=${1:-7}
sizes=${2:-"8 1024 65536 1048576"}
other=${3:-}
iters=${ITERS:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# time_us <build dir> <size> [env...]: microseconds per call of one run.
time_us() {
  local dir=$1 size=$2
  shift 2
  env "$@" "$dir/tools/chorusrun" -n 2 "$dir/perf/all_reduce_perf" -b "$size" -e "$size" \
    -n "$iters" -w 2000 -c 0 |
    awk -v size="$size" '/Avg bus bandwidth/ { printf "%.4f\n", size / ($NF * 1000) }'
}

variants="on off"
[ -n "$other" ] && variants="$variants other"
for size in $sizes; do
  for r in $(seq "$rounds"); do
    # Each round starts with the next variant, so that no variant always runs first.
    vs=($variants)
    order=""
    for ((j = 0; j < ${#vs[@]}; j++)); do order+="${vs[$(((r - 1 + j) % ${#vs[@]}))]} "; done
    for v in $order; do
      case $v in
        on) t=$(time_us "$build" "$size" CHORUS_CHECK_CALLS=1) ;;
        off) t=$(time_us "$build" "$size" CHORUS_CHECK_CALLS=0) ;;
        other) t=$(time_us "$other" "$size") ;;
      esac
      echo "$size $r $v $t" >> "$tmp/times"
    done
  done
done
python3 - "$tmp/times" "$variants" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
variants = sys.argv[2].split()
print("%10s %-6s %s" % ("size (B)", "", "time per call in each round (us)"))
for size in sorted({int(r[0]) for r in rows}):
    t = {v: [float(r[3]) for r in rows if int(r[0]) == size and r[2] == v] for v in variants}
    for v in variants:
        print("%10d %-6s %s" % (size, v, " ".join("%.4f" % x for x in t[v])))
    for v in variants[1:]:
        ratios = [a / b for a, b in zip(t["on"], t[v])]
        print("%10d on/%-4s median ratio %.3f (min %.3f, max %.3f)" % (
            size, v, statistics.median(ratios), min(ratios), max(ratios)))
PY
