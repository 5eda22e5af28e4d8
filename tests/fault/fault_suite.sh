#!/usr/bin/env bash
# The fault suite: 4 ranks make CALLS random collectives and an all-reduce (each checked
# exactly), and one rank dies (SIGKILL) at a random call and a random moment in it; every rank
# in turn, KILLS rounds, over
# shared memory (4 ranks on this host) and over TCP (2 network namespaces of 2 ranks each; left
# out without root or namespaces), and, where FAULT_NET_PLUGIN names an NCCL net plugin, over
# that plugin between the same namespaces. Then each transport once with a stopped rank
# (SIGSTOP).
# Checked for each survivor (fault_rank.cc): its call fails instead of hanging, within 10 s of
# the death (a stopped rank: within the timeout plus 10 s) with an error naming the rank, after
# no wrong result; it holds no more file descriptors or threads after destroying its
# communicator than before creating it; and no shared-memory name of the run is left in
# /dev/shm. Prints one line per run and a summary per transport (kills, detection median and
# maximum, hangs, leaks).
#
# usage: fault_suite.sh FAULT_RANK [CALLS [KILLS]]   (defaults 100 and 1; seed: FAULT_SUITE_SEED)
set -u
rank_exe=$1
calls=${2:-100}
kills=${3:-1}
RANDOM=${FAULT_SUITE_SEED:-12345}
readonly NRANKS=4 TAG="chorus-fault-$$" SUBNET="10.215.$(($$ % 250 + 1))"
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
[ "${EPHEMERAL_LOW:-0}" -gt 12000 ] 2>/dev/null || EPHEMERAL_LOW=32768
work=$(mktemp -d "${TMPDIR:-/tmp}/chorus-fault.XXXXXX")
namespaces=()
failures=0
cleanup() {
  for ns in "${namespaces[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns delete "$ns" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
unset CHORUS_COMM_ID NCCL_COMM_ID CHORUS_SHM_DISABLE CHORUS_DUMP CHORUS_HOSTID NCCL_NET_PLUGIN

# Two hosts for TCP: network namespaces joined by a bridge in a third.
netns_ok=0
if [ "$(id -u)" -eq 0 ] && command -v ip > /dev/null &&
  ip netns add "$TAG-br" 2> /dev/null; then
  namespaces+=("$TAG-br")
  ip -n "$TAG-br" link set lo up
  ip -n "$TAG-br" link add br0 type bridge && ip -n "$TAG-br" link set br0 up && netns_ok=1
  for h in 0 1; do
    [ $netns_ok -eq 1 ] || break
    ns="$TAG-h$h"
    namespaces+=("$ns")
    ip netns add "$ns" && ip -n "$ns" link set lo up &&
      ip -n "$ns" link add veth0 type veth peer name "h$h" netns "$TAG-br" &&
      ip -n "$TAG-br" link set "h$h" master br0 && ip -n "$TAG-br" link set "h$h" up &&
      ip -n "$ns" addr add "$SUBNET.$((h + 1))/24" dev veth0 && ip -n "$ns" link set veth0 up ||
      netns_ok=0
  done
fi

# run TRANSPORT VICTIM AT DELAY_US MODE: one job; appends to $work/results.
run() {
  local transport=$1 victim=$2 at=$3 delay=$4 mode=$5
  local out="$work/run.$transport.$victim.$mode.$at"
  mkdir -p "$out"
  # Below the kernel's ephemeral ports, which another connection of this host may hold.
  local port=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000))) timeout_s=30
  [ "$mode" = stop ] && timeout_s=3
  local shm_before
  shm_before=$(ls /dev/shm | grep -c '^chorus-')
  local pids=() r seed=$RANDOM
  for ((r = 0; r < NRANKS; r++)); do
    local prefix=() addr=127.0.0.1 plugin=()
    if [ "$transport" != shm ]; then
      prefix=(ip netns exec "$TAG-h$((r / 2))")
      addr=$SUBNET.1
    fi
    [ "$transport" = plugin ] && plugin=(NCCL_NET_PLUGIN="$FAULT_NET_PLUGIN")
    "${prefix[@]}" env "${plugin[@]}" CHORUS_RANK=$r CHORUS_NRANKS=$NRANKS CHORUS_COMM_ID=$addr:$port \
      CHORUS_TIMEOUT=$timeout_s CHORUS_INIT_TIMEOUT=30 FAULT_SEED=$seed FAULT_CALLS=$calls \
      FAULT_VICTIM=$victim FAULT_AT=$at FAULT_DELAY_US=$delay FAULT_MODE=$mode FAULT_OUT=$out \
      timeout -s KILL 60 "$rank_exe" > "$out/log$r" 2>&1 &
    pids+=($!)
  done
  # The stopped victim is ended once every survivor has reported.
  if [ "$mode" = stop ]; then
    for _ in $(seq 600); do
      [ "$(ls "$out" | grep -c '^rank[0-9]$')" -ge $((NRANKS - 1)) ] && break
      sleep 0.1
    done
    [ -f "$out/victim" ] && kill -KILL "${pids[$victim]}" 2> /dev/null
  fi
  local statuses=()
  for ((r = 0; r < NRANKS; r++)); do
    wait "${pids[$r]}" 2> /dev/null
    statuses+=($?)
  done
  local leaked
  leaked=$(($(ls /dev/shm | grep -c '^chorus-') - shm_before))
  for ((r = 0; r < NRANKS; r++)); do
    [ "$r" -eq "$victim" ] && continue
    local line="" hang=0
    [ "${statuses[$r]}" -eq 137 ] && hang=1
    [ -f "$out/rank$r" ] && line=$(head -1 "$out/rank$r")
    echo "$transport $mode victim $victim at $at delay_us $delay hang $hang shm_left $leaked" \
      "exit ${statuses[$r]} $line" \
      >> "$work/results"
    echo "$transport $mode victim $victim at $at: rank $r: ${line:-no report (exit ${statuses[$r]})}"
    [ -z "$line" ] && head -c 300 "$out/log$r" | sed 's/^/    log: /'
    [ -f "$out/rank$r" ] && sed -n 's/^error /    error: /p' "$out/rank$r" | cut -c1-300
  done
}

transports=(shm)
[ $netns_ok -eq 1 ] && transports+=(tcp) || echo "tcp: left out (needs root and network namespaces)"
[ $netns_ok -eq 1 ] && [ -n "${FAULT_NET_PLUGIN:-}" ] && transports+=(plugin)
for transport in "${transports[@]}"; do
  for ((k = 0; k < kills; k++)); do
    for ((v = 0; v < NRANKS; v++)); do
      run "$transport" "$v" $((1 + RANDOM % (calls - 3))) $((RANDOM % 2000)) kill
    done
  done
  run "$transport" $((RANDOM % NRANKS)) $((1 + RANDOM % (calls - 3))) $((RANDOM % 2000)) stop
done

# Verdicts and figures. A survivor passes when its call failed (failed_at > 0) within 10 s of
# the kill (stop: 13 s), naming the victim, after no wrong result, with no descriptor, thread
# or shared-memory name left over, and did not hang.
python3 - "$work/results" <<'PY' || failures=$((failures + 1))
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    t = line.split()
    d = dict(zip(t[2::2], t[3::2]))
    d["transport"], d["mode"] = t[0], t[1]
    rows.append(d)
def leads_to_victim(r, rs):
    """The error names the victim, or a survivor of the same run whose error does (a rank that
    failed because of the victim and ended before this one's connection to it was made)."""
    run = [x for x in rs if (x["victim"], x["at"]) == (r["victim"], r["at"])]
    by_rank = {x.get("rank"): x for x in run}
    seen, todo = set(), [r]
    while todo:
        x = todo.pop()
        if x.get("names_victim") == "1":
            return True
        for n in x.get("names", "-").split(","):
            if n in by_rank and n not in seen:
                seen.add(n)
                todo.append(by_rank[n])
    return False

bad = 0
for transport in sorted({r["transport"] for r in rows}):
    for mode in ("kill", "stop"):
        rs = [r for r in rows if r["transport"] == transport and r["mode"] == mode]
        if not rs:
            continue
        limit = 10000 if mode == "kill" else 13000
        det = [float(r.get("detect_ms", -1)) for r in rs if int(r.get("failed_at", 0)) > 0]
        fails = []
        for r in rs:
            fds = r.get("fds", "0").split()
            why = []
            if r["hang"] != "0": why.append("hung")
            if int(r.get("failed_at", 0)) == 0:
                why.append("no failure reported (exit %s%s)" % (
                    r.get("exit", "?"), "" if "failed_at" in r else ", no report"))
            elif not 0 <= float(r.get("detect_ms", -1)) < limit: why.append("detected after %s ms" % r.get("detect_ms"))
            if mode == "kill" and not leads_to_victim(r, rs): why.append("error does not name the victim")
            if r.get("wrong", "0") != "0": why.append("wrong results")
            if int(r["shm_left"]) > 0: why.append("%s shared-memory names left" % r["shm_left"])
            if why:
                fails.append("victim %s: %s" % (r["victim"], ", ".join(why)))
        named = sum(1 for r in rs if r.get("names_victim") == "1")
        through = sum(1 for r in rs if r.get("names_victim") != "1" and leads_to_victim(r, rs))
        # A stopped rank: every survivor times out at about the same moment, each naming the
        # rank it waits for; at least the one waiting on the stopped rank names it.
        if mode == "stop":
            for run_key in {(r["victim"], r["at"]) for r in rs}:
                if not any(r.get("names_victim") == "1" for r in rs if (r["victim"], r["at"]) == run_key):
                    fails.append("victim %s: no survivor's timeout names it" % run_key[0])
        runs = len({(r["victim"], r["at"]) for r in rs})
        print("%s %s: %d runs, %d survivors, detection median %.1f ms, max %.1f ms, named the "
              "victim %d/%d (%d more through another survivor), hangs %d, leaks %d" % (
                  transport, mode, runs, len(rs), statistics.median(det) if det else -1,
                  max(det) if det else -1, named, len(rs), through,
                  sum(r["hang"] != "0" for r in rs), sum(int(r["shm_left"]) > 0 for r in rs)))
        for f in fails:
            print("  FAIL " + f)
        bad += len(fails)
sys.exit(1 if bad else 0)
PY
# Descriptors and threads: the same after destroying as before creating.
awk '{for (i = 1; i <= NF; i++) { if ($i == "fds" && $(i+1) != $(i+2)) print "FAIL fds " $0;
  if ($i == "threads" && $(i+1) != $(i+2)) print "FAIL threads " $0 }}' "$work/results" \
  > "$work/leaks"
if [ -s "$work/leaks" ]; then
  cat "$work/leaks"
  failures=$((failures + 1))
fi
[ $failures -eq 0 ] && echo "fault suite: passed" || echo "fault suite: FAILED"
[ $failures -eq 0 ]
