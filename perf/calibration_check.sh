#!/bin/bash
# Does the calibrated cost model pick at least as well as the built-in one on this machine?
# Calibrates (chorus-tune --calibrate) unless a tuning file is given, then runs all_reduce_perf
# on N ranks of this host with the selector's own choice, under the built-in figures and under
# the tuning file (CHORUS_TUNING_FILE), in interleaved rounds (the order alternates); prints per
# size what each model picks (chorus-tune), each run's time per call (us, out of place) and the
# median ratio calibrated/built-in (below 1: the calibrated model picked faster).
# Each size runs on its own (all_reduce_perf -b S -e S), so what one size leaves behind (a ring's
# threads still spinning) does not slow the next.
# usage: perf/calibration_check.sh [rounds] [nranks] [sizes] [perf args] [tuning file]
#   e.g. perf/calibration_check.sh 5 2 "8 1K 32K 1M 32M" "-n 20 -w 5 -c 0"
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
rounds=${1:-5}
nranks=${2:-2}
sizes=${3:-"8 32 128 512 2K 8K 32K 128K 512K 2M 8M 32M"}
args=${4:-"-n 20 -w 5 -c 0"}
tuning=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$tuning" ]; then
  tuning="$tmp/tuning"
  "$build/tools/chorus-tune" --calibrate -o "$tuning" > "$tmp/calibrate.txt"
  grep '^# median' "$tmp/calibrate.txt"
fi
echo "# tuning file:"
sed 's/^/#   /' "$tuning"
# With CHORUS_SHM_DISABLE=1 in the environment the ranks talk over TCP: so does the table.
shape=(-n "$nranks" -b 8 -e 1G -f 2)
[ "${CHORUS_SHM_DISABLE:-0}" = 1 ] && shape+=(--no-shm)
"$build/tools/chorus-tune" "${shape[@]}" > "$tmp/picks.builtin"
"$build/tools/chorus-tune" "${shape[@]}" -t "$tuning" > "$tmp/picks.calibrated"

run() {  # <variant> <round>: every size, each in a run of its own, into $tmp/<variant>.<round>
  local extra=()
  [ "$1" = calibrated ] && extra=(CHORUS_TUNING_FILE="$tuning")
  : > "$tmp/$1.$2"
  for size in $sizes; do
    # shellcheck disable=SC2086
    env "${extra[@]}" "$build/tools/chorusrun" -n "$nranks" "$build/perf/all_reduce_perf" \
      -b "$size" -e "$size" $args >> "$tmp/$1.$2" 2>&1
  done
}
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then order="builtin calibrated"; else order="calibrated builtin"; fi
  for v in $order; do run "$v" "$i"; done
done
python3 - "$tmp" "$rounds" "$here/perf" <<'PY'
import os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[3])
from perf_output import times
def picks(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) > 3 and f[0].isdigit():
            out[int(f[0])] = f[1] + ("/%s" % f[2] if f[1] == "ring" else "")
    return out
data = {v: [times(os.path.join(tmp, "%s.%d" % (v, r))) for r in range(1, rounds + 1)]
        for v in ("builtin", "calibrated")}
pick = {v: picks(os.path.join(tmp, "picks." + v)) for v in ("builtin", "calibrated")}
print("%10s  %-10s %-10s  %-36s  %-36s  %s" % ("size (B)", "built-in", "calibrated",
      "built-in, us per call", "calibrated, us per call", "median calibrated/built-in"))
ratios_all = []
for size in sorted(data["builtin"][0]):
    b = [d.get(size, float("nan")) for d in data["builtin"]]
    c = [d.get(size, float("nan")) for d in data["calibrated"]]
    ratios = [y / x for x, y in zip(b, c) if x > 0]
    m = statistics.median(ratios)
    ratios_all.append(m)
    print("%10d  %-10s %-10s  %-36s  %-36s  %.2f" % (size, pick["builtin"].get(size, "?"),
          pick["calibrated"].get(size, "?"), " ".join("%.1f" % x for x in b),
          " ".join("%.1f" % x for x in c), m))
print("# sizes: %d; median of the per-size ratios %.3f; worst %.2f; best %.2f" % (
    len(ratios_all), statistics.median(ratios_all), max(ratios_all), min(ratios_all)))
PY
