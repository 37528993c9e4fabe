"""The pytest plugin (registered through the `pytest11` entry point; inert without its flags).

`pytest --seedsweep=N [-k name]`: every selected test whose source calls
`torch.testing.assert_close` or `torch.allclose` runs once under the recorder (that run is the
test's own: a failing assertion still fails it), is captured to a scenario file (cached under
pytest's cache directory, keyed by a hash of the test file's source, the node id, torch's
version and this package's), has its mirror proved at the test's seed, and is swept over N
seeds from the test's own. The terminal summary reports per test: the mirror verdict, per
check the worst usage with its seed and step, the failing seeds, the tail estimate (predicted
flake rate at the test's tolerance), and the tolerance `seedsweep size` recommends.

A swept test fails when some seed of the sweep fails one of its checks; with
`--seedsweep-max-flake P`, instead, when some check's predicted flake rate exceeds P (the tail
fit's, or where there is none the observed share of failing seeds). The failure carries the
repro command and torch's message from `seedsweep repro` at the worst seed. A test that fails
at its own seed fails as it would without the plugin.

Under `--seedsweep` or `--seedsweep-drift` the plugin sets `ATEN_CPU_CAPABILITY=avx2` when the
environment does not set it and torch is not yet imported (the profile models torch's AVX2
kernels); capture refuses another capability, naming it.

`--seedsweep-drift`: a test with a committed scenario file (`--seedsweep-dir`, default
`captures/` beside the test file, named `<file stem>.<test>[.<param>].toml`) fails when a fresh
capture differs from it (comments aside: source lines may move).
"""
import hashlib
import json
import os
import re
import sys

import pytest

_ITEMS = []   # per-test reports, in run order


def pytest_addoption(parser):
    g = parser.getgroup("seedsweep", "seed sweeps of numerical tests (seedsweep)")
    g.addoption("--seedsweep", type=int, metavar="N", default=None,
                help="capture each selected test that calls assert_close/allclose and sweep N seeds")
    g.addoption("--seedsweep-max-flake", type=float, metavar="P", default=None,
                help="fail a test whose predicted per-seed flake rate exceeds P")
    g.addoption("--seedsweep-drift", action="store_true", default=False,
                help="fail a test whose committed scenario file differs from a fresh capture")
    g.addoption("--seedsweep-dir", metavar="DIR", default=None,
                help="where committed scenario files are (default: captures/ beside each test file)")


def pytest_configure(config):
    # The mirror models torch's AVX2 ATen kernels; under --seedsweep the run takes them unless
    # the environment chose (capture then refuses another capability, naming it).
    if _active(config) and "torch" not in sys.modules:
        os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")


def _active(config):
    return config.getoption("--seedsweep") is not None or config.getoption("--seedsweep-drift")


def _calls_assert(item):
    fn = getattr(item, "function", None)
    if fn is None:
        return False
    import inspect
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return "assert_close" in src or "allclose" in src


def committed_path(item, config):
    base = config.getoption("--seedsweep-dir") or os.path.join(os.path.dirname(str(item.fspath)), "captures")
    stem = os.path.splitext(os.path.basename(str(item.fspath)))[0]
    name = item.originalname if hasattr(item, "originalname") else item.name
    param = getattr(getattr(item, "callspec", None), "id", None)
    fname = f"{stem}.{name}" + (f".{param}" if param else "") + ".toml"
    return os.path.join(base, fname)


def strip_comments(text):
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        line = line.split("   # ")[0].rstrip()
        if line:
            out.append(line)
    return out


def _cache_key(item):
    import torch
    from . import __version__
    with open(str(item.fspath), "rb") as f:
        src = f.read()
    h = hashlib.sha256()
    for part in (src, item.nodeid.encode(), torch.__version__.encode(), __version__.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:24]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    config = item.config
    if not _active(config) or not _calls_assert(item):
        yield
        return
    import torch
    from .record import Recorder

    if getattr(config, "cache", None) is not None:
        cache = str(config.cache.mkdir("seedsweep"))
    else:  # -p no:cacheprovider: a cache of this session only
        import tempfile
        cache = config.__dict__.setdefault("_seedsweep_tmp", tempfile.mkdtemp(prefix="seedsweep-"))
    key = _cache_key(item)
    cdir = os.path.join(cache, key)
    toml = os.path.join(cdir, "scenario.toml")
    meta_path = os.path.join(cdir, "capture.json")
    report = {"nodeid": item.nodeid, "cache": cdir}
    _ITEMS.append(report)
    need_capture = config.getoption("--seedsweep-drift") or not os.path.exists(meta_path)
    if not need_capture:
        outcome = yield
        with open(meta_path) as f:
            report.update(json.load(f))
        report["cached"] = True
    else:
        torch.set_num_threads(1)
        rec = Recorder()
        with rec:
            outcome = yield
        if outcome.excinfo is None and rec.failures:
            # the test's own assertion failed: fail it as it would have failed
            outcome.force_exception(AssertionError(rec.failures[0].get("message", "assert_close failed")))
        if outcome.excinfo is not None and not rec.failures:
            report["error"] = "the test raised before every check ran; not captured"
            return
        from .capture import finish
        os.makedirs(cdir, exist_ok=True)
        param = getattr(getattr(item, "callspec", None), "id", None)
        res = finish(rec, item.nodeid, param, toml)
        meta = {"errors": res.errors, "verdict": res.verdict, "status": res.status}
        if res.translator is not None and not res.errors:
            tr = res.translator
            meta.update({"name": tr.name, "param": tr.param_id, "profile": tr.profile, "seed": tr.init_seed,
                         "toml": toml})
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        report.update(meta)
        if config.getoption("--seedsweep-drift"):
            committed = committed_path(item, config)
            report["committed"] = committed
            if os.path.exists(committed):
                if res.errors:
                    outcome.force_exception(AssertionError(
                        f"seedsweep drift: {committed} is committed but the test no longer captures:\n"
                        + "\n".join(f"  {l}: {w}" for w, l in res.errors)))
                    return
                with open(committed) as f:
                    old = strip_comments(f.read())
                new = strip_comments(res.text)
                if old != new:
                    import difflib
                    diff = "\n".join(difflib.unified_diff(old, new, committed, "fresh capture", lineterm=""))
                    report["drift"] = True
                    outcome.force_exception(AssertionError(
                        f"seedsweep drift: {committed} differs from a fresh capture of {item.nodeid}:\n{diff}"))
                    return
                report["drift"] = False
    n = config.getoption("--seedsweep")
    if n is None or report.get("errors") or report.get("status") not in (0, None):
        return
    sweep(report, n)
    p = config.getoption("--seedsweep-max-flake")
    if p is not None:
        bad = [c for c in report.get("checks", []) if c["flake"] is not None and c["flake"] > p]
        why = f"a predicted flake rate above {p}"
    else:
        bad = [c for c in report.get("checks", []) if c["failing"]]
        why = "failing seeds in the sweep (give --seedsweep-max-flake P to gate on the predicted rate instead)"
    if bad and outcome.excinfo is None:
        c = max(bad, key=lambda c: (c["flake"] or 0, c["failing"]))
        msg = repro_message(report, c)
        report["flaky"] = True
        outcome.force_exception(AssertionError(
            f"seedsweep: {item.nodeid} fails on {why}: check {c['check']} predicted flake rate "
            f"{c['flake']:.3g} per seed ({c['flake_method']}), failing seeds {c['failing_list'] or 'none'} of "
            f"{report['seeds']}\nrepro: {c['repro']}\n{msg}"))


def sweep(report, n):
    """`seedsweep sweep` over n seeds from the test's own, then `seedsweep size` on it."""
    from ._binary import binary, run_binary
    out = os.path.join(report["cache"], f"sweep{n}")
    vj = os.path.join(out, "verdict.json")
    if not os.path.exists(vj):
        os.makedirs(out, exist_ok=True)
        r = run_binary(["sweep", "--config", report["toml"], "--scenario", report["name"], "--param",
                        report["param"], "--profile", report["profile"], "--policy", "test", "--seeds", n,
                        "--first-seed", report["seed"], "--out", out, "--json", vj, "--quiet"],
                       capture_output=True, text=True)
        if r.returncode != 0:
            report["sweep_error"] = r.stderr.strip()[-800:]
            return
    with open(vj) as f:
        verdict = json.load(f)
    rec_path = os.path.join(out, "recommendations.csv")
    if not os.path.exists(rec_path):
        r = run_binary(["size", out, "--quiet"], capture_output=True, text=True)
        if r.returncode != 0:
            report["size_error"] = r.stderr.strip()[-800:]
    recs = {}
    if os.path.exists(rec_path):
        import csv
        with open(rec_path) as f:
            for row in csv.DictReader(f):
                if row["shape"] == "atol-at-torch-rtol" and row["atol"]:
                    recs.setdefault(row["check"], (row["atol"], row["rtol"], row["tail_method"]))
    # size's recommendation re-swept over the same seeds: does it hold on the evidence it came from?
    rec_fail = {}
    if recs:
        rtoml = os.path.join(out, "recommended.toml")
        with open(report["toml"]) as f:
            text = f.read()
        per = "".join(f"checks.{k} = {{ atol = {v[0]}, rtol = {v[1]} }}\n" for k, v in recs.items() if k != "all")
        with open(rtoml, "w") as f:
            f.write(text + "\n[policies.size-recommended]\ndescription = \"seedsweep size: atol at rtol 1.3e-6 per "
                    "check\"\ndefault = { atol = 1e-5, rtol = 1.3e-6 }\n" + per)
        rj = os.path.join(out, "recommended.json")
        r = run_binary(["sweep", "--config", rtoml, "--scenario", report["name"], "--param", report["param"],
                        "--profile", report["profile"], "--policy", "size-recommended", "--seeds", n,
                        "--first-seed", report["seed"], "--out", os.path.join(out, "recommended"), "--json", rj,
                        "--quiet"], capture_output=True, text=True)
        if r.returncode == 0:
            with open(rj) as f:
                for c in json.load(f)["cases"]:
                    if c.get("asserted") and c.get("policy") == "size-recommended":
                        rec_fail[c["check"]] = c["failing_seed_list"]
    checks = []
    for c in verdict["cases"]:
        if not c.get("asserted") or c.get("policy") != "test":
            continue
        flake = c["tail"].get("flake_rate_at_tolerance") if c.get("tail") else None
        method = c["tail"].get("flake_rate_method") if c.get("tail") else None
        if flake is None:
            flake, method = c["failing_seeds"] / c["seeds"], "observed"
        repro = c["repro"].replace("seedsweep ", "python -m seedsweep ", 1)
        checks.append({"check": c["check"], "worst": c["worst_usage_pct"], "seed": c["worst_seed"],
                       "step": c["worst_step"], "micro": c.get("worst_micro_step"),
                       "failing": c["failing_seeds"], "failing_list": c["failing_seed_list"],
                       "flake": flake, "flake_method": method, "atol": c["atol"], "rtol": c["rtol"],
                       "recommended": recs.get(c["check"]), "recommended_failing": rec_fail.get(c["check"]),
                       "repro": repro, "raw_repro": c["repro"]})
    report["checks"] = checks
    report["seeds"] = n
    report["recommended_all"] = recs.get("all")


def repro_message(report, c):
    """torch's message at the check's worst seed, from `seedsweep repro` (its text after the table)."""
    from ._binary import run_binary
    args = c["raw_repro"].split()[1:]
    r = run_binary([*args, "--quiet"], capture_output=True, text=True)
    text = r.stdout
    blocks = text.split("\n-- ")
    if len(blocks) < 2:
        return text.rstrip()
    for b in blocks[1:]:
        if b.startswith(c["check"] + " "):
            return "-- " + b.rstrip()
    return "-- " + blocks[1].rstrip()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _active(config) or not _ITEMS:
        return
    tr = terminalreporter
    tr.section("seedsweep")
    for rep in _ITEMS:
        tr.write_line(rep["nodeid"])
        if rep.get("error"):
            tr.write_line(f"  {rep['error']}")
            continue
        if rep.get("errors"):
            tr.write_line("  not expressible in the scenario language (nothing swept):")
            for what, line in rep["errors"]:
                tr.write_line(f"    {line}: {what}")
            continue
        cached = " (cached capture)" if rep.get("cached") else ""
        tr.write_line(f"  scenario {rep.get('toml')}{cached}")
        if rep.get("verdict"):
            tr.write_line(f"  {rep['verdict']} (seed {rep.get('seed')})")
        if "drift" in rep:
            tr.write_line(f"  committed {rep['committed']}: {'DRIFTED' if rep['drift'] else 'matches the fresh capture'}")
        if rep.get("sweep_error"):
            tr.write_line(f"  sweep failed: {rep['sweep_error']}")
            continue
        if "checks" not in rep:
            if rep.get("status") == 3:
                tr.write_line("  not swept: the file does not compute what the test computes (see the line above)")
            continue
        s0 = rep["seed"]
        tr.write_line(f"  seeds {s0}..{s0 + rep['seeds'] - 1} ({rep['seeds']}), profile {rep['profile']}, "
                      "the test's tolerances:")
        tr.write_line(f"    {'check':<14} {'atol':>8} {'rtol':>8} {'worst':>8} {'at seed@step':>13} {'failing':>9} "
                      f"{'flake/seed':>11}  size recommends (atol at rtol 1.3e-6)")
        for c in rep["checks"]:
            micro = c.get("micro")
            at = f"{c['seed']}@{c['step']}" + (f".{micro}" if micro is not None and micro >= 0 else "")
            fl = f"{c['flake']:.2g}" + (" obs" if c["flake_method"] == "observed" else "")
            rec = c["recommended"]
            rec_s = f"atol={rec[0]} ({rec[2]})" if rec else "-"
            rf = c.get("recommended_failing")
            if rec and rf:
                rec_s += f"; re-swept: seeds {', '.join(map(str, rf))} still fail under it"
            tr.write_line(f"    {c['check']:<14} {c['atol']:>8.2g} {c['rtol']:>8.2g} {c['worst']:>7.3g}% {at:>13} "
                          f"{c['failing']:>4}/{rep['seeds']:<4} {fl:>11}  {rec_s}")
        fails = sorted({s for c in rep["checks"] for s in c["failing_list"]})
        tr.write_line(f"  failing seeds: {', '.join(map(str, fails)) if fails else 'none'}")
        if fails:
            c = next(c for c in rep["checks"] if c["failing"])
            tr.write_line(f"  repro: {c['repro']}")
