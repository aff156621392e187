#!/usr/bin/env bash
# The main demo: a 4-node cluster on this machine, in network namespaces.
#
#   ./scripts/demo.sh [FILE]        (as root; with sudo where root is not the user: sudo ./scripts/demo.sh)
#
# Installs what it needs (clang, llvm, libbpf-dev, iproute2), builds mcastd
# and mcast, creates four namespaces on one bridge (veth pairs made inside a
# fifth namespace: nothing touches this machine's own interfaces), starts
# mcastd in each (AF_XDP, SKB mode on veth), pipes FILE (default: 32 MiB of
# random bytes) through `mcast send` on node 1 to `mcast recv` on nodes 2-4,
# checks every copy byte for byte, prints each daemon's counters and the
# latency summary, and tears everything down (also on error or Ctrl-C).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh
if [ "$(id -u)" -ne 0 ]; then
    echo "demo: needs root (network namespaces, XDP): run it as root, e.g. sudo $0 $*" >&2
    exit 1
fi
./scripts/setup.sh
echo "demo: building mcastd and mcast (release)"
cargo build --release -q -p mcast-cli
BIN="$PWD/target/release"

P="mcdemo$$"
WORK="$(mktemp -d /tmp/mcast-demo.XXXXXX)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "$P-br" "$P-n1" "$P-n2" "$P-n3" "$P-n4"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

INPUT="${1:-}"
if [ -z "$INPUT" ]; then
    INPUT="$WORK/input.bin"
    head -c $((32 << 20)) /dev/urandom > "$INPUT"
fi
echo "demo: sending $(stat -c %s "$INPUT") bytes from $INPUT"

# The network: a bridge in its own namespace, one veth per node.
cluster_topology "$P"

# One cluster key for every node (each node would get its own copy).
"$BIN/mcast" keygen "$WORK/cluster.key" > /dev/null

# One mcastd per node.
for i in 1 2 3 4; do
    node_config "$WORK" "$i" > "$WORK/n$i.toml"
    ip netns exec "$P-n$i" "$BIN/mcastd" --config "$WORK/n$i.toml" 2> "$WORK/n$i.log" &
    PIDS+=($!)
done
for i in 1 2 3 4; do
    for _ in $(seq 1 200); do
        grep -q 'msg=ready' "$WORK/n$i.log" 2>/dev/null && break
        sleep 0.05
    done
    grep -q 'msg=ready' "$WORK/n$i.log" || { echo "demo: mcastd $i did not start:" >&2; cat "$WORK/n$i.log" >&2; exit 1; }
done
echo "demo: 4 daemons ready ($(grep -o 'transport=[a-z_]*' "$WORK/n1.log"))"

# Three receivers, then the sender once the group has all four nodes.
RPIDS=()
for i in 2 3 4; do
    "$BIN/mcast" --socket "$WORK/n$i.sock" recv demo --stamp --announce \
        --idle-timeout 30 --output "$WORK/out$i.bin" 2> "$WORK/recv$i.log" &
    RPIDS+=($!)
done
for i in 2 3 4; do
    for _ in $(seq 1 200); do
        grep -q 'joined' "$WORK/recv$i.log" 2>/dev/null && break
        sleep 0.05
    done
done
"$BIN/mcast" --socket "$WORK/n1.sock" send demo "$INPUT" --stamp --wait-nodes 4
for pid in "${RPIDS[@]}"; do wait "$pid"; done

# Latency at a steady rate (the file above is a bulk transfer: its latencies
# include the time each chunk queued behind the rest of the file).
head -c $((20000 * 64)) /dev/urandom > "$WORK/small.bin"
LPIDS=()
for i in 2 3 4; do
    "$BIN/mcast" --socket "$WORK/n$i.sock" recv latency --stamp --announce \
        --idle-timeout 30 --output /dev/null 2> "$WORK/lat$i.log" &
    LPIDS+=($!)
done
for i in 2 3 4; do
    for _ in $(seq 1 200); do
        grep -q 'joined' "$WORK/lat$i.log" 2>/dev/null && break
        sleep 0.05
    done
done
"$BIN/mcast" --socket "$WORK/n1.sock" send latency "$WORK/small.bin" --stamp --wait-nodes 4 \
    --chunk 64 --rate 10000
for pid in "${LPIDS[@]}"; do wait "$pid"; done

status=0
for i in 2 3 4; do
    if cmp -s "$INPUT" "$WORK/out$i.bin"; then
        echo "demo: node $i: identical copy ($(stat -c %s "$WORK/out$i.bin") bytes); bulk-transfer $(grep -o 'latency n=.*' "$WORK/recv$i.log")"
    else
        echo "demo: node $i: COPY DIFFERS" >&2
        cat "$WORK/recv$i.log" >&2
        status=1
    fi
done
for i in 2 3 4; do
    echo "demo: node $i at 10,000 msg/s x 64 B: $(grep -o 'latency n=.*' "$WORK/lat$i.log")"
done
for i in 1 2 3 4; do
    echo "--- mcast stat on node $i"
    "$BIN/mcast" --socket "$WORK/n$i.sock" stat
done
exit $status
