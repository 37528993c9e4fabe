#!/usr/bin/env bash
# The standard command set (the README's commands, every built-in under `--mutants all`,
# shards and merge, kill-then-resume, Parquet, summary-only, report, size, repro, list, check,
# the CI verdicts, explain, scale) run with one binary into one folder, so that two builds
# can be compared with `diff -r`:
#
#   scripts/golden_outputs.sh OLD_BIN /tmp/gold-old
#   scripts/golden_outputs.sh NEW_BIN /tmp/gold-new
#   diff -r /tmp/gold-old /tmp/gold-new
#   python3 scripts/golden_compare.py /tmp/gold-old /tmp/gold-new   # across the mutant change
#
# Every command runs inside OUTDIR/work with relative paths, so the paths printed on stderr
# are the same in both folders. Each command's stdout, stderr and exit code are kept as
# NAME.stdout, NAME.stderr, NAME.rc next to its output folder. Nothing written here depends
# on the run (no clock, no pid, no absolute path); the kill moment of the resume check does,
# but the finished folder must not, so only the finished folder is kept (and the resumed
# folder is also compared with an uninterrupted one, in resume-*.same).
#
# Usage: scripts/golden_outputs.sh BIN OUTDIR [THREADS=2]
set -uo pipefail
bin=$(realpath "${1:?usage: scripts/golden_outputs.sh BIN OUTDIR [THREADS]}")
out=${2:?usage: scripts/golden_outputs.sh BIN OUTDIR [THREADS]}
threads=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out"
mkdir -p "$out/work"
out=$(realpath "$out")
cd "$out/work"
# `check configs/...` prints the path as given: the same relative path in every run.
ln -s "$root/configs" configs

# run NAME ARGS...: the binary's stdout, stderr and exit code under NAME.
run() {
  local name=$1
  shift
  "$bin" "$@" >"$name.stdout" 2>"$name.stderr"
  echo $? >"$name.rc"
}

t1=(--scenario deepspeed-tied-row-parallel)

# The README's commands.
run sweep40 sweep --seeds 40 --threads "$threads" --out sweep40
run repro8199 repro --seed 8199 --param 35-3-False-0 --policy old
run list list
run check-tp4 check configs/examples/row_parallel_head_tp4.toml
run explain explain --scenario maxtext-diloco --check loss --step 2 --observed 0.647502
run scale scale --seeds 5 --profile cpu-fma --policy torch-default --k 32,64,128 --tp 2,4 --out scale
run mine sweep --config configs/examples/row_parallel_head_tp4.toml --seeds 200 --threads "$threads" --out mine
run mine30 sweep --config configs/examples/row_parallel_head_tp4.toml --param 30 --mutants all \
  --seeds 300 --quiet --threads "$threads" --out mine-30
run mine30-size size mine-30

# Mutants: the README's sweep, then every built-in scenario on its own.
run sweep40m sweep --seeds 40 --mutants all --threads "$threads" --out sweep40m
for s in $("$bin" list | sed -n 's/^  \([a-z][a-z0-9.-]*\)  (built-in.*/\1/p'); do
  run "mut-$s" sweep --scenario "$s" --seeds 12 --mutants all --threads "$threads" --out "mut-$s"
done
run sweep40m-summary-only sweep --seeds 40 --mutants all --summary-only --threads "$threads" \
  --out sweep40m-summary-only

# Report and size (on a folder, with the report after size's recommendations, and in-process).
run t1m sweep "${t1[@]}" --param 35-3-False-0 --seeds 1000 --mutants all --threads "$threads" --out t1m
run t1m-size size t1m --markdown t1m-evidence.md
run t1m-report report t1m
run sweep40m-report report sweep40m --out sweep40m-report.html
run size-inproc size "${t1[@]}" --param 35-3-False-0 --seeds 120 \
  --mutants missing-allreduce,bf16-allreduce --markdown size-inproc.md --out size-inproc.csv
# Size over two profiles of two JAX tests (chex assertions, exact checks, usages not
# estimable from one seed, mutants not shown caught, more than ten failing seeds), and with
# --validate (text, Markdown and CSV of each).
run size-jax size --scenario maxtext-diloco,diloco --seeds 150 --mutants all \
  --markdown size-jax.md --out size-jax.csv
run size-validate size "${t1[@]}" --param 35-3-False-0 --seeds 120 --validate 40 \
  --markdown size-validate.md --out size-validate.csv

# CI verdicts.
run ci sweep --seeds 40 --mutants all --threads "$threads" --out ci \
  --json ci.json --junit-xml ci.xml --markdown ci.md
run ci-gates sweep "${t1[@]}" --seeds 40 --mutants all --threads "$threads" --out ci-gates \
  --fail-on-exceed --fail-on-missed-mutant --max-flake-rate 1e-3 --json ci-gates.json
run repro-json repro --seed 8199 --param 35-3-False-0 --policy old --mutants all \
  --json repro.json --junit-xml repro.xml --markdown repro.md

# Parquet, with its report.
run pq sweep "${t1[@]}" --seeds 200 --mutants all --format parquet --threads "$threads" --out pq
run pq-report report pq
# The same without mutants: a mutant group writes no per-seed rows, so a `--mutants` sweep's
# per-seed file is the clean sweep's (scripts/golden_compare.py checks the Parquet files so).
run pq-clean sweep "${t1[@]}" --seeds 200 --format parquet --threads "$threads" --out pq-clean
run merged-parquet-clean sweep --seeds 60 --format parquet --threads "$threads" \
  --out merged-parquet-clean

# Shards, then merge (CSV and Parquet).
for fmt in csv parquet; do
  for i in 0 1 2 3; do
    run "shard-$fmt-$i" sweep --seeds 60 --mutants all --shard "$i/4" --format "$fmt" \
      --threads "$threads" --out "shard-$fmt-$i"
    if [ "$fmt" = parquet ]; then
      run "shard-$fmt-$i-clean" sweep --seeds 60 --shard "$i/4" --format "$fmt" \
        --threads "$threads" --out "shard-$fmt-$i-clean"
    fi
  done
  run "merge-check-$fmt" merge --check shard-$fmt-0 shard-$fmt-1 shard-$fmt-2 shard-$fmt-3
  run "merge-$fmt" merge shard-$fmt-0 shard-$fmt-1 shard-$fmt-2 shard-$fmt-3 --out "merged-$fmt"
  run "merged-$fmt-size" size "merged-$fmt" --scenario deepspeed-tied-row-parallel
  run "merged-$fmt-report" report "merged-$fmt"
done
run whole60 sweep --seeds 60 --mutants all --threads "$threads" --out whole60

# Kill -9 once the first checkpoint is written, then --resume (CSV and Parquet).
for fmt in csv parquet; do
  name=resume-$fmt
  "$bin" sweep "${t1[@]}" --seeds 3000 --mutants all --format "$fmt" --threads "$threads" \
    --quiet --out "$name" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    [ -s "$name/.progress" ] && break
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -e "$name/.progress" ]; then echo killed >"$name.killed"; else echo finished >"$name.killed"; fi
  run "$name-resume" sweep "${t1[@]}" --seeds 3000 --mutants all --format "$fmt" \
    --threads "$threads" --quiet --out "$name" --resume
  run "$name-full" sweep "${t1[@]}" --seeds 3000 --mutants all --format "$fmt" \
    --threads "$threads" --quiet --out "$name-full"
  if diff -r "$name" "$name-full" >/dev/null; then echo same >"$name.same"; else echo DIFFERENT >"$name.same"; fi
  rm "$name.killed" # whether the kill came before the end depends on the machine
  rm -rf "$name-full"
done
run resume-parquet-clean sweep "${t1[@]}" --seeds 3000 --format parquet --threads "$threads" \
  --quiet --out resume-parquet-clean

rm configs
echo "wrote $out"
