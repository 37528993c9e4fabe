"""Runs an example test itself in real torch over a range of seeds (its module's SEED replaced)
and prints the seeds whose assertions fail: the ground truth a seedsweep sweep of its captured
file predicts.

    ATEN_CPU_CAPABILITY=avx2 python python/examples/sweep_in_torch.py test_tp_mlp test_tp_mlp_adamw \\
        --args 1e-6 1e-6 --first 1234 --seeds 200
"""
import argparse
import importlib
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("module")
ap.add_argument("test")
ap.add_argument("--args", nargs="*", type=float, default=[])
ap.add_argument("--first", type=int, required=True)
ap.add_argument("--seeds", type=int, required=True)
a = ap.parse_args()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
mod = importlib.import_module(a.module)
fn = getattr(mod, a.test)
failing = []
for seed in range(a.first, a.first + a.seeds):
    mod.SEED = seed
    try:
        fn(*a.args)
    except AssertionError as e:
        failing.append(seed)
        print(f"seed {seed}: {' '.join(str(e).split())[:160]}")
print(f"{a.module}.{a.test}{tuple(a.args)} in torch, seeds {a.first}..{a.first + a.seeds - 1}: "
      f"{len(failing)} failing {failing}")
