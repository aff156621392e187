#!/usr/bin/env bash
# An A/B of two commits on this noisy host: builds each (release, in a git
# worktree of its own under ${AB_DIR:-/tmp}), then runs the same mcast-bench
# command RUNS times, alternating A and B, so both see the same minutes.
#
#   scripts/ab.sh REV_A REV_B RUNS -- BENCH_ARGS...
#   scripts/ab.sh 26352e3 6a00347 5 -- hops --receivers 1,4 --repeat 1
#
# As root for the namespace benches (path, hops, xdp...). Prints each run's
# output under "=== REV run I"; docs/benchmarks.md says which A/Bs used it.
set -euo pipefail
if [ $# -lt 4 ] || [ "$4" != "--" ]; then
  echo "usage: $0 REV_A REV_B RUNS -- BENCH_ARGS..." >&2
  exit 2
fi
a=$1 b=$2 runs=$3
shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
bench() { echo "${AB_DIR:-/tmp}/mcast-ab-$(git -C "$root" rev-parse --short "$1")"; }
for rev in "$a" "$b"; do
  dir=$(bench "$rev")
  [ -d "$dir" ] || git -C "$root" worktree add --detach "$dir" "$rev" >/dev/null
  (cd "$dir" && cargo build --release -q -p mcast-cli -p mcast-bench)
done
for i in $(seq 1 "$runs"); do
  for rev in "$a" "$b"; do
    echo "=== $rev run $i"
    "$(bench "$rev")/target/release/mcast-bench" "$@"
  done
done
