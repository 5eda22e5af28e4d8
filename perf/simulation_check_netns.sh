#!/bin/bash
# The simulator against runs across simulated hosts: H network namespaces joined by a bridge,
# R ranks in each (shared memory inside a host, TCP between hosts), optionally every host's link
# shaped with tbf to RATE (e.g. 1gbit). For each size, all_reduce_perf with the selector's own
# chorus-tune --simulate predicts the cluster with TUNING (a chorus-tune --calibrate file) and
# --net-gbps from RATE (unshaped: the model's network figures), then
# all_reduce_perf runs ROUNDS times with the algorithm and channels it chose. Prints, per size, the
# choice, the predicted and the measured times (us, out of place) and predicted/measured. The
# ranks are bound to blocks of the CPUs as chorusrun binds them. A TUNING from
# perf/calibrate_netns.sh describes TCP on this path rather than over loopback. Needs
# root and iproute2; nothing is configured outside the namespaces. NET_PLUGIN=LIB carries the
# links between hosts through that NCCL net plugin (the example's: libnccl-net-example.so), its
# devices reporting RATE (10 Gbit/s unshaped) and the simulation told so (--net-device).
# TUNING "calibrate": a path calibration (perf/calibrate_netns.sh, unshaped) taken first, kept
# as simulation_check.tuning in the working directory: the speed of a VM drifts over half an
# hour by more than the model's error, so the check is best made just after its calibration.
# usage: perf/simulation_check_netns.sh TUNING [hosts] [ranks per host] [rate|none] [rounds] [sizes]
#   e.g. perf/simulation_check_netns.sh machine.tuning 4 2 1gbit 3 "1M 8M 32M"
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
if [ "$1" = calibrate ]; then
  BUILD="$build" "$here/perf/calibrate_netns.sh" simulation_check.tuning none | tail -n 1
  tuning=$(readlink -f simulation_check.tuning)
else
  tuning=$(readlink -f "$1")
fi
hosts=${2:-4}
per=${3:-2}
rate=${4:-none}
rounds=${5:-3}
sizes=${6:-"1M 8M 32M"}
tag="chorus-sim-$$"
# shellcheck source=perf/netns_hosts.sh
. "$here/perf/netns_hosts.sh"
netns_hosts_start "$tag" "$hosts" "$rate"

nranks=$((hosts * per))
# A veth reports no speed the model takes: unshaped, the link is left to the model's network
# figures; a shaped one is told to both the simulation (--net-gbps) and the ranks' own model
# (CHORUS_SOCKET_LINK_MBPS), whose choices within the hierarchical algorithm's phases follow it.
net=()
plugin=()
link=()
if [ "$rate" != none ]; then
  bits=$(echo "$rate" | sed -E 's/gbit$/e9/; s/mbit$/e6/')
  net=(--net-gbps "$(python3 -c "print($bits / 8e9)")")
  link=(CHORUS_SOCKET_LINK_MBPS="$(python3 -c "print(int($bits / 1e6))")")
fi
if [ -n "${NET_PLUGIN:-}" ]; then
  mbps=$(python3 -c "print(int(${bits:-1e10} / 1e6))")
  plugin=(NCCL_NET_PLUGIN="$(readlink -f "$NET_PLUGIN")" EXAMPLE_NET_SPEED_MBPS="$mbps")
  net=(--net-device --net-gbps "$(python3 -c "print($mbps / 8000)")")
fi
# The hosts are namespaces of this machine: they share its cores, as the ranks' model sees.
cores=$(python3 -c "print($(nproc) / $hosts)")
for size in $sizes; do
  "$build/tools/chorus-tune" --simulate --csv -R "$per" --max-ranks "$nranks" -C "$cores" \
    -t "$tuning" "${net[@]}" -b "$size" -e "$size" | grep "^AllReduce,$nranks," >> "$tmp/predicted"
done
port=29800
cpus=($(python3 -c "import os; print(*sorted(os.sched_getaffinity(0)))"))
blocks=()
for ((r = 0; r < nranks; r++)); do
  b=$((r * ${#cpus[@]} / nranks))
  e=$(((r + 1) * ${#cpus[@]} / nranks))
  [ "$e" -gt "$b" ] || e=$((b + 1))
  blocks+=("$(echo "${cpus[@]:b:e-b}" | tr ' ' ,)")
done
for ((round = 1; round <= rounds; round++)); do
  for size in $sizes; do
    port=$((port + 1))
    # The algorithm and channels the simulator chose for this size, so that the run measures
    # the prediction's choice (the ranks' own model may see another link speed).
    bytes=$("$build/tools/chorus-tune" --simulate --csv -R 1 --max-ranks 2 -b "$size" -e "$size" \
      | tail -1 | cut -d, -f4)
    choice=$(grep "^AllReduce,$nranks,$hosts,$bytes," "$tmp/predicted" | cut -d, -f5,6)
    algo=${choice%,*}
    channels=${choice#*,}
    for ((r = 0; r < nranks; r++)); do
      h=$((r / per))
      # Bound as chorusrun binds a machine's ranks: rank r to block r of the CPUs (unbound,
      # the kernel's placement of 4-8 ranks on 2 vCPUs moved the time by up to 2x).
      ip netns exec "$tag-$h" taskset -c "${blocks[r]}" env CHORUS_RANK=$r CHORUS_NRANKS=$nranks \
        NCCL_COMM_ID=10.216.0.1:$port CHORUS_COMM_SECRET=0123456789abcdef \
        CHORUS_TUNING_FILE="$tuning" CHORUS_SOCKET_IFNAME=eth0 CHORUS_ALGO="$algo" \
        CHORUS_MIN_CHANNELS="$channels" CHORUS_MAX_CHANNELS="$channels" "${link[@]}" "${plugin[@]}" \
        "$build/perf/all_reduce_perf" -b "$size" -e "$size" -n 10 -w 3 -c 0 \
        > "$tmp/run.$round.$size.$r" 2>&1 &
    done
    wait
  done
done

python3 - "$tmp" "$rounds" "$sizes" "$here/perf" <<'PY'
import os, statistics, sys
tmp, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[4])
from perf_output import times
pred = {}
for line in open(os.path.join(tmp, "predicted")):
    f = line.strip().split(",")
    pred[int(f[3])] = (f[4] + ("/" + f[5] if f[4] == "ring" else ""), float(f[6]))
print("%10s  %-10s %12s  %-30s %8s" % ("size (B)", "choice", "predicted", "measured, us per call",
                                        "pred/meas"))
for s in sizes:
    runs = [times(os.path.join(tmp, "run.%d.%s.0" % (r, s))) for r in range(1, rounds + 1)]
    size = next(iter(runs[0]))
    meas = [run[size] for run in runs]
    m = statistics.median(meas)
    algo, p = pred[size]
    print("%10d  %-10s %12.1f  %-30s %8.2f" % (size, algo, p, " ".join("%.1f" % x for x in meas),
                                              p / m))
PY
