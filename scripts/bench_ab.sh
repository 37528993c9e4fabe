#!/usr/bin/env bash
# A/B of `seedsweep bench` between two commits, in one run on one machine, alternating the binaries so that
# load changes hit both alike. Prints each repeat's one-thread "fast kernels" figure and the ratio of the best.
# Usage: scripts/bench_ab.sh BASE_COMMIT [NEW_COMMIT=HEAD] [REPEATS=6] [SEEDS=1000] [-- extra bench args]
# Builds each commit in a throwaway worktree under ${TMPDIR:-/tmp} (reusing this checkout's target/ as a seed).
set -euo pipefail
base=${1:?usage: scripts/bench_ab.sh BASE_COMMIT [NEW_COMMIT] [REPEATS] [SEEDS] [-- bench args]}
new=${2:-HEAD}; reps=${3:-6}; seeds=${4:-1000}
shift $(( $# < 4 ? $# : 4 )); [ "${1:-}" = "--" ] && shift
root=$(git rev-parse --show-toplevel); tmp=${TMPDIR:-/tmp}/seedsweep-ab.$$
mkdir -p "$tmp"; trap 'for w in a b; do git -C "$root" worktree remove --force "$tmp/$w" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
build() { # commit dir
  git -C "$root" worktree add -q --detach "$tmp/$2" "$1"
  [ -d "$root/target" ] && cp -r "$root/target" "$tmp/$2/" 2>/dev/null || true
  (cd "$tmp/$2" && cargo build -q --release --bin seedsweep) && cp "$tmp/$2/target/release/seedsweep" "$tmp/$2.bin"
}
build "$base" a; build "$new" b
best_a=0; best_b=0
for i in $(seq "$reps"); do
  a=$("$tmp/a.bin" bench --seeds "$seeds" "$@" 2>&1 | sed -n 's/.*fast kernels, 1 thread: *\([0-9]*\) seed-runs.*/\1/p')
  b=$("$tmp/b.bin" bench --seeds "$seeds" "$@" 2>&1 | sed -n 's/.*fast kernels, 1 thread: *\([0-9]*\) seed-runs.*/\1/p')
  echo "repeat $i: $base $a seed-runs/s, $new $b seed-runs/s"
  (( a > best_a )) && best_a=$a; (( b > best_b )) && best_b=$b
done
awk -v a="$best_a" -v b="$best_b" -v x="$base" -v y="$new" 'BEGIN { printf "best of each: %s %d, %s %d seed-runs/s on 1 thread: new/base = %.3f\n", x, a, y, b, b / a }'
