#!/usr/bin/env bash
# Submit a seedsweep sweep as a Slurm array job plus a merge job that runs after it.
#
#   scripts/slurm_sweep.sh SHARDS OUT_DIR [sweep flags...]
#   scripts/slurm_sweep.sh 32 results/big --seeds 1000000 --scenario deepspeed-tied-row-parallel
#
# Each array task runs `seedsweep sweep ... --out OUT_DIR/shard-<i>`; seedsweep reads
# SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT itself and takes its deterministic slice of the
# seeds. The merge job (afterok dependency) writes OUT_DIR/merged, byte-identical to one run
# over all seeds. A task that dies can be resubmitted with --resume added to the flags.
# Extra sbatch options go in SBATCH_OPTS (e.g. SBATCH_OPTS="--partition=cpu --time=02:00:00").
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
shards=$1
out=$2
shift 2
case "$shards" in (''|*[!0-9]*) echo "error: SHARDS must be a positive integer, got '$shards'" >&2; exit 2;; esac
[ "$shards" -ge 1 ] || { echo "error: SHARDS must be >= 1" >&2; exit 2; }
bin=${SEEDSWEEP_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/seedsweep}
[ -x "$bin" ] || { echo "error: $bin not found; run 'cargo build --release' first or set SEEDSWEEP_BIN" >&2; exit 2; }
mkdir -p "$out"
flags=$(printf ' %q' "$@")
array_id=$(sbatch --parsable ${SBATCH_OPTS:-} --array=0-$((shards - 1)) --job-name=seedsweep \
  --output="$out/slurm-%A_%a.log" \
  --wrap="$bin sweep$flags --quiet --out $out/shard-\$SLURM_ARRAY_TASK_ID")
dirs=$(for i in $(seq 0 $((shards - 1))); do printf ' %q' "$out/shard-$i"; done)
merge_id=$(sbatch --parsable ${SBATCH_OPTS:-} --dependency=afterok:"$array_id" --job-name=seedsweep-merge \
  --output="$out/slurm-merge-%j.log" --wrap="$bin merge$dirs --out $out/merged")
echo "submitted array job $array_id ($shards shards) and merge job $merge_id -> $out/merged"
