#!/usr/bin/env bash
# Multi-host runs of the perf tools on one machine. Each simulated host is a network namespace
# (Chorus tells hosts apart by host name + boot id + network namespace), and the hosts meet
# through a bridge that lives in a namespace of its own. Nothing is configured in the calling
# namespace and no traffic leaves the namespaces made here.
#
# Checks, for each host count: every collective's results (#wrong columns), the transport of
# every ring link (shared memory inside a host, sockets across hosts), how often the ring
# crosses a host boundary for a contiguous and an interleaved rank placement, the socket
# interface filter (CHORUS_SOCKET_IFNAME), and the links between hosts through the example net
# plugin and through Chorus's socket network behind the same interface (CHORUS_SOCKET_NET=1).
#
# usage: multihost.sh BUILD_DIR [HOSTS...]      (HOSTS: host counts to run, default "4 2")
# Needs root and iproute2; exits 77 (skipped) where network namespaces cannot be made.
# KEEP_WORK_DIR=1 keeps every rank's output (stdout, stderr, exit status) for inspection.

set -euo pipefail

readonly SKIP_STATUS=77
readonly TAG="chorus-$$"
readonly HOST_IF=vchorus0    # the host end of each veth pair, inside the host's namespace
readonly HOST_IF_PREFIX=vchorus
readonly BRIDGE_IF=br0
readonly SUBNET="10.213.$(($$ % 250 + 1))"
# A second network ("rail") joining the hosts through its own bridge: data channels spread
# over both interfaces.
readonly RAIL_IF=vrail0
readonly RAIL_BRIDGE_IF=br1
readonly RAIL_SUBNET="10.214.$(($$ % 250 + 1))"
readonly PORT=29400
readonly RANKS_PER_HOST=2
readonly RANK_TIMEOUT=120
# Ranks that are expected to fail at init must do so well before this.
readonly FAST_FAIL_TIMEOUT=50
readonly PERF_ARGS=(-b 8 -e 1M -f 8 -c 1 -n 2 -w 1)
readonly COLLECTIVES=(all_reduce_perf all_gather_perf reduce_scatter_perf broadcast_perf
  reduce_perf alltoall_perf gather_perf scatter_perf sendrecv_perf)

usage() {
  echo "usage: $0 BUILD_DIR [HOSTS...]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
readonly PERF_DIR="$1/perf"
readonly TOPO_EXE="$1/tools/chorus-topo"
readonly PLUGIN_DIR="$1/transport"
shift
HOST_COUNTS=("$@")
[ ${#HOST_COUNTS[@]} -gt 0 ] || HOST_COUNTS=(4 2)
MAX_HOSTS=0
for h in "${HOST_COUNTS[@]}"; do
  if ! [[ "$h" =~ ^[0-9]+$ ]] || [ "$h" -lt 2 ] || [ "$h" -gt 64 ]; then
    echo "host counts must be integers in 2..64, got '$h'" >&2
    exit 2
  fi
  [ "$h" -gt "$MAX_HOSTS" ] && MAX_HOSTS=$h
done
readonly MAX_HOSTS

# Settings of the caller that would change what is checked here.
unset CHORUS_COMM_ID NCCL_COMM_ID CHORUS_SOCKET_IFNAME NCCL_SOCKET_IFNAME CHORUS_SOCKET_FAMILY \
  NCCL_SOCKET_FAMILY CHORUS_ALGO NCCL_ALGO CHORUS_HOSTID NCCL_HOSTID CHORUS_SHM_DISABLE \
  NCCL_SHM_DISABLE CHORUS_DEBUG_FILE NCCL_DEBUG_FILE CHORUS_DEBUG NCCL_DEBUG \
  CHORUS_DEBUG_SUBSYS NCCL_DEBUG_SUBSYS CHORUS_HOST_COMM NCCL_HOST_COMM CHORUS_NET_PLUGIN \
  NCCL_NET_PLUGIN CHORUS_NET NCCL_NET

NAMESPACES=()
WORK_DIR=""

cleanup() {
  local status=$?
  set +e
  local ns pids
  # Processes still inside our namespaces are ranks started here (e.g. after an interrupt).
  for ns in "${NAMESPACES[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  wait 2>/dev/null
  # Deleting a namespace destroys its end of every veth pair, and with it the other end.
  for ns in "${NAMESPACES[@]}"; do
    ip netns delete "$ns" 2>/dev/null
  done
  if [ -n "$WORK_DIR" ]; then
    if [ "${KEEP_WORK_DIR:-0}" = 1 ]; then
      echo "rank output kept in $WORK_DIR"
    else
      rm -rf "$WORK_DIR"
    fi
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

skip() {
  echo "SKIP: $*"
  exit "$SKIP_STATUS"
}

# ---- can this machine run it? ----------------------------------------------------------------

[ "$(id -u)" -eq 0 ] || skip "creating network namespaces needs root (running as uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed"
command -v timeout >/dev/null 2>&1 || skip "the timeout command (coreutils) is not installed"

probe="$TAG-probe"
NAMESPACES+=("$probe")
if ! err=$(ip netns add "$probe" 2>&1); then
  skip "cannot create a network namespace (ip netns add: $err)"
fi
if ! err=$({ ip -n "$probe" link add probebr type bridge &&
  ip -n "$probe" link add probe0 type veth peer name probe1; } 2>&1); then
  skip "cannot create a bridge and a veth pair inside a network namespace ($err)"
fi
if ! err=$(ip netns exec "$probe" true 2>&1); then
  skip "cannot run a command inside a network namespace (ip netns exec: $err)"
fi
ip netns delete "$probe"
NAMESPACES=()

for tool in "${COLLECTIVES[@]}"; do
  [ -x "$PERF_DIR/$tool" ] || {
    echo "FAIL: $PERF_DIR/$tool is not an executable; build the perf tools first" >&2
    exit 1
  }
done

WORK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/chorus-netns.XXXXXX")

# ---- the simulated hosts ---------------------------------------------------------------------

host_ns() { echo "$TAG-h$1"; }
host_addr() { echo "$SUBNET.$(($1 + 1))"; }

make_hosts() {
  local hosts=$1 h ns
  local bridge_ns="$TAG-br"
  NAMESPACES+=("$bridge_ns")
  ip netns add "$bridge_ns"
  ip -n "$bridge_ns" link set lo up
  ip -n "$bridge_ns" link add "$BRIDGE_IF" type bridge
  ip -n "$bridge_ns" link set "$BRIDGE_IF" up
  ip -n "$bridge_ns" link add "$RAIL_BRIDGE_IF" type bridge
  ip -n "$bridge_ns" link set "$RAIL_BRIDGE_IF" up
  for ((h = 0; h < hosts; h++)); do
    ns=$(host_ns "$h")
    NAMESPACES+=("$ns")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$HOST_IF" type veth peer name "h$h" netns "$bridge_ns"
    ip -n "$bridge_ns" link set "h$h" master "$BRIDGE_IF"
    ip -n "$bridge_ns" link set "h$h" up
    ip -n "$ns" addr add "$(host_addr "$h")/24" dev "$HOST_IF"
    ip -n "$ns" link set "$HOST_IF" up
    ip -n "$ns" link add "$RAIL_IF" type veth peer name "r$h" netns "$bridge_ns"
    ip -n "$bridge_ns" link set "r$h" master "$RAIL_BRIDGE_IF"
    ip -n "$bridge_ns" link set "r$h" up
    ip -n "$ns" addr add "$RAIL_SUBNET.$((h + 1))/24" dev "$RAIL_IF"
    ip -n "$ns" link set "$RAIL_IF" up
  done
}

# Which host a rank runs on: contiguous puts ranks 2h and 2h+1 on host h, interleaved puts
# rank r on host r % hosts.
host_of() {
  local rank=$1 hosts=$2 placement=$3
  if [ "$placement" = contiguous ]; then
    echo $((rank / RANKS_PER_HOST))
  else
    echo $((rank % hosts))
  fi
}

local_rank_of() {
  local rank=$1 hosts=$2 placement=$3
  if [ "$placement" = contiguous ]; then
    echo $((rank % RANKS_PER_HOST))
  else
    echo $((rank / hosts))
  fi
}

# ---- running ranks ---------------------------------------------------------------------------

# start_rank DIR RANK HOSTS PLACEMENT TOOL TIMEOUT [VAR=VALUE...]
# Runs one rank in its host's namespace: output in DIR/<rank>.out and DIR/<rank>.err, the pid
# of its timeout process in DIR/<rank>.pid, and its exit status, once it has one, in
# DIR/<rank>.status. Meant to run in the background.
start_rank() {
  local dir=$1 r=$2 hosts=$3 placement=$4 tool=$5 limit=$6
  shift 6
  local nranks=$((hosts * RANKS_PER_HOST)) status
  local h exe=("$PERF_DIR/$tool" "${PERF_ARGS[@]}")
  # chorus-topo instead of a perf tool: print the communicator's topology.
  [ "$tool" != chorus-topo ] || exe=("$TOPO_EXE" --comm)
  h=$(host_of "$r" "$hosts" "$placement")
  ip netns exec "$(host_ns "$h")" env \
    CHORUS_RANK="$r" CHORUS_NRANKS="$nranks" \
    CHORUS_LOCAL_RANK="$(local_rank_of "$r" "$hosts" "$placement")" \
    CHORUS_LOCAL_NRANKS="$RANKS_PER_HOST" \
    NCCL_COMM_ID="$COMM_ID" CHORUS_COMM_SECRET="$COMM_SECRET" \
    CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS="${DEBUG_SUBSYS:-INIT}" \
    CHORUS_INIT_TIMEOUT="${CHORUS_INIT_TIMEOUT:-60}" CHORUS_TIMEOUT="${CHORUS_TIMEOUT:-60}" \
    CHORUS_SPIN_COUNT="${CHORUS_SPIN_COUNT:-200}" \
    "$@" \
    timeout -k 5 "$limit" "${exe[@]}" \
    </dev/null >"$dir/$r.out" 2>"$dir/$r.err" &
  echo "$!" >"$dir/$r.pid"
  if wait "$!" 2>/dev/null; then status=0; else status=$?; fi
  echo "$status" >"$dir/$r.status.tmp"
  mv "$dir/$r.status.tmp" "$dir/$r.status"
}

RUN_COUNT=0

# run_ranks DIR HOSTS PLACEMENT TOOL TIMEOUT EXPECT [VAR=VALUE...]
# Starts 2*HOSTS ranks of TOOL (see start_rank) and waits for all of them. EXPECT is "success"
# (one failing rank stops the others, which would otherwise wait for it until they time out)
# or "failure" (every rank is left to fail on its own). Returns non-zero when some rank exited
# non-zero.
run_ranks() {
  local dir=$1 hosts=$2 placement=$3 tool=$4 limit=$5 expect=$6
  shift 6
  local nranks=$((hosts * RANKS_PER_HOST)) r finished failed=0 stopped=0 status
  RUN_COUNT=$((RUN_COUNT + 1))
  COMM_ID="$(host_addr "$(host_of 0 "$hosts" "$placement")"):$((PORT + RUN_COUNT))"
  COMM_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
  mkdir -p "$dir"
  for ((r = 0; r < nranks; r++)); do
    start_rank "$dir" "$r" "$hosts" "$placement" "$tool" "$limit" "$@" &
  done
  while :; do
    finished=0
    for ((r = 0; r < nranks; r++)); do
      [ -f "$dir/$r.status" ] || continue
      finished=$((finished + 1))
      [ "$(cat "$dir/$r.status")" -eq 0 ] || failed=1
    done
    if [ "$failed" -eq 1 ] && [ "$expect" = success ] && [ "$stopped" -eq 0 ]; then
      stopped=1
      for ((r = 0; r < nranks; r++)); do
        [ -f "$dir/$r.status" ] || [ ! -s "$dir/$r.pid" ] ||
          kill -TERM "$(cat "$dir/$r.pid")" 2>/dev/null || true
      done
    fi
    [ "$finished" -lt "$nranks" ] || break
    # Returns when a rank's subshell exits (its status file is written by then); 127 once none
    # is left to wait for.
    if wait -n; then status=0; else status=$?; fi
    if [ "$status" -eq 127 ]; then
      for ((r = 0; r < nranks; r++)); do
        [ -f "$dir/$r.status" ] || echo "rank $r ended without an exit status" >&2
      done
      failed=1
      break
    fi
  done
  wait
  return "$failed"
}

# Prints what the ranks of a failed run said.
show_ranks() {
  local dir=$1 nranks=$2 r
  for ((r = 0; r < nranks; r++)); do
    echo "---- rank $r: exit status $(cat "$dir/$r.status" 2>/dev/null || echo '?')"
    tail -n 8 "$dir/$r.err" 2>/dev/null | sed 's/^/  stderr: /'
    tail -n 4 "$dir/$r.out" 2>/dev/null | sed 's/^/  stdout: /'
  done
}

# ---- checks ----------------------------------------------------------------------------------

SUMMARY=()
FAILURES=0

record() {
  local verdict=$1 name=$2 detail=$3
  SUMMARY+=("$(printf '%-4s  %-52s  %s' "$verdict" "$name" "$detail")")
  [ "$verdict" = PASS ] || FAILURES=$((FAILURES + 1))
  echo "$verdict: $name: $detail"
}

# Rows the sweep of PERF_ARGS prints: 8 B to 1 MiB by a factor of 8.
expected_rows() {
  local rows=0 bytes=8
  while [ "$bytes" -le $((1 << 20)) ]; do
    rows=$((rows + 1))
    bytes=$((bytes * 8))
  done
  echo "$rows"
}
EXPECTED_ROWS=$(expected_rows)
readonly EXPECTED_ROWS

# Rank 0 prints one row per size: size count type redop root, then time algbw busbw #wrong for
# out-of-place and for in-place.
check_rows() {
  local name=$1 out=$2
  local counts
  counts=$(awk '/^#/ || NF == 0 { next }
    { rows++; if (NF != 13 || $9 != "0" || $13 != "0") bad++ }
    END { printf "%d %d\n", rows, bad }' "$out")
  local rows=${counts% *} bad=${counts#* }
  if [ "$rows" -eq "$EXPECTED_ROWS" ] && [ "$bad" -eq 0 ]; then
    record PASS "$name results" "$rows rows, #wrong 0 in all"
  else
    record FAIL "$name results" "$rows rows (want $EXPECTED_ROWS), $bad with #wrong not 0"
    sed 's/^/  rank 0: /' "$out"
  fi
}

# Reads every rank's "channel 0: P -> R via T, R -> N via T" line and checks that the links form
# one ring, that each link uses shm inside a host and socket across hosts, and that the ring
# crosses host boundaries exactly once per host.
check_ring() {
  local name=$1 dir=$2 hosts=$3 placement=$4
  local nranks=$((hosts * RANKS_PER_HOST)) r lines missing=""
  local edges="$dir/ring_edges"
  : >"$edges"
  for ((r = 0; r < nranks; r++)); do
    lines=$(grep -c 'channel 0: ' "$dir/$r.err" || true)
    [ "$lines" -eq 1 ] || missing+=" $r($lines)"
    sed -nE 's/.*channel 0: ([0-9]+) -> ([0-9]+) via ([a-z]+), ([0-9]+) -> ([0-9]+) via ([a-z]+).*/\1 \2 \3\n\4 \5 \6/p' \
      "$dir/$r.err" >>"$edges"
  done
  if [ -n "$missing" ]; then
    record FAIL "$name ring transports" "ranks without exactly one channel 0 line:$missing"
    record FAIL "$name ring crossings" "no complete ring in the INIT logs"
    return
  fi
  local report verdict
  report=$(awk -v nranks="$nranks" -v hosts="$hosts" -v rph="$RANKS_PER_HOST" \
    -v placement="$placement" '
    function host(r) { return placement == "contiguous" ? int(r / rph) : r % hosts }
    {
      key = $1 " " $2
      if ((key in via) && via[key] != $3) conflict = conflict " " key "(" via[key] "/" $3 ")"
      if (!(key in via)) { edges++; outs[$1]++; ins[$2]++; next_of[$1] = $2 }
      via[key] = $3
    }
    END {
      ring_ok = edges == nranks
      for (r = 0; r < nranks; r++) if (outs[r] != 1 || ins[r] != 1) ring_ok = 0
      order = ""; r = 0
      for (i = 0; i < nranks && ring_ok; i++) {
        order = order (i ? " " : "") r "@h" host(r)
        r = next_of[r]
      }
      if (ring_ok && r != 0) ring_ok = 0
      for (key in via) {
        split(key, ab, " ")
        cross = host(ab[1]) != host(ab[2])
        crossings += cross
        if (via[key] != (cross ? "socket" : "shm")) wrong = wrong " " ab[1] "->" ab[2] "(" via[key] ")"
      }
      transports = ring_ok && wrong == "" && conflict == "" ? "PASS" : "FAIL"
      crossing = ring_ok && crossings == hosts ? "PASS" : "FAIL"
      printf "%s %s %d ring [%s]", transports, crossing, crossings, ring_ok ? order : "not one cycle"
      if (wrong != "") printf " wrong transports:%s", wrong
      if (conflict != "") printf " ends disagree:%s", conflict
      printf "\n"
    }' "$edges")
  read -r verdict crossing_verdict crossings detail <<<"$report"
  record "$verdict" "$name ring transports" "shm inside hosts, socket across; $detail"
  record "$crossing_verdict" "$name ring crossings" \
    "$crossings host boundaries crossed (want $hosts)"
}

# check_plugin NAME DIR HOSTS LOADED NET: every rank logged LOADED (the network it took), and
# the links between hosts go through network NET (a plugin, or Chorus's socket network behind
# the same interface), none over the socket transport.
check_plugin() {
  local name=$1 dir=$2 hosts=$3 loaded_line=$4 net=$5
  local nranks=$((hosts * RANKS_PER_HOST)) r loaded=0 links sockets
  for ((r = 0; r < nranks; r++)); do
    grep -qF "$loaded_line" "$dir/$r.err" && loaded=$((loaded + 1))
  done
  links=$(cat "$dir"/*.err | grep -c "through net plugin $net " || true)
  sockets=$(cat "$dir"/*.err | grep -cE "(sending to|receiving from) rank [0-9]+ channel [0-9]+ over " || true)
  if [ "$loaded" -eq "$nranks" ] && [ "$links" -ge $((2 * hosts)) ] && [ "$sockets" -eq 0 ]; then
    record PASS "$name plugin" "$nranks ranks: $loaded_line; $links connections through $net, none over the socket transport"
  else
    record FAIL "$name plugin" "$loaded of $nranks ranks: $loaded_line; $links connections through $net, $sockets over the socket transport"
    grep -h "net plugin\|plugin:\|socket network" "$dir"/*.err | head -20
  fi
}

# With NCCL_ALGO forcing an algorithm, every all-reduce decision rank 0 logs names it.
check_algorithm() {
  local name=$1 err=$2 algo=$3
  local decisions other
  decisions=$(grep -c 'AllReduce .*class (.*B): ' "$err" || true)
  other=$(grep 'AllReduce .*class (.*B): ' "$err" | grep -vc "B): $algo" || true)
  if [ "$decisions" -gt 0 ] && [ "$other" -eq 0 ]; then
    record PASS "$name algorithm" "all $decisions all-reduce decisions chose $algo"
  else
    record FAIL "$name algorithm" "$decisions all-reduce decisions logged, $other not $algo"
    grep 'TUNING\|class (' "$err" | head -n 10 | sed 's/^/  rank 0: /'
  fi
}

# check_cores NAME ERR NRANKS: the hosts are namespaces of this machine, so the ranks share its
# CPUs: the cost model must see this machine's CPUs over all the ranks, not a host's.
check_cores() {
  local name=$1 err=$2 nranks=$3
  local expected seen
  expected=$(awk -v c="$(nproc)" -v n="$nranks" 'BEGIN { printf "%.2f", c / n }')
  seen=$(grep -oE '[0-9.]+ cores per rank' "$err" | head -n 1 | cut -d' ' -f1)
  if [ "$seen" = "$expected" ]; then
    record PASS "$name cores" "$seen cores per rank: $(nproc) CPUs shared by $nranks ranks"
  else
    record FAIL "$name cores" "model sees ${seen:-no} cores per rank, expected $expected"
  fi
}

# check_cross_phase NAME ERR GBPS: the hierarchical algorithm's phase across hosts (one rank a
# host) sees the cores per rank of the whole communicator and GBPS of the link per rank.
check_cross_phase() {
  local name=$1 err=$2 gbps=$3 parent seen
  parent=$(grep -oE '[0-9.]+ cores per rank' "$err" | head -n 1 | cut -d' ' -f1)
  seen=$(grep -oE 'at most 1 per host, [0-9.]+ cores per rank; network [^;]*;' "$err" | head -n 1)
  local want="at most 1 per host, $parent cores per rank; network sockets, $gbps GB/s per host;"
  if [ -n "$parent" ] && [ "$seen" = "$want" ]; then
    record PASS "$name cross phase" "$seen"
  else
    record FAIL "$name cross phase" "the phase across hosts logged '${seen:-nothing}', expected '$want'"
  fi
}

# check_network NAME ERR WANT: the network the cost model counts on, as rank 0 logs it
# ("ExampleSocket, 0.5 GB/s per rank, 0.5 per host"; a trailing * matches any rest).
check_network() {
  local name=$1 err=$2 want=$3 seen
  seen=$(grep -oE 'per rank; network [^;]*;' "$err" | head -n 1 | sed 's/^per rank; network //; s/;$//')
  # shellcheck disable=SC2053  # $want is a pattern
  if [[ $seen == $want ]]; then
    record PASS "$name network" "the cost model's network: $seen"
  else
    record FAIL "$name network" "the cost model's network: ${seen:-not logged}, expected $want"
  fi
}

# run_case NAME HOSTS PLACEMENT TOOL [VAR=VALUE...]: a run expected to succeed; checks rank 0's
# rows. Leaves the ranks' output in $WORK_DIR/NAME.
run_case() {
  local name=$1 hosts=$2 placement=$3 tool=$4
  shift 4
  local dir="$WORK_DIR/$name" start=$EPOCHREALTIME
  if run_ranks "$dir" "$hosts" "$placement" "$tool" "$RANK_TIMEOUT" success "$@"; then
    echo "ran $name: $((hosts * RANKS_PER_HOST)) ranks, $(elapsed "$start") s"
    check_rows "$name" "$dir/0.out"
    return 0
  fi
  record FAIL "$name run" "a rank exited non-zero after $(elapsed "$start") s"
  show_ranks "$dir" $((hosts * RANKS_PER_HOST))
  return 1
}

elapsed() {
  local start=$1 now=$EPOCHREALTIME
  awk -v a="$start" -v b="$now" 'BEGIN { printf "%.1f", b - a }'
}

# ---- the cases -------------------------------------------------------------------------------

SCRIPT_START=$EPOCHREALTIME
make_hosts "$MAX_HOSTS"
echo "hosts: ${MAX_HOSTS} namespaces $TAG-h0.. on $SUBNET.0/24 via bridge namespace $TAG-br"

for hosts in "${HOST_COUNTS[@]}"; do
  prefix="${hosts}hosts"
  if [ "$hosts" -eq "$MAX_HOSTS" ]; then
    tools=("${COLLECTIVES[@]}")
  else
    tools=(all_reduce_perf)
  fi

  for tool in "${tools[@]}"; do
    name="$prefix-$tool"
    if run_case "$name" "$hosts" contiguous "$tool" && [ "$tool" = all_reduce_perf ]; then
      check_ring "$name-contiguous" "$WORK_DIR/$name" "$hosts" contiguous
      if [ "$hosts" -eq "${HOST_COUNTS[0]}" ]; then
        echo "==== rank 0 of all_reduce_perf on $hosts hosts ($((hosts * RANKS_PER_HOST)) ranks)"
        cat "$WORK_DIR/$name/0.out"
        echo "===="
      fi
    fi
  done

  name="$prefix-all_reduce_perf-interleaved"
  if run_case "$name" "$hosts" interleaved all_reduce_perf; then
    check_ring "$name" "$WORK_DIR/$name" "$hosts" interleaved
  fi

  [ "$hosts" -eq "$MAX_HOSTS" ] || continue

  # chorus-topo across the hosts, interleaved placement: the matrices show shared memory inside
  # a host and sockets across, and the ring and trees cross between hosts the fewest times.
  name="$prefix-chorus-topo-interleaved"
  dir="$WORK_DIR/$name"
  if run_ranks "$dir" "$hosts" interleaved chorus-topo "$RANK_TIMEOUT" success; then
    echo "==== chorus-topo --comm on $hosts hosts, ranks dealt round-robin over the hosts"
    cat "$dir/0.out"
    echo "===="
    if grep -q "^# $((hosts * RANKS_PER_HOST)) ranks on $hosts hosts" "$dir/0.out" &&
      grep -q "(crosses between hosts $hosts times)" "$dir/0.out" &&
      [ "$(grep -c "($((hosts - 1)) edges between hosts)" "$dir/0.out")" -eq 2 ] &&
      grep -qE '^r0 +X +NET +NET +NET +SHM' "$dir/0.out"; then
      record PASS "$name" "ring crosses $hosts times, each tree $((hosts - 1)) edges between hosts"
    else
      record FAIL "$name" "unexpected report (printed above)"
    fi
  else
    record FAIL "$name run" "a rank exited non-zero"
    show_ranks "$dir" $((hosts * RANKS_PER_HOST))
  fi

  # Two ring channels with two networks: channel 0 uses the bootstrap's network, channel 1 the
  # other one, on every link between hosts.
  name="$prefix-two-networks"
  if DEBUG_SUBSYS=INIT,NET run_case "$name" "$hosts" contiguous all_reduce_perf NCCL_ALGO=ring \
    CHORUS_MIN_CHANNELS=2 CHORUS_MAX_CHANNELS=2; then
    ch0=$(cat "$WORK_DIR/$name"/*.err |
      grep -cE "receiving from rank [0-9]+ channel 0 over ${SUBNET//./\\.}\.")
    ch1=$(cat "$WORK_DIR/$name"/*.err |
      grep -cE "receiving from rank [0-9]+ channel 1 over ${RAIL_SUBNET//./\\.}\.")
    if [ "$ch0" -eq "$hosts" ] && [ "$ch1" -eq "$hosts" ]; then
      record PASS "$name" "$hosts cross-host channel-0 links over $SUBNET.0/24, $hosts channel-1 links over $RAIL_SUBNET.0/24"
    else
      record FAIL "$name" "channel 0 over the first network: $ch0, channel 1 over the second: $ch1 (want $hosts each)"
      grep -h "receiving from" "$WORK_DIR/$name"/*.err | head -20
    fi
  fi

  # NCCL_NET_PLUGIN loads the example net plugin (its own sockets), which then carries every
  # link between hosts: each collective through the newest version, all-reduce through the
  # builds that stop at v11, v10, v9 and v8.
  for v in 12 11 10 9 8; do
    lib="$PLUGIN_DIR/libnccl-net-example.so"
    plugin_tools=("${COLLECTIVES[@]}")
    if [ "$v" -ne 12 ]; then
      lib="$PLUGIN_DIR/libnccl-net-example-v$v.so"
      plugin_tools=(all_reduce_perf)
    fi
    for tool in "${plugin_tools[@]}"; do
      name="$prefix-net-plugin-v$v-$tool"
      # The devices' speed is the cost model's network: each host's ranks share one device
      # that reports 4 Gbit/s.
      if DEBUG_SUBSYS=INIT,NET,TUNING run_case "$name" "$hosts" contiguous "$tool" \
        NCCL_NET_PLUGIN="$lib" EXAMPLE_NET_SPEED_MBPS=4000; then
        check_plugin "$name" "$WORK_DIR/$name" "$hosts" \
          "using net plugin ExampleSocket (ncclNet v$v)" ExampleSocket
        check_network "$name" "$WORK_DIR/$name/0.err" "ExampleSocket, 0.5 GB/s per rank, 0.5 per host"
      fi
    done
  done

  # CHORUS_SOCKET_NET=1: Chorus's sockets behind the net plugin interface, driven by the net
  # transport, carry every link between hosts; the cost model still prices them as sockets.
  for tool in "${tools[@]}"; do
    name="$prefix-socket-net-$tool"
    if DEBUG_SUBSYS=INIT,NET,TUNING run_case "$name" "$hosts" contiguous "$tool" \
      CHORUS_SOCKET_NET=1 CHORUS_SOCKET_NSTREAMS=2; then
      check_plugin "$name" "$WORK_DIR/$name" "$hosts" "using the socket network" Socket
      check_network "$name" "$WORK_DIR/$name/0.err" "sockets, *"
    fi
  done

  for algo in tree ring; do
    name="$prefix-all_reduce_perf-$algo"
    if DEBUG_SUBSYS=INIT,TUNING run_case "$name" "$hosts" contiguous all_reduce_perf \
      NCCL_ALGO="$algo"; then
      check_algorithm "$name" "$WORK_DIR/$name/0.err" "$algo"
      check_network "$name" "$WORK_DIR/$name/0.err" "sockets, *"
      check_cores "$name" "$WORK_DIR/$name/0.err" $((hosts * RANKS_PER_HOST))
    fi
  done

  # A link speed stated with CHORUS_SOCKET_LINK_MBPS (the veths report none) is the cost
  # model's network between the hosts. The hierarchical algorithm's phase across hosts prices
  # its ranks as its parent does: a host's ranks cross at once, sharing the link and the cores.
  name="$prefix-socket-link-mbps"
  if DEBUG_SUBSYS=INIT,TUNING run_case "$name" "$hosts" contiguous all_reduce_perf \
    CHORUS_SOCKET_LINK_MBPS=4000 NCCL_ALGO=hier; then
    check_network "$name" "$WORK_DIR/$name/0.err" "sockets, 0.5 GB/s per host"
    check_cross_phase "$name" "$WORK_DIR/$name/0.err" \
      "$(awk -v r=$RANKS_PER_HOST 'BEGIN { printf "%.3g", 0.5 / r }')"
  fi

  name="$prefix-ifname-$HOST_IF_PREFIX"
  run_case "$name" "$hosts" contiguous all_reduce_perf \
    CHORUS_SOCKET_IFNAME="$HOST_IF_PREFIX" || true

  # No interface matches: every rank must fail at init, quickly, naming the variable.
  name="$prefix-ifname-nosuchif0"
  dir="$WORK_DIR/$name"
  nranks=$((hosts * RANKS_PER_HOST))
  start=$EPOCHREALTIME
  run_ranks "$dir" "$hosts" contiguous all_reduce_perf "$FAST_FAIL_TIMEOUT" failure \
    CHORUS_SOCKET_IFNAME=nosuchif0 CHORUS_INIT_TIMEOUT=20 || true
  took=$(elapsed "$start")
  # The perf tool's own error line, printed whatever CHORUS_DEBUG says, carries the reason.
  expected_error='ncclCommInitRank failed: .*CHORUS_SOCKET_IFNAME="nosuchif0" matches no '
  expected_error+="interface \\(available: [^)]*$HOST_IF"
  bad=""
  for ((r = 0; r < nranks; r++)); do
    status=$(cat "$dir/$r.status" 2>/dev/null || echo none)
    if ! [[ "$status" =~ ^[0-9]+$ ]] || [ "$status" -eq 0 ] || [ "$status" -eq 124 ] ||
      [ "$status" -eq 137 ]; then
      bad+=" rank $r exited $status;"
    elif ! grep -qE "^all_reduce_perf: rank $r: $expected_error" "$dir/$r.err"; then
      bad+=" rank $r did not print /$expected_error/;"
    fi
  done
  if [ -z "$bad" ]; then
    record PASS "$name fails fast" "all $nranks ranks failed in $took s: $(grep -E \
      "^all_reduce_perf: rank 0: $expected_error" "$dir/0.err" | sed -E 's/.*(CHORUS_SOCKET_IFNAME=.*)\)$/\1/')"
  else
    record FAIL "$name fails fast" "after $took s:$bad"
    show_ranks "$dir" "$nranks"
  fi

  # The filter names interfaces that exist but carry no address: the error says so.
  name="$prefix-ifname-without-address"
  dir="$WORK_DIR/$name"
  for ((h = 0; h < hosts; h++)); do
    ip -n "$(host_ns "$h")" link add vbare0 type veth peer name vbare1
  done
  start=$EPOCHREALTIME
  run_ranks "$dir" "$hosts" contiguous all_reduce_perf "$FAST_FAIL_TIMEOUT" failure \
    CHORUS_SOCKET_IFNAME=vbare CHORUS_INIT_TIMEOUT=20 || true
  took=$(elapsed "$start")
  for ((h = 0; h < hosts; h++)); do ip -n "$(host_ns "$h")" link del vbare0 || true; done
  expected_error='CHORUS_SOCKET_IFNAME="vbare" matches no interface .*; it names vbare[01], '
  expected_error+='vbare[01], which are down or have no IPv4/IPv6 address'
  bad=""
  for ((r = 0; r < nranks; r++)); do
    status=$(cat "$dir/$r.status" 2>/dev/null || echo none)
    if [ "$status" = 0 ] || [ "$status" = 124 ] || [ "$status" = 137 ] || [ "$status" = none ]; then
      bad+=" rank $r exited $status;"
    elif ! grep -qE "$expected_error" "$dir/$r.err"; then
      bad+=" rank $r did not print /$expected_error/;"
    fi
  done
  if [ -z "$bad" ]; then
    record PASS "$name fails fast" "all $nranks ranks failed in $took s naming vbare0/vbare1"
  else
    record FAIL "$name fails fast" "after $took s:$bad"
    show_ranks "$dir" "$nranks"
  fi
done

echo
echo "==== summary ($(elapsed "$SCRIPT_START") s, $RUN_COUNT runs)"
printf '%s\n' "${SUMMARY[@]}"
if [ "$FAILURES" -gt 0 ]; then
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "all checks passed"
