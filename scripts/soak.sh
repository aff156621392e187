#!/usr/bin/env bash
# Soak: a 4-node mcastd cluster under traffic, loss, kills, pauses and client
# churn for MINUTES, with every subscriber's stream checked (issue 23 part 5).
# `scripts/soak.sh --help` says what it does and checks.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
. scripts/lib/cluster.sh

usage() {
    cat <<'EOF'
Usage: scripts/soak.sh [OPTIONS] MINUTES        (as root)

Runs a 4-node mcastd cluster for MINUTES (a number; 2 is a meaningful short
check, 60 the long soak) under continuous traffic and faults, checks every
message every subscriber received, and prints the verdict. Exits 0 when no
violation was found, 1 when one was (or the run itself failed), 130/143
when interrupted.

The cluster: four network namespaces on one bridge (the bridge in a fifth
namespace, the veth pairs created inside it: nothing touches this
machine's own interfaces), mcastd on each over AF_XDP (SKB mode), one
cluster key for all (`mcast keygen`, key_file in every configuration).
Three groups: soak-a (MAK, slow_subscriber = cutoff), soak-b (MAK,
slow_subscriber = hold), soak-c (the ACK baseline, cutoff).

Traffic (`mcast-bench soak client`, one process per client):
  publishers  two per group, on different nodes (soak-a on 1 and 2, soak-b
              on 3 and 4, soak-c on 1 and 3), each --rate messages/s of
              16 B to 16 KiB (some fragmented), numbered per publisher
              incarnation, with a checksum; every publisher also checks
              what it receives from the others;
  subscribers three per group, long-lived (one on a publishing node, so
              local delivery is checked too);
  churn       every ~4 s on average a short-lived client joins a random group
              on a random node for 2-20 s and leaves (half of them with an
              explicit Leave, half by disconnecting); one in five publishes.
A long-lived client whose daemon dies or cuts it off reconnects as a new
session (a new publisher incarnation, a fresh checker).

Faults, one at a time, every 1-3 s, from the start until CALM seconds before
the end (the order and timing are drawn from --seed):
  kill        SIGKILL the mcastd of a random node of --kill-nodes (default
              2,3,4), restart it 0.1-3 s later (some restarts come back
              before the failure detector's ~300 ms). Node 1 is spared by
              default so that one daemon runs the whole soak and its memory
              and descriptors show a trend; its roles (registry, agents)
              still move when a long pause gets it evicted;
  short pause SIGSTOP 30-150 ms then SIGCONT (below the detection bound:
              nobody should be evicted, nothing may be lost);
  long pause  SIGSTOP 0.4-2.5 s then SIGCONT (past the bound: the node is
              evicted and rejoins; also past the 1 s flush timeout);
  loss        set the segment's random loss to one of --loss (an nftables
              rule on the bridge dropping that fraction of the cluster's
              frames, every kind, both directions); the first value is set
              at the start;
  partition   cut a random node off the segment for 0.4-2 s while its
              daemon and clients keep running (an nftables rule on the
              bridge dropping every frame into or out of its port): the
              others evict it, it sees them all fail but, alone, takes no
              role over; when the cut heals it hears it was evicted and
              rejoins (--no-partitions: none; --overlap: 0.4-4 s, and
              the other faults go on meanwhile).

What is checked (docs/testing.md "Soak" and docs/mcastd.md "Late join",
"Membership events in the stream", "When a sender leaves"), per client
session, per publisher incarnation K on node N:
  - every message intact (checksum, length), of this group, tagged with N;
  - K's counters only grow, across every view change and this node's own
    eviction and rejoin: nothing repeated, nothing reordered;
  - no loss: after a message from K the next is the following counter,
    unless a membership event came between that names N gone or joined,
    or skipped (a flush's jump), or says this node was evicted; the first
    message of K after joining (or after such an event) may be any counter;
  - survivors agree: every subscriber that sees the event naming N gone
    has delivered the same last message of K (the flush), except where a
    daemon logged "flush timed out" (documented) or the subscriber's own
    node was evicted within 3 s (not a survivor);
  - liveness: at the end, every long-lived client that has been in its
    group for 10 s has received what each running publisher of the group
    had published 3 s before the end.

Printed at the end: messages published and checked, violations (must be
0), survivor agreements compared, stalls, membership events, kills,
restarts, pauses, loss changes and the frames the loss rule dropped,
client churn (joins, leaves), and each daemon's VmRSS and open file
descriptors (/proc/PID/status, /proc/PID/fd) sampled every minute, for the
first and the last 5 minutes; a restarted daemon is followed under its new
PID, marked "restarted".

Options:
  --rate N       messages per second per publisher (default 100)
  --loss LIST    loss fractions to draw from, comma-separated
                 (default 0.01,0,0.002,0.02; the first is set at the start)
  --calm S       seconds without faults or churn at the end (default 15)
  --kill-nodes L the nodes whose daemons may be killed, comma-separated
                 (default 2,3,4; 1,2,3,4 kills the registry's node too)
  --seed N       seed of the fault schedule (default: random, printed)
  --tree-fanout K  the MAK groups' ACKs climb a feedback tree of fanout K
                 (mcastd's tree_fanout, docs/protocol.md §3.4; default 0: none)
  --mode M       the MAK groups' mode: fifo (default), sequenced (every
                 member's messages through the group's root, one order;
                 docs/protocol.md §6.3), total (one order from timestamps,
                 §6.4) or broadcast (no multicast: each message spread over
                 the daemons' unicast links by `broadcast = "auto"`, §8)
  --commit       with --mode total: commit = true (a message delivered only
                 once every member has it, §6.4 "Commit")
  --commit-tree-from N  with --mode total: in views of N members or more
                 (mcastd's commit_tree_from; 2: always; default: mcastd's,
                 17, so never in this 4-node cluster) the reports climb a
                 tree (--commit), else the claims (§6.4 "Stamps over the
                 tree")
  --broadcast A  with --mode broadcast: the algorithm instead of auto
                 (rsbcast, mst, chain:K, def:K, scatter-collect, ...)
  --no-partitions  no partition faults (the schedule before 2026-11-29)
  --overlap      two faults at once: a partition lasts 0.4-4 s and the
                 kills, pauses and loss changes go on while it lasts, so
                 at times only two nodes are up on the majority's side
                 (no strict majority: no role moves until one heals)
  --sabotage     prove the checker: publisher pub-a-1 breaks the rules on
                 purpose every 500 messages (alternately skips a counter
                 and repeats one); the run must then FAIL with violations
  --keep         keep the work directory (configurations, daemon logs,
                 client records, events.log, samples) even when the run
                 passes; it is always kept when the run fails
  --no-build     do not build; use the binaries already built
  --bin DIR      where mcastd, mcast and mcast-bench are (default: the
                 release folder of $CARGO_TARGET_DIR, or target/)
  -h, --help     this text

Everything is torn down on exit, also on error, Ctrl-C or SIGTERM: the
clients, the daemons (SIGCONT first, then SIGTERM, then SIGKILL), the five
namespaces.
EOF
}

RATE=100
LOSSES="0.01,0,0.002,0.02"
CALM=15
SEED=""
KEEP=0
BUILD=1
BIN=""
MINUTES=""
KILL_NODES="2,3,4"
SABOTAGE=()
PARTITIONS=1
OVERLAP=0
CUT_PID=""
TREE_FANOUT=0
MODE=fifo
BROADCAST=""
COMMIT=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --rate) RATE="$2"; shift 2 ;;
        --loss) LOSSES="$2"; shift 2 ;;
        --calm) CALM="$2"; shift 2 ;;
        --seed) SEED="$2"; shift 2 ;;
        --tree-fanout) TREE_FANOUT="$2"; shift 2 ;;
        --mode) MODE="$2"; shift 2 ;;
        --broadcast) BROADCAST="$2"; shift 2 ;;
        --commit) COMMIT="commit = true"; shift ;;
        --commit-tree-from) TREE_FROM="$2"; shift 2 ;;
        --kill-nodes) KILL_NODES="$2"; shift 2 ;;
        --sabotage) SABOTAGE=(--sabotage 500); shift ;;
        --no-partitions) PARTITIONS=0; shift ;;
        --overlap) OVERLAP=1; shift ;;
        --keep) KEEP=1; shift ;;
        --no-build) BUILD=0; shift ;;
        --bin) BIN="$2"; BUILD=0; shift 2 ;;
        -*) echo "soak: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) [ -z "$MINUTES" ] || { echo "soak: one MINUTES only (see --help)" >&2; exit 2; }
           MINUTES="$1"; shift ;;
    esac
done
[ -n "$MINUTES" ] || { usage >&2; exit 2; }
TOTAL=$(awk -v m="$MINUTES" 'BEGIN { if (m + 0 > 0) printf "%d", m * 60; else print "bad" }')
[ "$TOTAL" != bad ] && [ "$TOTAL" -ge 20 ] || { echo "soak: MINUTES must be a number, at least 0.34 (20 s)" >&2; exit 2; }
[[ "$RATE" =~ ^[0-9]+$ ]] && [ "$RATE" -gt 0 ] || { echo "soak: --rate must be a positive integer" >&2; exit 2; }
[[ "$CALM" =~ ^[0-9]+$ ]] && [ "$CALM" -ge 5 ] && [ "$CALM" -lt "$TOTAL" ] \
    || { echo "soak: --calm must be an integer from 5 to less than the run" >&2; exit 2; }
case "$MODE" in fifo | sequenced | total | broadcast) ;; *) echo "soak: --mode is fifo, sequenced, total or broadcast" >&2; exit 2 ;; esac
[ "$OVERLAP" = 0 ] || [ "$PARTITIONS" = 1 ] || { echo "soak: --overlap needs partitions (drop --no-partitions)" >&2; exit 2; }
[ -z "$BROADCAST" ] || [ "$MODE" = broadcast ] || { echo "soak: --broadcast goes with --mode broadcast" >&2; exit 2; }
[ -z "$COMMIT" ] || [ "$MODE" = total ] || { echo "soak: --commit goes with --mode total" >&2; exit 2; }
if [ -n "${TREE_FROM:-}" ]; then
    [ "$MODE" = total ] || { echo "soak: --commit-tree-from goes with --mode total" >&2; exit 2; }
    [[ "$TREE_FROM" =~ ^[0-9]+$ ]] && [ "$TREE_FROM" != 1 ] || { echo "soak: --commit-tree-from is 0 (never) or at least 2" >&2; exit 2; }
    COMMIT="$COMMIT
commit_tree_from = $TREE_FROM"
fi
[[ "$BROADCAST" =~ ^[a-z0-9:-]*$ ]] || { echo "soak: --broadcast takes an algorithm name such as def:4" >&2; exit 2; }
IFS=, read -r -a LOSS <<< "$LOSSES"
for l in "${LOSS[@]}"; do
    awk -v l="$l" 'BEGIN { exit !(l ~ /^[0-9.]+$/ && l + 0 >= 0 && l + 0 < 1) }' \
        || { echo "soak: --loss values are fractions from 0 to below 1" >&2; exit 2; }
done
IFS=, read -r -a KILLABLE <<< "$KILL_NODES"
for n in "${KILLABLE[@]}"; do
    [[ "$n" =~ ^[1-4]$ ]] || { echo "soak: --kill-nodes takes nodes 1 to 4, comma-separated" >&2; exit 2; }
done
if [ "$(id -u)" -ne 0 ]; then
    echo "soak: needs root (network namespaces, XDP): sudo $0 $*" >&2
    exit 1
fi
[ -n "$SEED" ] || SEED=$((RANDOM * 32768 + RANDOM))
RANDOM=$SEED

./scripts/setup.sh
if [ -z "$BIN" ]; then
    BIN="${CARGO_TARGET_DIR:-$PWD/target}/release"
fi
if [ "$BUILD" = 1 ]; then
    echo "soak: building mcastd, mcast and mcast-bench (release) into $BIN"
    cargo build --release -q -p mcast-cli -p mcast-bench
fi
for b in mcastd mcast mcast-bench; do
    [ -x "$BIN/$b" ] || { echo "soak: $BIN/$b is missing (build, or --bin DIR)" >&2; exit 1; }
done

P="mcsoak$$"
WORK="$(mktemp -d /tmp/mcast-soak.XXXXXX)"
mkdir -p "$WORK/logs" "$WORK/clients"
EVENTS="$WORK/events.log"
declare -a DPID=()
declare -a CPIDS=()   # long-lived clients
declare -a CHPIDS=()  # churn clients still running
STATUS=1

# ---- teardown: always, once ----
CLEANED=0
cleanup() {
    [ "$CLEANED" = 1 ] && return
    CLEANED=1
    trap '' INT TERM
    local pid
    [ -z "$CUT_PID" ] || kill -TERM "$CUT_PID" 2>/dev/null || true
    for pid in "${CHPIDS[@]}" "${CPIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        local alive=0
        for pid in "${CHPIDS[@]}" "${CPIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${CHPIDS[@]}" "${CPIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${DPID[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        local alive=0
        for pid in "${DPID[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${DPID[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for ns in "$P-n1" "$P-n2" "$P-n3" "$P-n4" "$P-br"; do
        ip netns del "$ns" 2>/dev/null || true
    done
    if [ "$KEEP" = 1 ] || [ "$STATUS" = 1 ]; then
        echo "soak: work directory kept: $WORK (logs/, clients/, events.log, samples, stat-n*.json)" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'echo "soak: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
trap 'echo "soak: interrupted (SIGINT): tearing down" >&2; STATUS=130; exit 130' INT
trap 'echo "soak: interrupted (SIGTERM): tearing down" >&2; STATUS=143; exit 143' TERM

# Sleeps in the background so that a signal's trap runs at once.
nap() { sleep "$1" & wait $! || true; }
# A random number of milliseconds in [LO, HI], as seconds.
rand_s() { local ms=$(($1 + RANDOM % ($2 - $1 + 1))); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
T0=$(date +%s.%N)
elapsed() { awk -v t0="$T0" -v t="$(date +%s.%N)" 'BEGIN { printf "%.1f", t - t0 }'; }
event() { echo "+$(elapsed)s $*" >> "$EVENTS"; }

# ---- the network ----
cluster_topology "$P"

# Loss: a bridge-family nftables rule dropping a fraction of the cluster's
# EtherType (0x88b5) in the forward hook, so every frame copy between nodes
# is subject to it. DROPPED sums the rule's counter over its lifetimes.
DROPPED=0
LOSS_NOW=0
LOSS_CHANGES=0
loss_count() {
    { ip netns exec "$P-br" nft list table bridge soakloss 2>/dev/null || true; } \
        | awk '/packets/ { for (i = 1; i < NF; i++) if ($i == "packets") { print $(i + 1); exit } }'
}
set_loss() {
    local n
    n=$(loss_count)
    DROPPED=$((DROPPED + ${n:-0}))
    ip netns exec "$P-br" nft delete table bridge soakloss 2>/dev/null || true
    LOSS_NOW="$1"
    local per10k
    per10k=$(awk -v l="$1" 'BEGIN { printf "%d", l * 10000 + 0.5 }')
    [ "$per10k" -gt 0 ] || return 0
    ip netns exec "$P-br" nft -f - <<EOF
table bridge soakloss {
  chain forward {
    type filter hook forward priority 0; policy accept;
    ether type 0x88b5 numgen random mod 10000 < $per10k counter drop
  }
}
EOF
}

# Partition: node N's port cut off the bridge, every frame into or out of
# it dropped (another table, so the loss rule is untouched); each heal
# appends the frames it dropped to WORK/cut_dropped (a heal may run in the
# background, --overlap).
cut_node() {
    ip netns exec "$P-br" nft -f - <<EOF
table bridge soakcut {
  chain forward {
    type filter hook forward priority -1; policy accept;
    iifname "p$1" counter drop
    oifname "p$1" counter drop
  }
}
EOF
}
heal_cut() {
    local n
    n=$({ ip netns exec "$P-br" nft list table bridge soakcut 2>/dev/null || true; } \
        | awk '/packets/ { for (i = 1; i < NF; i++) if ($i == "packets") s += $(i + 1) } END { print s + 0 }')
    echo "$n" >> "$WORK/cut_dropped"
    ip netns exec "$P-br" nft delete table bridge soakcut 2>/dev/null || true
}

# ---- the daemons ----
"$BIN/mcast" keygen "$WORK/cluster.key" > /dev/null
for i in 1 2 3 4; do
    {
        node_config "$WORK" "$i"
        printf '[[group]]\nname = "soak-a"\ntree_fanout = %d\nmode = "%s"\n' "$TREE_FANOUT" "$MODE"
        [ -z "$BROADCAST" ] || printf 'broadcast = "%s"\n' "$BROADCAST"
        [ -z "$COMMIT" ] || printf '%s\n' "$COMMIT"
        printf '[[group]]\nname = "soak-b"\nslow_subscriber = "hold"\ntree_fanout = %d\nmode = "%s"\n' "$TREE_FANOUT" "$MODE"
        [ -z "$BROADCAST" ] || printf 'broadcast = "%s"\n' "$BROADCAST"
        [ -z "$COMMIT" ] || printf '%s\n' "$COMMIT"
        printf '[[group]]\nname = "soak-c"\nalgorithm = "ack"\n'
    } > "$WORK/n$i.toml"
done

start_daemon() {
    local i=$1 before
    before=$(grep -c 'msg=ready' "$WORK/logs/n$i.log" 2>/dev/null || true)
    ip netns exec "$P-n$i" "$BIN/mcastd" --config "$WORK/n$i.toml" 2>> "$WORK/logs/n$i.log" &
    DPID[$i]=$!
    echo "$(elapsed) $i ${DPID[$i]}" >> "$WORK/pids"
    for _ in $(seq 1 400); do
        [ "$(grep -c 'msg=ready' "$WORK/logs/n$i.log" 2>/dev/null || true)" -gt "${before:-0}" ] && return 0
        kill -0 "${DPID[$i]}" 2>/dev/null || break
        sleep 0.05
    done
    echo "soak: mcastd on node $i did not start; its log:" >&2
    tail -n 20 "$WORK/logs/n$i.log" >&2
    exit 1
}
for i in 1 2 3 4; do start_daemon "$i"; done
echo "soak: 4 daemons ready ($(grep -o 'transport=[a-z_]*' "$WORK/logs/n1.log" | head -n 1)); seed $SEED; work directory $WORK"

# ---- the clients ----
start_client() {
    local name=$1 node=$2 group=$3
    shift 3
    ip netns exec "$P-n$node" "$BIN/mcast-bench" soak client --socket "$WORK/n$node.sock" \
        --group "$group" --node "$node" --name "$name" --out "$WORK/clients/$name.jsonl" \
        --seed "$RANDOM" "$@" 2>> "$WORK/clients/$name.err" &
    LAST_CLIENT=$!
}
set_loss "${LOSS[0]}"
event "loss ${LOSS[0]}"
for spec in a:1:11 a:2:12 b:3:23 b:4:24 c:1:31 c:3:33; do
    IFS=: read -r g n id <<< "$spec"
    extra=()
    [ "$g$n" = a1 ] && extra=("${SABOTAGE[@]}")
    start_client "pub-$g-$n" "$n" "soak-$g" --publish "$id" --rate "$RATE" "${extra[@]}"
    CPIDS+=("$LAST_CLIENT")
done
for spec in a:3 a:4 a:1 b:1 b:2 b:4 c:2 c:4 c:3; do
    IFS=: read -r g n <<< "$spec"
    start_client "sub-$g-$n" "$n" "soak-$g"
    CPIDS+=("$LAST_CLIENT")
done

# ---- resource samples: every minute ----
sample() {
    local label=$1 i pid rss fds cl
    for i in 1 2 3 4; do
        pid=${DPID[$i]}
        rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo "?")
        fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
        # Clients connected then (each holds descriptors in the daemon),
        # not counting the connection that asks.
        cl=$(timeout 5 "$BIN/mcast" --socket "$WORK/n$i.sock" stat 2>/dev/null \
            | awk '/^clients / { print $2 - 1; exit }' || true)
        echo "$label $i $pid ${rss:-?} $fds ${cl:-?}" >> "$WORK/samples"
    done
}
nap 2
sample 0
NEXT_SAMPLE=60

# ---- faults and churn ----
KILLS=0 RESTARTS=0 SHORT=0 LONG=0 CUTS=0 CHURN=0 CHURN_PUB=0
START=$SECONDS
FAULT_END=$((START + TOTAL - CALM))
END=$((START + TOTAL))
maybe_sample() {
    if [ $((SECONDS - START)) -ge "$NEXT_SAMPLE" ]; then
        sample $((NEXT_SAMPLE / 60))
        NEXT_SAMPLE=$((NEXT_SAMPLE + 60))
    fi
}
reap_churn() {
    local keep=() pid
    for pid in "${CHPIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then keep+=("$pid"); else wait "$pid" 2>/dev/null || true; fi
    done
    CHPIDS=("${keep[@]}")
}
echo "soak: $MINUTES min: traffic, loss, kills, pauses and churn for $((TOTAL - CALM)) s, then $CALM s calm"
while [ "$SECONDS" -lt "$FAULT_END" ]; do
    maybe_sample
    nap "$(rand_s 1000 3000)"
    reap_churn
    if [ $((RANDOM % 100)) -lt 50 ]; then
        CHURN=$((CHURN + 1))
        n=$((RANDOM % 4 + 1))
        g=$(printf '%s' abc | cut -c $((RANDOM % 3 + 1)))
        args=(--duration "$(rand_s 2000 20000)")
        [ $((RANDOM % 2)) = 0 ] && args+=(--leave)
        if [ $((RANDOM % 5)) = 0 ]; then
            args+=(--publish $((1000 + CHURN)) --rate "$RATE")
            CHURN_PUB=$((CHURN_PUB + 1))
        fi
        start_client "churn-$CHURN" "$n" "soak-$g" "${args[@]}"
        CHPIDS+=("$LAST_CLIENT")
        event "churn client $CHURN joins soak-$g on node $n (${args[*]})"
    fi
    [ "$SECONDS" -lt "$FAULT_END" ] || break
    r=$((RANDOM % 100))
    n=$((RANDOM % 4 + 1))
    pid=${DPID[$n]}
    if [ "$r" -lt 15 ]; then
        n=${KILLABLE[$((RANDOM % ${#KILLABLE[@]}))]}
        pid=${DPID[$n]}
        down=$(rand_s 100 3000)
        event "kill node $n (pid $pid), restart after ${down}s"
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null || true
        KILLS=$((KILLS + 1))
        nap "$down"
        start_daemon "$n"
        RESTARTS=$((RESTARTS + 1))
        event "node $n restarted (pid ${DPID[$n]})"
    elif [ "$r" -lt 35 ]; then
        d=$(rand_s 30 150)
        event "pause node $n for ${d}s (short)"
        kill -STOP "$pid"; nap "$d"; kill -CONT "$pid"
        SHORT=$((SHORT + 1))
    elif [ "$r" -lt 55 ]; then
        d=$(rand_s 400 2500)
        event "pause node $n for ${d}s (long)"
        kill -STOP "$pid"; nap "$d"; kill -CONT "$pid"
        LONG=$((LONG + 1))
    elif [ "$r" -lt 70 ]; then
        l=${LOSS[$((RANDOM % ${#LOSS[@]}))]}
        set_loss "$l"
        LOSS_CHANGES=$((LOSS_CHANGES + 1))
        event "loss $l"
    elif [ "$r" -lt 80 ] && [ "$PARTITIONS" = 1 ] && [ "$OVERLAP" = 0 ]; then
        d=$(rand_s 400 2000)
        event "partition: node $n cut off the segment for ${d}s"
        cut_node "$n"; nap "$d"; heal_cut
        event "partition of node $n healed"
        CUTS=$((CUTS + 1))
    elif [ "$r" -lt 80 ] && [ "$OVERLAP" = 1 ]; then
        # One partition at a time, healed in the background while the
        # loop goes on to the next faults.
        if [ -z "$CUT_PID" ] || ! kill -0 "$CUT_PID" 2>/dev/null; then
            [ -z "$CUT_PID" ] || wait "$CUT_PID" 2>/dev/null || true
            d=$(rand_s 400 4000)
            event "partition: node $n cut off the segment for ${d}s (overlapping)"
            cut_node "$n"
            ( nap "$d"; heal_cut; event "partition of node $n healed" ) &
            CUT_PID=$!
            CUTS=$((CUTS + 1))
        fi
    fi
done
[ -z "$CUT_PID" ] || wait "$CUT_PID" 2>/dev/null || true
CUT_PID=""
event "calm: no more faults or churn"
echo "soak: calm for the last $CALM s"
while [ "$SECONDS" -lt "$END" ]; do
    maybe_sample
    nap 1
done
sample end
# Each daemon's counters at the end, kept in the work directory (a stalled
# stream's sender shows there why: its window, ACK waits, stalls).
for i in 1 2 3 4; do
    timeout 5 "$BIN/mcast" --socket "$WORK/n$i.sock" stat --json > "$WORK/stat-n$i.json" 2>&1 || true
done
n=$(loss_count)
DROPPED=$((DROPPED + ${n:-0}))

# ---- stop the clients (they write their last records), then the daemons ----
for pid in "${CHPIDS[@]}" "${CPIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${CHPIDS[@]}" "${CPIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
CHPIDS=() CPIDS=()
for pid in "${DPID[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${DPID[@]}"; do wait "$pid" 2>/dev/null || true; done
DPID=()

# ---- the verdict ----
echo
COMMIT_DESC=$(printf '%s' "$COMMIT" | tr '\n' ';')
echo "=== soak: $MINUTES min, seed $SEED, mode $MODE${BROADCAST:+ ($BROADCAST)}${COMMIT_DESC:+ ($COMMIT_DESC)}, rate $RATE msg/s per publisher, loss drawn from $LOSSES"
CHECK=0
"$BIN/mcast-bench" soak check "$WORK" > "$WORK/check.txt" || CHECK=$?
cat "$WORK/check.txt"
echo "faults: $KILLS node kills, $RESTARTS restarts, $SHORT short pauses (30-150 ms), $LONG long pauses (0.4-2.5 s), $LOSS_CHANGES loss changes; $DROPPED frames dropped by the loss rule; $CUTS partitions ($([ "$OVERLAP" = 1 ] && echo '0.4-4 s, overlapping' || echo '0.4-2 s'), $(awk '{ s += $1 } END { print s + 0 }' "$WORK/cut_dropped" 2>/dev/null || echo 0) frames dropped)"
RECONNECTS=$(cat "$WORK"/clients/pub-*.jsonl "$WORK"/clients/sub-*.jsonl 2>/dev/null | grep -c '"t":"session"' || true)
echo "churn:  $CHURN short-lived clients joined and left ($CHURN_PUB of them publishing); the 15 long-lived clients started $((RECONNECTS - 15)) new sessions (after their daemon died or cut them off)"
echo "daemons (VmRSS, open fds, clients connected; sampled every minute; first and last 5 minutes):"
awk '
    { label[NR] = $1; node[NR] = $2; pid[NR] = $3; rss[NR] = $4; fds[NR] = $5; cl[NR] = $6 }
    END {
        n = 0
        for (r = 1; r <= NR; r++) if (!(label[r] in seen)) { seen[label[r]] = ++n; order[n] = label[r] }
        printf "  %-6s", "minute"
        for (i = 1; i <= 4; i++) printf "  %-34s", "node " i " (pid: RSS MiB, fds, clients)"
        printf "\n"
        for (k = 1; k <= n; k++) {
            if (n > 10 && k == 6) printf "  ...\n"
            if (n > 10 && k > 5 && k <= n - 5) continue
            printf "  %-6s", order[k]
            for (i = 1; i <= 4; i++) {
                for (r = 1; r <= NR; r++) if (label[r] == order[k] && node[r] == i) break
                mark = ""
                if ((i in lastpid) && lastpid[i] != pid[r]) mark = " restarted"
                lastpid[i] = pid[r]
                cell = sprintf("%s: %.1f, %s, %s%s", pid[r], rss[r] / 1024, fds[r], cl[r], mark)
                printf "  %-34s", cell
            }
            printf "\n"
        }
    }' "$WORK/samples"
echo "  (\"restarted\": a new PID since the row above; the events are in events.log of the work directory)"
if [ "$CHECK" = 0 ]; then
    STATUS=0
    echo "soak: PASS"
else
    STATUS=1
    echo "soak: FAIL (see the violations above; client records in $WORK/clients, daemon logs in $WORK/logs)"
fi
exit $STATUS
