#!/usr/bin/env bash
# Regenerates README.md from scripts/README.template.md with real output of the commands it shows.
# Where a block shows a command as a terminal shows it, stderr (the `wrote ...` status lines) is
# captured with stdout; the progress bar is not drawn, stderr not being a terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=target/release/seedsweep
tmp=$(mktemp -d)
$bin sweep --seeds 40 --quiet --scenario deepspeed-tied-row-parallel --out "$tmp/sweep" > "$tmp/sweep.txt"
$bin repro --seed 8199 --param 35-3-False-0 --policy old > "$tmp/repro.txt"
$bin sweep --seeds 40 --quiet --scenario maxtext-diloco,diloco --out "$tmp/diloco" > "$tmp/diloco.txt"
$bin bench --seeds 500 > "$tmp/bench.txt"
$bin sweep --quiet --scenario deepspeed-tied-row-parallel --param 35-3-False-0 --mutants all --seeds 1000 --out "$tmp/t1" > /dev/null
$bin size "$tmp/t1" 2>&1 | sed "s|$tmp/t1|results/t1|g" > "$tmp/size.txt"
tut=configs/examples/row_parallel_head_tp4.toml
$bin check "$tut" | sed '/^parametrization 64/,$d' > "$tmp/tut_check.txt"
sed 's/parallel = "row"/parallel = "rows"/' "$tut" > "$tmp/mine.toml"
(cd "$tmp" && "$OLDPWD/$bin" check mine.toml 2>&1 || true) > "$tmp/tut_error.txt"
$bin sweep --config "$tut" --seeds 200 --out "$tmp/mine" 2>&1 | sed "s|$tmp/mine|results/mine|g" > "$tmp/tut_sweep.txt"
$bin sweep --config "$tut" --param 30 --mutants all --seeds 1000 --quiet --out "$tmp/mine-30" > /dev/null
$bin size "$tmp/mine-30" 2>&1 | sed "s|$tmp/mine-30|results/mine-30|g" > "$tmp/tut_size.txt"
cp "$tut" "$tmp/tut_file.txt"
attn=configs/examples/attention_tp2.toml
cp "$attn" "$tmp/attn_file.txt"
$bin sweep --config "$attn" --seeds 200 --out "$tmp/attn" 2>/dev/null | sed "s|$tmp/attn|results/attn|g" > "$tmp/attn_sweep.txt"
python3 - "$tmp" <<'PY'
import sys
tmp = sys.argv[1]
t = open("scripts/README.template.md").read()
for key, f in (("@@SWEEP@@", "sweep.txt"), ("@@REPRO@@", "repro.txt"), ("@@BENCH@@", "bench.txt"), ("@@DILOCO@@", "diloco.txt"), ("@@SIZE@@", "size.txt"),
                  ("@@TUT_FILE@@", "tut_file.txt"), ("@@TUT_CHECK@@", "tut_check.txt"), ("@@TUT_ERROR@@", "tut_error.txt"),
                  ("@@TUT_SWEEP@@", "tut_sweep.txt"), ("@@TUT_SIZE@@", "tut_size.txt"),
                  ("@@ATTN_FILE@@", "attn_file.txt"), ("@@ATTN_SWEEP@@", "attn_sweep.txt")):
    t = t.replace(key, open(f"{tmp}/{f}").read().rstrip("\n"))
open("README.md", "w").write(t)
PY
rm -rf "$tmp"
echo "README.md rendered"
