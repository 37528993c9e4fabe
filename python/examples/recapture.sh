#!/usr/bin/env bash
# Re-captures the example tests into captures/ (the files `pytest --seedsweep-drift` compares
# with) and checks that every capture ends "mirror exact". Needs the package installed
# (`pip install ./python`) in an environment with torch; run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export ATEN_CPU_CAPABILITY=avx2
status=0
for node in \
  "examples/test_tp_mlp.py::test_tp_mlp_adamw[torch-default]" \
  "examples/test_tp_mlp.py::test_tp_mlp_adamw[tight]" \
  "examples/test_tp_classifier.py::test_tp_classifier_sgd[default]" \
  "examples/test_tp_prenorm_block.py::test_tp_prenorm_block_adam" \
  "examples/test_row_parallel_head.py::test_row_parallel_head_sgd" \
  "examples/test_tp_attention.py::test_tp_attention_adamw" \
  "examples/test_tp_swiglu.py::test_tp_swiglu_adamw"; do
  file=${node%%::*}; rest=${node#*::}; name=${rest%%[*}
  param=""; case $rest in *"["*) param=${rest#*[}; param=".${param%]}";; esac
  out="examples/captures/$(basename "$file" .py).$name$param.toml"
  echo "== $node -> $out"
  "$PY" -m seedsweep capture "$node" -o "$out" | tail -n 1 | tee /tmp/recapture.$$ || status=1
  grep -q "^mirror exact on" /tmp/recapture.$$ || status=1
done
rm -f /tmp/recapture.$$
exit $status
