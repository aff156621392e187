# Shared by scripts/demo.sh and scripts/soak.sh (sourced, not run): the
# 4-node namespace topology and each node's mcastd configuration.
#
# Owns: the namespace and MAC layout of the scripts' clusters. The caller
# removes the namespaces (its own trap).

# cluster_topology PREFIX: a bridge br0 in namespace PREFIX-br and four
# nodes PREFIX-n1..n4, each with eth0 (MAC 02:6d:63:00:00:0i) on the bridge.
cluster_topology() {
    local P=$1 i ns
    ip netns add "$P-br"
    ip -n "$P-br" link add br0 type bridge
    ip -n "$P-br" link set br0 up
    for i in 1 2 3 4; do
        ns="$P-n$i"
        ip netns add "$ns"
        ip -n "$P-br" link add "p$i" type veth peer name eth0 netns "$ns"
        ip -n "$P-br" link set "p$i" master br0
        ip -n "$P-br" link set "p$i" up
        ip -n "$ns" link set eth0 address "02:6d:63:00:00:0$i"
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
    done
}

# node_config WORK I: node I's mcastd.toml on standard output: registry 1,
# the cluster key WORK/cluster.key, the socket WORK/nI.sock, the state in
# WORK, AF_XDP in SKB mode, the three other nodes as peers. The caller
# appends its [[group]]s.
node_config() {
    local WORK=$1 i=$2 j
    echo "node = $i"
    echo 'interface = "eth0"'
    echo 'registry = 1'
    echo "key_file = \"$WORK/cluster.key\""
    echo "socket = \"$WORK/n$i.sock\""
    echo "state_dir = \"$WORK\""
    echo 'datapath = "xdp"'
    echo 'xdp_mode = "skb"'
    echo 'log = "info"'
    for j in 1 2 3 4; do
        [ "$j" = "$i" ] && continue
        printf '[[peer]]\nnode = %d\nmac = "02:6d:63:00:00:0%d"\n' "$j" "$j"
    done
}
