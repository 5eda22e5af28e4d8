# Simulated hosts for the perf scripts, sourced by them: network namespaces TAG-0 .. TAG-(H-1),
# each with eth0 at 10.216.0.(h+1)/24, joined by a bridge in namespace TAG-br, each host's link
# optionally shaped with tbf in both directions. Nothing is configured outside the namespaces.
# Needs root and iproute2.

# netns_hosts_up TAG HOSTS RATE   (RATE: a tbf rate such as 1gbit, or none)
netns_hosts_up() {
  local tag=$1 hosts=$2 rate=$3 h ns
  ip netns add "$tag-br"
  ip -n "$tag-br" link add br0 type bridge
  ip -n "$tag-br" link set br0 up
  for ((h = 0; h < hosts; h++)); do
    ns="$tag-$h"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "p$h" netns "$tag-br"
    ip -n "$ns" addr add "10.216.0.$((h + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$tag-br" link set "p$h" master br0
    ip -n "$tag-br" link set "p$h" up
    if [ "$rate" != none ]; then
      # Both directions of the host's link: its own egress, and the bridge port's towards it.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
      ip netns exec "$tag-br" tc qdisc add dev "p$h" root tbf rate "$rate" burst 256kb latency 50ms
    fi
  done
}

# netns_hosts_start TAG HOSTS RATE: the hosts, a work directory in $tmp, and a trap that removes
# both when the script exits.
netns_hosts_start() {
  NETNS_TAG=$1
  NETNS_HOSTS=$2
  tmp=$(mktemp -d)
  trap 'netns_hosts_down "$NETNS_TAG" "$NETNS_HOSTS"; rm -rf "$tmp"' EXIT
  netns_hosts_up "$1" "$2" "$3"
}

# netns_hosts_down TAG HOSTS
netns_hosts_down() {
  local tag=$1 hosts=$2 h
  for ((h = 0; h < hosts; h++)); do ip netns delete "$tag-$h" 2>/dev/null || true; done
  ip netns delete "$tag-br" 2>/dev/null || true
}
