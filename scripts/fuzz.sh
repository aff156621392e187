#!/usr/bin/env bash
# One AFL++ campaign against one fuzz target of mcast-fuzz (issue 23).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS="frame nak_ranges group_message link_message ipc_request ipc_reply ring_reader auth_trailer batch_record"

usage() {
    cat <<EOF
Usage: scripts/fuzz.sh [--fresh] TARGET SECONDS
       scripts/fuzz.sh --list

Fuzzes TARGET for SECONDS with AFL++ through cargo-afl (stable Rust), then
prints the executions, paths (corpus entries found) and crashes, and exits
1 if there was any crash.

Targets (fuzz/src/lib.rs says what each asserts):
  $TARGETS

What it does:
  1. installs cargo-afl if it is missing (cargo install --locked cargo-afl,
     from crates.io) and builds AFL++'s runtime once (cargo afl config --build;
     needs make and a C compiler, which setup.sh's clang provides);
  2. builds the harness: cargo afl build --release --features afl -p mcast-fuzz --bin TARGET
     (instrumented, with debug assertions and overflow checks; it shares
     target/release with ordinary release builds, so the next plain
     'cargo build --release' recompiles);
  3. runs: cargo afl fuzz -i fuzz/corpus/TARGET -o target/fuzz/TARGET -V SECONDS target/release/TARGET
     A second run of the same target resumes from target/fuzz/TARGET
     (AFL_AUTORESUME); --fresh deletes it first.

With CARGO_TARGET_DIR set, its directory stands for target/ throughout.

Found crashes are in target/fuzz/TARGET/default/crashes/. Replay one with
  target/release/TARGET < FILE
minimise it with
  cargo afl tmin -i FILE -o min target/release/TARGET
then fix the parser, add a unit test with those bytes next to it, and copy
the input to fuzz/corpus/TARGET/regression-NAME (tests/smoke.rs replays the
whole corpus in every cargo test).

Root is not needed. The script changes no system setting: when
/proc/sys/kernel/core_pattern pipes core dumps to a program it sets
AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 (crashes are still detected, by the
harness's abort), and it always sets AFL_SKIP_CPUFREQ=1 (the CPU governor is
left alone). AFL_NO_UI=1 when the output is not a terminal.

The smoke run of every target (each corpus plus 20,000 seeded mutations) is
part of 'cargo test': cargo test -p mcast-fuzz --test smoke
EOF
}

die() {
    echo "fuzz.sh: $*" >&2
    exit 2
}

fresh=0
case "${1:-}" in
    -h | --help)
        usage
        exit 0
        ;;
    --list)
        tr ' ' '\n' <<<"$TARGETS"
        exit 0
        ;;
    --fresh)
        fresh=1
        shift
        ;;
esac
[ $# -eq 2 ] || {
    usage >&2
    exit 2
}
target=$1
seconds=$2
[[ " $TARGETS " == *" $target "* ]] || die "unknown target '$target'; one of: $TARGETS"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive whole number, not '$seconds'"

command -v cargo >/dev/null || die "cargo is not on PATH (install Rust stable first)"
# The normal target directory, or CARGO_TARGET_DIR's.
tdir=${CARGO_TARGET_DIR:-target}
mkdir -p "$tdir" 2>/dev/null && [ -w "$tdir" ] ||
    die "cannot write $tdir as $(id -un): run from a checkout you own, or set CARGO_TARGET_DIR"

if ! cargo afl --version >/dev/null 2>&1; then
    bin="${CARGO_HOME:-$HOME/.cargo}/bin"
    mkdir -p "$bin" 2>/dev/null && [ -w "$bin" ] ||
        die "cargo-afl is missing and $bin is not writable as $(id -un); install it as that directory's owner: cargo install --locked cargo-afl"
    echo "fuzz.sh: installing cargo-afl from crates.io" >&2
    cargo install --locked cargo-afl
fi
# AFL++'s runtime, once per Rust toolchain; "already built" is fine.
if ! out=$(cargo afl config --build 2>&1); then
    grep -q "already built" <<<"$out" || {
        echo "$out" >&2
        die "cargo afl config --build failed (it needs make and a C compiler)"
    }
fi

echo "fuzz.sh: building the $target harness" >&2
cargo afl build --release --features afl -p mcast-fuzz --bin "$target"

out_dir="$tdir/fuzz/$target"
[ "$fresh" = 1 ] && rm -rf "$out_dir"
mkdir -p "$out_dir"
export AFL_SKIP_CPUFREQ=1 AFL_AUTORESUME=1
if [[ "$(cat /proc/sys/kernel/core_pattern 2>/dev/null)" == "|"* ]]; then
    export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
fi
[ -t 1 ] || export AFL_NO_UI=1

echo "fuzz.sh: fuzzing $target for $seconds s into $out_dir" >&2
cargo afl fuzz -i "fuzz/corpus/$target" -o "$out_dir" -V "$seconds" "$tdir/release/$target" ||
    die "afl-fuzz failed (its message is above)"

stats="$out_dir/default/fuzzer_stats"
[ -f "$stats" ] || die "no $stats: afl-fuzz did not run"
stat() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
crashes=$(stat saved_crashes)
echo "target:     $target"
echo "seconds:    $(stat run_time)"
echo "executions: $(stat execs_done) ($(stat execs_per_sec)/s)"
echo "paths:      $(stat corpus_count) (from $(stat corpus_found) found)"
echo "crashes:    $crashes"
echo "hangs:      $(stat saved_hangs)"
if [ "${crashes:-0}" != 0 ]; then
    echo "crashing inputs:"
    ls "$out_dir/default/crashes/" | grep -v README | sed "s|^|  $out_dir/default/crashes/|"
    exit 1
fi
