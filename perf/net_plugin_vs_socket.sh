#!/bin/bash
# All-reduce bus bandwidth between two simulated hosts (network namespaces joined by a veth
# pair, one rank each) over Chorus's own sockets and through the example NCCL net plugin, in
# interleaved rounds (the order alternates); prints each size's time per call (us, out of
# place) per round and the median ratio of each variant's time to the first's. Needs root and
# iproute2; nothing is configured outside the namespaces.
# usage: [VARIANTS="socket plugin"] perf/net_plugin_vs_socket.sh [rounds] [perf args]
#   variants: socket (Chorus's sockets), plugin (the example plugin), plugin-ungrouped (the
#   plugin taking one buffer a receive, EXAMPLE_NET_MAX_RECVS=1: a slot's header and data are
#   two receives), socketnet (Chorus's sockets behind the plugin interface, CHORUS_SOCKET_NET=1)
#   e.g. perf/net_plugin_vs_socket.sh 5 "-b 8 -e 16M -f 4"
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
rounds=${1:-5}
args=${2:-"-b 8 -e 16M -f 8 -n 20 -w 5 -c 0"}
plugin="$build/transport/libnccl-net-example.so"
tag="chorus-np-$$"
tmp=$(mktemp -d)
cleanup() {
  ip netns delete "$tag-a" 2>/dev/null || true
  ip netns delete "$tag-b" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$tag-a"
ip netns add "$tag-b"
ip -n "$tag-a" link set lo up
ip -n "$tag-b" link set lo up
ip -n "$tag-a" link add veth0 type veth peer name veth1 netns "$tag-b"
ip -n "$tag-a" addr add 10.215.0.1/24 dev veth0
ip -n "$tag-b" addr add 10.215.0.2/24 dev veth1
ip -n "$tag-a" link set veth0 up
ip -n "$tag-b" link set veth1 up

port=29700
# run <variant> <round>: rank 0's output in $tmp/<variant>.<round>
run() {
  local variant=$1 round=$2 extra=()
  port=$((port + 1))
  case $variant in
    socket) ;;
    plugin) extra=(NCCL_NET_PLUGIN="$plugin") ;;
    plugin-ungrouped) extra=(NCCL_NET_PLUGIN="$plugin" EXAMPLE_NET_MAX_RECVS=1) ;;
    socketnet) extra=(CHORUS_SOCKET_NET=1) ;;
    *) echo "unknown variant $variant" >&2 && exit 2 ;;
  esac
  for r in 0 1; do
    ns="$tag-a"
    [ "$r" = 1 ] && ns="$tag-b"
    # shellcheck disable=SC2086
    ip netns exec "$ns" env CHORUS_RANK=$r CHORUS_NRANKS=2 NCCL_COMM_ID=10.215.0.1:$port \
      CHORUS_COMM_SECRET=0123456789abcdef "${extra[@]}" \
      "$build/perf/all_reduce_perf" $args >"$tmp/$variant.$round.$r" 2>&1 &
  done
  wait
  cp "$tmp/$variant.$round.0" "$tmp/$variant.$round"
}

variants=${VARIANTS:-socket plugin}
reversed=$(echo "$variants" | tr ' ' '\n' | tac | tr '\n' ' ')
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then order=$variants; else order=$reversed; fi
  for v in $order; do run "$v" "$i"; done
done
python3 - "$tmp" "$rounds" "$here/perf" $variants <<'PY'
import statistics, sys, os
tmp, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[3])
from perf_output import times
data = {v: [times(os.path.join(tmp, "%s.%d" % (v, r))) for r in range(1, rounds + 1)]
        for v in variants}
base = variants[0]
print("%10s  " % "size (B)" + "  ".join("%-40s" % (v + ", us per call") for v in variants) +
      "".join("  median %s/%s" % (v, base) for v in variants[1:]))
for size in sorted(data[base][0]):
    cols = {v: [d[size] for d in data[v]] for v in variants}
    line = "%10d  " % size + "  ".join("%-40s" % " ".join("%.1f" % x for x in cols[v])
                                        for v in variants)
    for v in variants[1:]:
        ratios = [b / a for a, b in zip(cols[base], cols[v]) if a > 0]
        line += "  %.2f" % statistics.median(ratios)
    print(line)
PY
