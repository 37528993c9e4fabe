#!/usr/bin/env bash
# Cross-checks a thread-count profile against real torch on T1 and T2, every parametrization, seeds
# 8173..8212: `seedsweep repro --dump` in PROFILE, then scripts/crosscheck_torch.py at THREADS threads.
# Prints, per (param, seed), how many recorded elements are bit-identical, and the total at the end.
#   scripts/crosscheck_mkl_threads.sh 2 cpu-fma+mkl-threads-2      # needs torch (pip install torch)
#   scripts/crosscheck_mkl_threads.sh 1 cpu-fma
# ATEN_CPU_CAPABILITY=avx2 is set, as the cpu-fma profiles mirror torch's AVX2 kernels.
# CR_TANH=1 runs torch with a correctly rounded tanh (crosscheck_torch.py --cr-tanh), which takes MKL's
# 1-ulp tanh errors out of the comparison; SEED_STEP=5 checks every fifth seed only.
set -euo pipefail
threads=${1:?threads}; profile=${2:?profile}
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
cargo build --release -q
bin=target/release/seedsweep
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ATEN_CPU_CAPABILITY=avx2
same_all=0; total_all=0
for param in 32-None-False-0 35-3-False-0 35-3-True-0 32-3-False-2 \
             32-input_shape0-lm_head-False 35-input_shape1-lm_head-True 35-input_shape2-embed_out-True; do
  for seed in $(seq 8173 "${SEED_STEP:-1}" 8212); do
    rm -rf "$tmp/d"
    "$bin" repro --seed "$seed" --param "$param" --profile "$profile" --dump "$tmp/d" > /dev/null
    out=$("$py" scripts/crosscheck_torch.py --seed "$seed" --param "$param" --threads "$threads" \
          ${CR_TANH:+--cr-tanh} --dump "$tmp"/d/*.csv)
    read -r same total < <(echo "$out" | awk '/bit-identical/ {split($(NF-4), a, "/"); s += a[1]; t += a[2]}
                                         END {print s + 0, t + 0}')
    same_all=$((same_all + same)); total_all=$((total_all + total))
    echo "$param seed $seed: $same/$total bit-identical"
  done
done
echo "total ($profile vs torch at $threads thread(s)): $same_all/$total_all bit-identical"
