"""Captures an example test at other weight seeds and prints each verdict: the mirror proof of
`capture` runs at the test's own seed only, so this measures it at more. For each seed, a copy
of the test file with its module's `SEED` replaced (`SEED = N` or `SEED, DATA_SEED = N, M`) is
captured in a temporary folder.

    ATEN_CPU_CAPABILITY=avx2 python python/examples/mirror_at_seeds.py test_tp_attention \\
        test_tp_attention_adamw --seeds 1017 2017 3017
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("module")
ap.add_argument("test", help="the test function, with its [param] if any")
ap.add_argument("--seeds", nargs="+", type=int, required=True)
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, a.module + ".py")) as f:
    src = f.read()
pat = re.compile(r"^SEED(, DATA_SEED)? = \d+", re.M)
if len(pat.findall(src)) != 1:
    raise SystemExit(f"{a.module}.py: no single `SEED = N` / `SEED, DATA_SEED = N, M` line")
exact = 0
for seed in a.seeds:
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, a.module + ".py"), "w") as f:
            f.write(pat.sub(lambda m: m.group(0).rsplit("=", 1)[0] + f"= {seed}", src))
        r = subprocess.run([sys.executable, "-m", "seedsweep", "capture", f"{a.module}.py::{a.test}",
                            "-o", os.path.join(d, "out.toml")], cwd=d, capture_output=True, text=True)
        verdict = (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1]
        exact += r.returncode == 0 and verdict.startswith("mirror exact")
        print(f"seed {seed}: {verdict}", flush=True)
print(f"{a.module}::{a.test}: mirror exact at {exact} of {len(a.seeds)} seeds")
sys.exit(0 if exact == len(a.seeds) else 1)
