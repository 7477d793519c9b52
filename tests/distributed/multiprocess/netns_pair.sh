# Two "hosts" on one machine, for scripts that source this file: netns_pair NS1 NS2 DEV1 DEV2 SUBNET makes network
# namespaces NS1 and NS2 joined by a veth pair (DEV1 in NS1 with SUBNET.1/24, DEV2 in NS2 with SUBNET.2/24), both
# ends and loopback up. Returns 1 after printing why on stderr when the machine does not allow it (no root,
# no namespaces, no veth). The caller deletes the namespaces (ip netns del), which removes the pair.
netns_pair() {
  local ns1=$1 ns2=$2 dev1=$3 dev2=$4 subnet=$5
  why() { echo "$*" >&2; return 1; }
  ip netns add "$ns1" 2> /dev/null || { why "cannot create a network namespace here (ip netns add failed)"; return 1; }
  ip netns add "$ns2" || { why "cannot create a second network namespace"; return 1; }
  ip link add "$dev1" type veth peer name "$dev2" || { why "cannot create a veth pair"; return 1; }
  ip link set "$dev1" netns "$ns1" && ip link set "$dev2" netns "$ns2" || { why "cannot move the veth ends"; return 1; }
  ip -n "$ns1" addr add "$subnet.1/24" dev "$dev1" && ip -n "$ns2" addr add "$subnet.2/24" dev "$dev2" || return 1
  ip -n "$ns1" link set "$dev1" up && ip -n "$ns2" link set "$dev2" up || return 1
  ip -n "$ns1" link set lo up && ip -n "$ns2" link set lo up
}
