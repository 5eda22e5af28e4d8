#!/bin/bash
# Command-line behaviour of the tools and the TUNING log: chorus-tune prints decision tables,
# refuses bad overrides and writes and reads tuning files, a communicator logs each (collective, size class) decision once, a bad
# CHORUS_ALGO fails init with a message naming it, and chorus-topo --comm describes the ring and
# trees of a communicator; chorusrun binds ranks to blocks of its CPUs; the perf tools run
# several ranks per process (-t, -g); chorus-info describes a net plugin's devices as the
# transport sees them.
# usage: check_tools.sh <chorusrun> <chorus-tune> <chorus-topo> <all_reduce_perf> <fixtures dir>
#                       <chorus-info> <example net plugin>
set -u
run=$1 tune=$2 topo=$3 perf=$4 fixtures=$5 info=$6 plugin=$7
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # description, command status (0 = pass)
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

# chorus-tune: one row per size with a choice; predictions for every algorithm column.
"$tune" -n 4 -b 8 -e 1M -f 4 > "$tmp/tune.txt" 2>&1
rows=$(grep -cE '^ +[0-9]+ +(ring|tree|oneshot|twoshot) ' "$tmp/tune.txt")
check "chorus-tune prints 9 rows for 8 B..1 MiB step 4 (got $rows)" $([ "$rows" -eq 9 ]; echo $?)
"$tune" -n 8 -N 4 -c all -b 1K -e 1K > "$tmp/tune_all.txt" 2>&1
heads=$(grep -c '^# [A-Za-z]*: 8 ranks on 4 host' "$tmp/tune_all.txt")
check "chorus-tune --coll all prints five tables (got $heads)" $([ "$heads" -eq 5 ]; echo $?)
CHORUS_ALGO=tree,bogus "$tune" > "$tmp/bad.txt" 2>&1
status=$?
check "chorus-tune refuses CHORUS_ALGO=tree,bogus (exit $status)" \
  $([ $status -eq 2 ] && grep -q 'CHORUS_ALGO=tree,bogus.*"bogus"' "$tmp/bad.txt"; echo $?)
CHORUS_MIN_CHANNELS=4 CHORUS_MAX_CHANNELS=2 "$tune" > "$tmp/bad2.txt" 2>&1
status=$?
check "chorus-tune refuses MIN_CHANNELS > MAX_CHANNELS (exit $status)" \
  $([ $status -eq 2 ] && grep -q 'CHORUS_MIN_CHANNELS=4 exceeds CHORUS_MAX_CHANNELS=2' "$tmp/bad2.txt"; echo $?)
CHORUS_ALGO=tree "$tune" -n 4 -b 8 -e 8 > "$tmp/tree.txt" 2>&1
check "CHORUS_ALGO=tree wins over the model in chorus-tune" \
  $(grep -qE '^ +8 +tree ' "$tmp/tree.txt"; echo $?)

# --simulate: a row per cluster of 1, 2, 4, ... hosts, a cell per size; --csv for plots.
"$tune" --simulate -R 8 --max-ranks 1024 > "$tmp/sim.txt" 2>&1
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ \| [a-z]' "$tmp/sim.txt")
check "chorus-tune --simulate prints 8 clusters of 8..1024 ranks (got $rows)" \
  $([ "$rows" -eq 8 ] && grep -qE '^ +1024 +128 \| ' "$tmp/sim.txt"; echo $?)
"$tune" --simulate --csv -c all -R 4 --max-ranks 64 -b 1K -e 1M -f 32 > "$tmp/sim.csv" 2>&1
lines=$(grep -cE '^[A-Za-z]+,[0-9]+,[0-9]+,[0-9]+,[a-z]+,[0-9]+,' "$tmp/sim.csv")
check "chorus-tune --simulate --csv: 5 collectives x 5 clusters x 3 sizes (got $lines)" \
  $([ "$lines" -eq 75 ] && head -1 "$tmp/sim.csv" | grep -q '^collective,ranks,hosts,bytes'; echo $?)
# --net-device: two hosts with 16 cores each on a 200 Gbit/s device take more channels, and
# reach more of the link, than through TCP sockets, whose streams cost cores and cap lower.
sock=$("$tune" --simulate --csv -R 1 --max-ranks 2 -C 16 --net-gbps 25 -b 64M -e 64M | tail -1)
dev=$("$tune" --simulate --csv -R 1 --max-ranks 2 -C 16 --net-gbps 25 --net-device -b 64M -e 64M |
  tail -1)
check "chorus-tune --simulate --net-device: more channels and busbw than sockets ($sock / $dev)" \
  $(awk -F, -v s="$sock" -v d="$dev" 'BEGIN { split(s, a, ","); split(d, b, ",");
      exit !(b[6] > a[6] && b[8] > a[8]) }'; echo $?)
"$tune" --simulate -R 0 > "$tmp/simbad.txt" 2>&1
status=$?
check "chorus-tune --simulate refuses --ranks-per-host 0 (exit $status)" $([ $status -eq 2 ]; echo $?)

# Tuning files: --calibrate measures and writes one that chorus-tune and communicators read; a
# bad one is refused naming the variable, the file and the line.
"$tune" --calibrate > "$tmp/cal_noout.txt" 2>&1
status=$?
check "chorus-tune --calibrate without --output is refused (exit $status)" \
  $([ $status -eq 2 ] && grep -q -- '--calibrate needs --output FILE' "$tmp/cal_noout.txt"; echo $?)
timeout 120 "$tune" --calibrate --quick -o "$tmp/machine.tuning" > "$tmp/cal.txt" 2>&1
status=$?
figures=$(grep -cE '^[a-z_]+ +[0-9.e+-]+ +#' "$tmp/machine.tuning" 2>/dev/null)
check "chorus-tune --calibrate --quick writes every figure (exit $status, $figures figures)" \
  $([ $status -eq 0 ] && [ "$figures" -eq 17 ] && grep -q '^# median |predicted/measured - 1|' \
    "$tmp/cal.txt" && grep -qE '^# cache_mib [0-9.]+, dram_gbps [0-9.]+; caches of this machine [0-9.]+ MiB' \
    "$tmp/cal.txt"; echo $?)
check "chorus-tune --calibrate measures on processes, 2 and 4 ranks" \
  $(grep -q '^# all-reduce, 2 and 4 ranks (processes)' "$tmp/cal.txt"; echo $?)
# --net-launch: the TCP measurements' ranks 1 and up start through the command, %r their rank;
# a command that cannot start them is refused before anything is measured.
printf '#!/bin/sh\necho "$1" >> "%s/launched"\nshift\nexec "$@"\n' "$tmp" > "$tmp/launch.sh"
chmod +x "$tmp/launch.sh"
timeout 120 "$tune" --calibrate --quick -o "$tmp/launched.tuning" --net-launch "$tmp/launch.sh %r" \
  > "$tmp/cal_launch.txt" 2>&1
status=$?
check "chorus-tune --calibrate --net-launch starts ranks 1-3 through it (exit $status)" \
  $([ $status -eq 0 ] && [ "$(sort -u "$tmp/launched" | tr '\n' ' ')" = "1 2 3 " ] &&
    grep -q "TCP through --net-launch $tmp/launch.sh %r)" "$tmp/launched.tuning" &&
    grep -q "; TCP through $tmp/launch.sh %r" "$tmp/cal_launch.txt"; echo $?)
"$tune" --calibrate --quick -o "$tmp/x.tuning" --net-launch "$tmp/nosuchlauncher %r" \
  > "$tmp/cal_nolaunch.txt" 2>&1
status=$?
check "chorus-tune --calibrate refuses a --net-launch that cannot start a rank (exit $status)" \
  $([ $status -eq 2 ] && [ ! -e "$tmp/x.tuning" ] &&
    grep -q "does not run rank 1's command (No such file or directory)" "$tmp/cal_nolaunch.txt"; echo $?)
"$tune" --calibrate-rank > "$tmp/rank.txt" 2>&1
status=$?
check "chorus-tune --calibrate-rank on its own is refused (exit $status)" \
  $([ $status -eq 2 ] && grep -q 'started by --calibrate only' "$tmp/rank.txt"; echo $?)
"$tune" -t "$tmp/machine.tuning" -b 8 -e 8 > "$tmp/tuned.txt" 2>&1
check "chorus-tune --tuning names the file its predictions come from" \
  $(grep -q "^# cost model: $tmp/machine.tuning" "$tmp/tuned.txt"; echo $?)
printf 'shm_step_us 1\nshm_gbps fast\n' > "$tmp/bad.tuning"
CHORUS_TUNING_FILE="$tmp/bad.tuning" "$tune" > "$tmp/badtune.txt" 2>&1
status=$?
check "chorus-tune refuses a bad CHORUS_TUNING_FILE (exit $status) naming file and line" \
  $([ $status -eq 2 ] && grep -q "CHORUS_TUNING_FILE=$tmp/bad.tuning: tuning file $tmp/bad.tuning line 2: shm_gbps = \"fast\" is not a positive number" "$tmp/badtune.txt"; echo $?)
CHORUS_TUNING_FILE="$tmp/bad.tuning" timeout 120 "$run" -n 2 "$perf" -b 8 -e 8 > "$tmp/badtuneinit.txt" 2>&1
status=$?
check "a bad CHORUS_TUNING_FILE fails init (exit $status) naming the file" \
  $([ $status -ne 0 ] && grep -q "init: CHORUS_TUNING_FILE=$tmp/bad.tuning: tuning file" \
    "$tmp/badtuneinit.txt"; echo $?)
CHORUS_TUNING_FILE="$tmp/machine.tuning" timeout 120 "$run" -n 2 "$perf" -b 8 -e 1M -f 16 -c 1 \
  > "$tmp/tunedrun.txt" 2>&1
status=$?
check "a run with the calibrated tuning file passes its checks (exit $status)" \
  $([ $status -eq 0 ] && grep -q '# Out of bounds values : 0 OK' "$tmp/tunedrun.txt"; echo $?)

# A stated link speed that is no speed fails init naming the variable.
CHORUS_SOCKET_LINK_MBPS=-5 timeout 120 "$run" -n 2 "$perf" -b 8 -e 8 > "$tmp/badlink.txt" 2>&1
status=$?
check "a negative CHORUS_SOCKET_LINK_MBPS fails init (exit $status) naming it" \
  $([ $status -ne 0 ] && grep -q "init: CHORUS_SOCKET_LINK_MBPS=-5 is not a link speed in Mb/s" \
    "$tmp/badlink.txt"; echo $?)

# TUNING log: sizes 8..15 step 1 share one size class, 16 and 32 are new ones; every size runs
# warm-up and timed iterations, yet each class is logged once.
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNING timeout 120 "$run" -n 2 --tag-output "$perf" -b 8 \
  -e 15 -i 1 -c 1 > "$tmp/log1.txt" 2>&1
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNING timeout 120 "$run" -n 2 "$perf" -b 16 -e 32 -f 2 \
  -c 1 > "$tmp/log2.txt" 2>&1
n8=$(grep -c 'AllReduce 8 B class' "$tmp/log1.txt")
n16=$(grep -c 'AllReduce 16 B class' "$tmp/log2.txt")
n32=$(grep -c 'AllReduce 32 B class' "$tmp/log2.txt")
check "one TUNING line per size class (8 B: $n8, 16 B: $n16, 32 B: $n32)" \
  $([ "$n8" -eq 1 ] && [ "$n16" -eq 1 ] && [ "$n32" -eq 1 ]; echo $?)
check "TUNING lines give the choice and every alternative's prediction" \
  $(grep -qE 'AllReduce 8 B class \([0-9]+ B\): [a-z]+.*predicted [0-9.]+ us; alternatives: ring/1 [0-9.]+ us, tree [0-9.]+ us, oneshot [0-9.]+ us, twoshot [0-9.]+ us' "$tmp/log1.txt"; echo $?)
check "TUNING lines come from rank 0 only" \
  $(! grep -q '^\[1\].*AllReduce .* class' "$tmp/log1.txt"; echo $?)

# chorusrun relays the ranks' lines as written (nccl-tests output parses as is); --tag-output
# prefixes each with its rank.
timeout 60 "$run" -n 2 sh -c 'echo "line of $CHORUS_RANK"' > "$tmp/plain.txt" 2>&1
timeout 60 "$run" -n 2 --tag-output sh -c 'echo "line of $CHORUS_RANK"' > "$tmp/tagged.txt" 2>&1
check "chorusrun relays lines unprefixed; --tag-output prefixes the rank" \
  $([ "$(sort "$tmp/plain.txt" | tr '\n' ,)" = "line of 0,line of 1," ] \
    && [ "$(sort "$tmp/tagged.txt" | tr '\n' ,)" = "[0] line of 0,[1] line of 1," ]; echo $?)

# A failing rank: the others get SIGTERM at once, or, with --linger, time to end on their own
# (rank 1 here ends 1 s after rank 0 fails, with status 5); the first failure's status is
# chorusrun's.
failing='if [ $CHORUS_RANK = 0 ]; then exit 3; fi; sleep $WAIT; echo "rank 1 done"; exit 5'
WAIT=1 timeout 60 "$run" -n 2 sh -c "$failing" > "$tmp/nolinger.txt" 2>&1
status=$?
check "a failing rank ends the others at once (exit $status)" \
  $([ $status -eq 3 ] && ! grep -q "rank 1 done" "$tmp/nolinger.txt"; echo $?)
WAIT=1 timeout 60 "$run" -n 2 --linger 20 sh -c "$failing" > "$tmp/linger.txt" 2>&1
status=$?
check "--linger leaves the others time to end on their own (exit $status)" \
  $([ $status -eq 3 ] && grep -q "rank 1 done" "$tmp/linger.txt" \
    && ! grep -q "still running" "$tmp/linger.txt"; echo $?)
start=$(date +%s)
WAIT=30 timeout 60 "$run" -n 2 --linger 0.5 sh -c "$failing" > "$tmp/linger2.txt" 2>&1
status=$? took=$(($(date +%s) - start))
check "--linger then ends the ranks still running with SIGTERM (exit $status, ${took} s)" \
  $([ $status -eq 3 ] && [ $took -lt 20 ] && ! grep -q "rank 1 done" "$tmp/linger2.txt" \
    && grep -q "terminating the 1 rank(s) still running" "$tmp/linger2.txt"; echo $?)

# A bad override fails init, naming the variable.
NCCL_ALGO=ringg timeout 120 "$run" -n 2 "$perf" -b 8 -e 8 > "$tmp/badinit.txt" 2>&1
status=$?
check "NCCL_ALGO=ringg fails the run (exit $status) naming NCCL_ALGO" \
  $([ $status -ne 0 ] && grep -q 'NCCL_ALGO=ringg' "$tmp/badinit.txt"; echo $?)
CHORUS_SLOT_STREAM=2 timeout 120 "$run" -n 2 "$perf" -b 8 -e 8 > "$tmp/badstream.txt" 2>&1
status=$?
check "CHORUS_SLOT_STREAM=2 fails the run (exit $status) naming the variable" \
  $([ $status -ne 0 ] && grep -q 'CHORUS_SLOT_STREAM=2 is not -1' "$tmp/badstream.txt"; echo $?)

# chorus-topo --comm: the matrices, the ring and both trees of a 3-rank communicator.
timeout 120 "$run" -n 3 --tag-output "$topo" --comm > "$tmp/topo.txt" 2>&1
check "chorus-topo --comm prints the ring and both trees" \
  $(grep -q 'ring (every channel): 0 1 2 ' "$tmp/topo.txt" && grep -q 'tree 0 ' "$tmp/topo.txt" \
    && grep -q 'tree 1 ' "$tmp/topo.txt" && grep -qE '^\[0\] r1 +SHM +X +SHM' "$tmp/topo.txt"; echo $?)
timeout 120 "$run" -n 2 "$topo" --comm --dot > "$tmp/topo.dot" 2>&1
check "chorus-topo --comm --dot prints a digraph" \
  $(grep -q 'digraph chorus' "$tmp/topo.dot" && grep -q 'r0 -> r1' "$tmp/topo.dot"; echo $?)

# chorus-topo on this host and on fixture topologies: matrices, rings, trees, nearest NICs.
"$topo" > "$tmp/local.txt" 2>&1
check "chorus-topo describes this host" \
  $(grep -q '^# host ' "$tmp/local.txt" && grep -q '^numa 0: cpus ' "$tmp/local.txt" \
    && grep -qE '^net lo: up.*loopback' "$tmp/local.txt" && grep -q '^# ring for one rank per' \
    "$tmp/local.txt"; echo $?)
"$topo" --file "$fixtures/dual_socket_4gpu_2nic.json" > "$tmp/dual.txt" 2>&1
check "dual-socket fixture: NVLink pairs, PIX to the local HCA, SYS across sockets" \
  $(grep -qE '^GPU0 +X +NV12 +SYS +SYS +PIX +SYS +0 ' "$tmp/dual.txt" \
    && grep -qE '^NIC1 +SYS +SYS +PIX +PIX +SYS +X +1 ' "$tmp/dual.txt" \
    && grep -q '^# ring for one rank per GPU: GPU0 -NV12- GPU1 -SYS- GPU2 -NV12- GPU3 -SYS-' \
    "$tmp/dual.txt" && grep -q '^# GPU2 uses interface ib1' "$tmp/dual.txt" \
    && [ "$(grep -c '^# tree [01] ' "$tmp/dual.txt")" -eq 2 ]; echo $?)
"$topo" --file "$fixtures/nvlink_8gpu.json" > "$tmp/nvl.txt" 2>&1
check "8-GPU NVSwitch fixture: every GPU pair over NVSwitch, one NIC per GPU pair" \
  $([ "$(grep -cE '^GPU[0-7]( +(X|NVS)){8} ' "$tmp/nvl.txt")" -eq 8 ] \
    && grep -q '^# GPU7 uses interface ibp193s0' "$tmp/nvl.txt"; echo $?)
check "device transports: P2P/NVLink between every two GPUs of the NVSwitch fixture" \
  $(grep -q '^# Device transports (one rank per GPU, this host): P2P level PXB' "$tmp/nvl.txt" \
    && [ "$(grep -cE '^GPU[0-7]( +(X|P2P/NVLink)){8}$' "$tmp/nvl.txt")" -eq 8 ]; echo $?)
check "device transports: NVLink pairs, shared memory across sockets (dual-socket fixture)" \
  $(grep -qE '^GPU0 +X +P2P/NVLink +SHM +SHM$' "$tmp/dual.txt"; echo $?)
CHORUS_P2P_LEVEL=SYS "$topo" --file "$fixtures/dual_socket_4gpu_2nic.json" > "$tmp/dualsys.txt" 2>&1
check "device transports: CHORUS_P2P_LEVEL=SYS stages across sockets without peer access" \
  $(grep -qE '^GPU0 +X +P2P/NVLink +P2P/staged +P2P/staged$' "$tmp/dualsys.txt"; echo $?)
CHORUS_P2P_LEVEL=far "$topo" --file "$fixtures/nvlink_8gpu.json" > "$tmp/badlevel.txt" 2>&1
status=$?
check "chorus-topo refuses CHORUS_P2P_LEVEL=far (exit $status) naming the variable" \
  $([ $status -eq 1 ] && grep -q 'CHORUS_P2P_LEVEL=far' "$tmp/badlevel.txt"; echo $?)
"$topo" --file "$fixtures/cpu_2numa.json" > "$tmp/cpu.txt" 2>&1
check "CPU-only 2-NUMA fixture: a rank per NUMA node, each on its local NIC" \
  $(grep -q '^# ring for one rank per NUMA node: numa0 numa1' "$tmp/cpu.txt" \
    && grep -q '^# numa1 uses interface ens5f0' "$tmp/cpu.txt"; echo $?)
"$topo" --json > "$tmp/dump.json" 2>&1 && "$topo" --file "$tmp/dump.json" > "$tmp/reload.txt" 2>&1
status=$?
check "chorus-topo --json output loads back" \
  $([ $status -eq 0 ] && diff -q "$tmp/local.txt" "$tmp/reload.txt" > /dev/null; echo $?)
CHORUS_TOPO_FILE="$tmp/missing.json" timeout 60 "$run" -n 2 "$perf" -b 8 -e 8 > "$tmp/topobad.txt" 2>&1
status=$?
check "a missing CHORUS_TOPO_FILE fails init naming the variable and the file" \
  $([ $status -ne 0 ] && grep -q "CHORUS_TOPO_FILE: cannot read topology file $tmp/missing.json" \
    "$tmp/topobad.txt"; echo $?)
echo '{"chorus_topology": 1, "hostname": 3}' > "$tmp/bad.json"
"$topo" --file "$tmp/bad.json" > "$tmp/badjson.txt" 2>&1
check "a malformed topology file names the file, position and key" \
  $(grep -qE "$tmp/bad.json:1:[0-9]+: hostname: " "$tmp/badjson.txt"; echo $?)

# chorusrun --bind: rank r of N gets the r-th of N blocks of chorusrun's own CPUs (at least one
# CPU); --bind none leaves every rank all of them; a communicator of bound ranks counts the CPUs
# they have together, not one rank's share of its own block.
cpus=()
for part in $(grep Cpus_allowed_list /proc/self/status | cut -f2 | tr ',' ' '); do
  if [[ $part == *-* ]]; then
    for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
  else
    cpus+=("$part")
  fi
done
ncpu=${#cpus[@]}
block() {  # rank, nranks -> "count first"
  local b=$(($1 * ncpu / $2)) e=$((($1 + 1) * ncpu / $2))
  [ $e -le $b ] && e=$((b + 1))
  echo "$((e - b)) ${cpus[$b]}"
}
placement='echo "$CHORUS_RANK $(nproc) $(grep Cpus_allowed_list /proc/self/status | cut -f2 | cut -d, -f1 | cut -d- -f1)"'
timeout 60 "$run" -n 4 --no-prefix sh -c "$placement" | sort -n > "$tmp/bind.txt" 2>&1
ok=0
for r in 0 1 2 3; do
  [ "$(sed -n "$((r + 1))p" "$tmp/bind.txt")" = "$r $(block $r 4)" ] || ok=1
done
check "chorusrun binds rank r of 4 to the r-th block of its $ncpu CPUs" $ok
timeout 60 "$run" -n 3 --bind none --no-prefix sh -c "$placement" > "$tmp/nobind.txt" 2>&1
check "chorusrun --bind none leaves each rank all $ncpu CPUs" \
  $([ "$(awk -v n=$ncpu '$2 == n' "$tmp/nobind.txt" | wc -l)" -eq 3 ]; echo $?)
fewest=$(for r in 0 1; do block $r 2; done | awk 'NR == 1 || $1 < m {m = $1} END {print m}')
want=$(awk -v f="$fewest" -v n="$ncpu" 'BEGIN {c = n / 2; if (f < c) c = f; printf "%.2f", c}')
CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=TUNING timeout 120 "$run" -n 2 "$perf" -b 8 -e 8 -n 2 \
  -w 1 > "$tmp/boundcores.txt" 2>&1
check "two bound ranks count $want cores per rank" \
  $(grep -q "at most 2 per host, $want cores per rank" "$tmp/boundcores.txt"; echo $?)

# The perf tools' -t and -g: nthreads x ngpus ranks per process, a thread each; alone (its own
# unique id) and under chorusrun (ranks numbered process after process); results validated.
timeout 120 "$perf" -t 2 -g 2 -b 8 -e 64K -f 8 -n 2 -w 1 > "$tmp/threads.txt" 2>&1
status=$?
pids=$(grep '^#  Rank' "$tmp/threads.txt" | awk '{print $7}' | sort -u | wc -l)
check "all_reduce_perf -t 2 -g 2 runs 4 ranks in one process, results valid (exit $status)" \
  $([ $status -eq 0 ] && grep -q 'nThread 2 nGpus 2' "$tmp/threads.txt" &&
    [ "$(grep -c '^#  Rank' "$tmp/threads.txt")" -eq 4 ] && [ "$pids" -eq 1 ] &&
    grep -q 'Rank  3 Group  1' "$tmp/threads.txt" &&
    grep -q 'Out of bounds values : 0 OK' "$tmp/threads.txt"; echo $?)
timeout 120 "$run" -n 2 "$perf" -t 2 -b 8 -e 64K -f 8 -n 2 -w 1 > "$tmp/threads2.txt" 2>&1
status=$?
pids=$(grep '^#  Rank' "$tmp/threads2.txt" | awk '{print $7}' | sort -u | wc -l)
check "chorusrun -n 2 all_reduce_perf -t 2 runs 4 ranks in 2 processes (exit $status)" \
  $([ $status -eq 0 ] && [ "$(grep -c '^#  Rank' "$tmp/threads2.txt")" -eq 4 ] &&
    [ "$pids" -eq 2 ] && grep -q 'Out of bounds values : 0 OK' "$tmp/threads2.txt"; echo $?)
timeout 60 "$perf" -t 0 > "$tmp/threads0.txt" 2>&1
status=$?
check "all_reduce_perf -t 0 is refused (exit $status)" \
  $([ $status -ne 0 ] && grep -q 'nthreads (-t)' "$tmp/threads0.txt"; echo $?)

# chorus-info: the example plugin's two ports of one NIC fused, the other NIC apart, each with
# its PCI function, NUMA node, rail and plane.
mkdir -p "$tmp/pci/0000:1a:00.0" "$tmp/pci/0000:3b:00.0"
echo 0 > "$tmp/pci/0000:1a:00.0/numa_node"
echo 1 > "$tmp/pci/0000:3b:00.0/numa_node"
NCCL_NET_PLUGIN=$plugin EXAMPLE_NET_IFNAME=lo EXAMPLE_NET_RAILS=0,1,0 \
  EXAMPLE_NET_PCI_PATHS="$tmp/pci/0000:1a:00.0,$tmp/pci/0000:3b:00.0,$tmp/pci/0000:1a:00.0" \
  "$info" > "$tmp/info.txt" 2>&1
status=$?
check "chorus-info lists the plugin's devices, ports of one NIC fused (exit $status)" \
  $([ $status -eq 0 ] && grep -q '^network between hosts: ExampleSocket (ncclNet v12' "$tmp/info.txt" &&
    grep -qx '  device 0: example0+example2, 20000 Mbit/s, PCI 0000:1a:00.0 (NUMA node 0), rail 0 plane 0, receives of up to 8 buffers' "$tmp/info.txt" &&
    grep -qx '  device 1: example1, 10000 Mbit/s, PCI 0000:3b:00.0 (NUMA node 1), rail 1 plane 0, receives of up to 8 buffers' "$tmp/info.txt" &&
    [ "$(grep -c '^  device' "$tmp/info.txt")" -eq 2 ]; echo $?)

if [ $failures -ne 0 ]; then
  echo "---- outputs"
  for f in "$tmp"/*; do echo "== $f"; tail -20 "$f"; done
  exit 1
fi
exit 0
