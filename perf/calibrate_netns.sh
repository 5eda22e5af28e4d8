#!/bin/bash
# chorus-tune --calibrate with its TCP measurements between simulated hosts instead of over
# loopback: network namespaces TAG-0 .. TAG-3 joined by a bridge (perf/netns_hosts.sh), the
# tuner in the first, the other ranks of each TCP measurement started in the others through
# --net-launch; optionally every host's link shaped with tbf to RATE. The tuning file describes
# TCP through veth and a bridge on this machine's cores, the path of
# perf/simulation_check_netns.sh. Needs root and iproute2; nothing is configured outside the
# namespaces.
# usage: perf/calibrate_netns.sh OUTPUT [rate|none] [chorus-tune options]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
output=$(readlink -f "$1")
rate=${2:-none}
shift $(($# < 2 ? $# : 2))
tag="chorus-cal-$$"
# shellcheck source=perf/netns_hosts.sh
. "$here/perf/netns_hosts.sh"
netns_hosts_start "$tag" 4 "$rate"
ip netns exec "$tag-0" env CHORUS_SOCKET_IFNAME=eth0 "$build/tools/chorus-tune" --calibrate \
  -o "$output" --net-launch "ip netns exec $tag-%r" "$@"
