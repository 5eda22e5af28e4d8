#!/bin/bash
# Timeouts with a diagnosis: one of three ranks is stopped (SIGSTOP) in the middle of a run of
# all-reduces. SIGUSR1 makes the two others write their pending operations at once
# (CHORUS_DUMP); then they time out (CHORUS_TIMEOUT=4) with an error that says which rank each
# waits for and where, write their dumps again, and chorus-waitfor names the stopped rank as the
# root of the wait-for graph (chorusrun --linger leaves the second rank to fail on its own
# once the first did). Once with the two-shot all-reduce (every rank waits on the stopped
# one) and once with the ring (a chain of waits that ends there).
# usage: check_waitfor.sh <chorusrun> <all_reduce_perf> <chorus-waitfor>
set -u
run=$1 perf=$2 waitfor=$3
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # description, command status (0 = pass)
  if [ "$2" -eq 0 ]; then echo "PASS $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}
dumps_with() {  # reason: how many dumps in $dir say it
  grep -l "^reason $1" "$dir"/chorus-*.txt 2>/dev/null | wc -l
}
check_root() {  # what, graph file: chorus-waitfor over $dir names rank 2 as the root
  "$waitfor" "$dir" > "$2" 2>&1
  check "$algo: $1, chorus-waitfor puts rank 2 at the root" \
    $(grep -q '^root: rank 2 (no dump' "$2"; echo $?)
}

for algo in twoshot ring; do
  dir=$tmp/$algo
  mkdir -p "$dir"
  CHORUS_ALGO=$algo CHORUS_DUMP=$dir CHORUS_TIMEOUT=4 timeout 60 "$run" -n 3 --tag-output \
    --linger 40 "$perf" \
    -b 1M -e 1M -n 1000000 -w 0 -c 0 > "$dir/out.log" 2>&1 &
  launcher=$!
  # all_reduce_perf prints every rank's pid; rank 2 is stopped once the timed loop runs.
  pids=()
  for _ in $(seq 100); do
    if grep -q '^\[0\] #  Rank  2 ' "$dir/out.log"; then
      for r in 0 1 2; do
        pids+=($(sed -nE "s/^\[0\] #  Rank  $r Group +[0-9]+ Pid +([0-9]+) .*/\1/p" "$dir/out.log"))
      done
      break
    fi
    sleep 0.1
  done
  check "$algo: three ranks started (${pids[*]:-none})" $([ ${#pids[@]} -eq 3 ]; echo $?)
  [ ${#pids[@]} -eq 3 ] || { kill $launcher 2>/dev/null; continue; }
  sleep 0.5
  kill -STOP "${pids[2]}"
  sleep 0.5
  kill -USR1 "${pids[0]}" "${pids[1]}"
  for _ in $(seq 30); do
    [ "$(dumps_with signal)" -eq 2 ] && break
    sleep 0.1
  done
  signalled=$(dumps_with signal)
  check "$algo: SIGUSR1 made both running ranks write a dump (got $signalled)" \
    $([ "$signalled" -eq 2 ]; echo $?)
  check_root "from the signal dumps" "$dir/graph_signal.txt"
  # chorusrun leaves the ranks time to fail on their own (--linger); the stopped one is ended
  # once both others wrote their failure dumps.
  for _ in $(seq 400); do
    [ "$(dumps_with failure)" -eq 2 ] && break
    sleep 0.1
  done
  kill -KILL "${pids[2]}" 2>/dev/null
  wait $launcher
  status=$?
  check "$algo: the run failed instead of hanging (exit $status)" \
    $([ $status -ne 0 ] && [ $status -ne 124 ]; echo $?)
  check "$algo: the timeout names the rank waited for and the call" \
    $(grep -qE 'waits for rank [02] at [a-z-]+ step [0-9]+ of ncclAllReduce #[0-9]+ .*timed out after 4 s' \
      "$dir/out.log"; echo $?)
  failed=$(dumps_with failure)
  check "$algo: both running ranks wrote a dump when their call failed (got $failed)" \
    $([ "$failed" -eq 2 ]; echo $?)
  check_root "from the failure dumps" "$dir/graph.txt"
  if [ "$algo" = ring ]; then
    check "ring: rank 1 waits for rank 0, which waits for rank 2" \
      $(grep -q '^  1 -> 0$' "$dir/graph.txt" && grep -q '^  0 -> 2$' "$dir/graph.txt"; echo $?)
  fi
  [ $failures -eq 0 ] || { cat "$dir/out.log" "$dir/graph.txt"; }
done
"$waitfor" "$tmp/nothing-here" > /dev/null 2>&1
check "chorus-waitfor fails when it finds no dump" $([ $? -eq 1 ]; echo $?)
echo "$failures failed"
[ $failures -eq 0 ]
