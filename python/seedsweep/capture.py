"""`python -m seedsweep capture path/test_x.py::test_name[param] -o test.toml`

Runs the test once, in this process, under `record.Recorder` (through pytest, so fixtures and
parametrization are the test's own); a failing assert_close is recorded and the test goes on,
so that every checked point is recorded. `translate.Translator` turns the recording into a
scenario file, or lists what the language cannot express (exit 2, no file written). Then the
mirror proves itself: `seedsweep repro --config FILE --seed <the test's seed> --dump DIR`, and
every tensor the test checked (both sides of every assert_close call, as the test computed
them) is compared bit for bit with seedsweep's. The verdict line (`mirror exact on N of N
checked tensors`, or the first tensor that differs) is printed and written into the file's
header; exit 3 when the mirror is not exact.

Conditions: torch on the CPU, eager, one thread (capture sets `torch.set_num_threads(1)`),
`ATEN_CPU_CAPABILITY=avx2` (capture re-executes itself with it when unset), float32.
"""
import argparse
import os
import sys
import tempfile


class CaptureResult:
    def __init__(self):
        self.status = 0
        self.text = None
        self.errors = []
        self.verdict = None
        self.failed_asserts = []
        self.translator = None
        self.test_ran = False
        self.test_error = None


def run_test_recorded(nodeid, rootdir=None, extra_args=()):
    """Runs one pytest node under the recorder; returns (recorder, pytest exit code, error text)."""
    import pytest
    import torch
    from .record import Recorder

    rec = Recorder()
    state = {"ran": False, "error": None}

    class Plug:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item):
            torch.set_num_threads(1)
            with rec:
                out = yield
            state["ran"] = True
            exc = out.excinfo
            if exc is not None:
                state["error"] = f"{exc[0].__name__}: {exc[1]}"

    args = [nodeid, "-p", "no:cacheprovider", "-p", "no:seedsweep", "-p", "no:terminal", "-x",
            "-W", "ignore::pytest.PytestAssertRewriteWarning",
            "-o", "addopts=", *extra_args]
    if rootdir:
        args += ["--rootdir", rootdir]
    code = pytest.main(args, plugins=[Plug()])
    return rec, code, state


def capture(nodeid, out_path, keep_dump=None):
    """Runs the test under the recorder, then `finish`."""
    res = CaptureResult()
    rec, code, state = run_test_recorded(nodeid)
    if not state["ran"]:
        res.test_ran = False
        res.status = 2
        res.errors = [(f"the test did not run (pytest exit code {int(code)}: not collected, skipped or its "
                       "setup failed); check the node id, relative to the current directory", nodeid)]
        return res
    if state["error"]:
        res.test_ran = False
        res.status = 2
        res.errors = [(f"the test raised {state['error']}", nodeid)]
        return res
    param = nodeid.split("[", 1)[1][:-1] if "[" in nodeid else None
    return finish(rec, nodeid, param, out_path, keep_dump)


def finish(rec, nodeid, param, out_path, keep_dump=None, prove=True):
    """Translates a recording, writes the file and runs the mirror proof. With errors, nothing
    is written (and a stale file at out_path is left alone)."""
    from .translate import CaptureError, Translator

    res = CaptureResult()
    res.test_ran = True
    tr = Translator(rec, nodeid, param)
    res.translator = tr
    try:
        text = tr.run()
    except CaptureError as e:
        res.status = 2
        res.errors = e.items
        return res
    res.failed_asserts = list(rec.failures)
    header = header_lines(nodeid, tr, res.failed_asserts)
    write(out_path, header + ["# mirror: not yet checked"], text)
    res.text = text
    if not prove:
        return res
    verdict, exact = mirror_proof(out_path, tr, keep_dump)
    res.verdict = verdict
    write(out_path, header + ["# " + verdict], text)
    res.status = 0 if exact else 3
    return res


def header_lines(nodeid, tr, failures):
    import torch
    lines = [f"# Captured from {nodeid} by `python -m seedsweep capture` (seedsweep package 0.1.0).",
             f"# Conditions: torch {torch.__version__}, CPU, eager, 1 thread, ATen capability "
             f"{torch.backends.cpu.get_cpu_capability()}; the test's seed {tr.init_seed}.",
             "# Language: docs/scenario-language.md. Source lines of what was recorded are in the comments."]
    for e in failures:
        lines.append(f"# At the test's own seed the check at {e['line']} failed (recorded, not raised).")
    return lines


def write(path, header, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(header) + "\n" + text)
    os.replace(tmp, path)


def mirror_proof(path, tr, keep_dump=None):
    """Runs `seedsweep repro --dump` at the test's seed and compares every recorded tensor bit
    for bit. Returns (verdict line, exact)."""
    import numpy as np
    from ._binary import run_binary

    dump = keep_dump or tempfile.mkdtemp(prefix="seedsweep-capture-")
    r = run_binary(["repro", "--config", path, "--scenario", tr.name, "--param", tr.param_id,
                    "--seed", str(tr.init_seed), "--profile", tr.profile, "--policy", "test",
                    "--dump", dump, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        return (f"mirror not checked: seedsweep repro exited {r.returncode}: {r.stderr.strip()[-400:]}", False)
    stem = f"{tr.name}__{tr.param_id}__{tr.profile}__seed{tr.init_seed}"
    folder = os.path.join(dump, stem)
    if not os.path.isdir(folder):
        cands = [d for d in os.listdir(dump) if os.path.isdir(os.path.join(dump, d))]
        if len(cands) != 1:
            return (f"mirror not checked: no dump folder {stem} in {dump}", False)
        folder = os.path.join(dump, cands[0])
    recorded = tr.recorded()
    n = len(recorded)
    exact = 0
    first = None
    first_tensor = None
    for cname, label, comp, value, line in recorded:
        where = f"{comp} {cname} ({tr.checks[cname]['tensor']}) at step {label} ({line})"
        f = os.path.join(folder, f"{comp}__{cname}__step{label}__value.npy")
        why = None
        if not os.path.exists(f):
            why = f"{where}: seedsweep recorded no such tensor"
        else:
            ours = np.load(f)
            theirs = value.detach().contiguous().numpy()
            if ours.size != theirs.size:
                why = f"{where}: {ours.size} elements vs the test's {theirs.size}"
            else:
                a = ours.reshape(-1).view(np.uint32)
                b = theirs.reshape(-1).astype(np.float32).view(np.uint32)
                diff = np.nonzero(a != b)[0]
                if diff.size == 0:
                    exact += 1
                    continue
                i = int(diff[0])
                why = (f"{where} differs first at flat index {i}: seedsweep {float(ours.reshape(-1)[i])!r} vs the "
                       f"test's {float(theirs.reshape(-1)[i])!r} ({diff.size} of {a.size} elements differ)")
        if first is None:
            first, first_tensor, first_comp = why, tr.checks[cname]["tensor"], comp
            # the last micro-step whose forward ran before this tensor was computed
            st, _, m = label.partition(".")
            at = tr.checks[cname]["at"]
            until = (int(st), int(m) if m else (tr.micro - 1 if at == "step" else 0))
    if exact == n:
        return (f"mirror exact on {n} of {n} checked tensors", True)
    verdict = f"mirror NOT exact: {exact} of {n} checked tensors equal; first difference: {first}"
    if first_tensor is not None:
        verdict += f"; that tensor comes from {tr.producer(first_tensor, first_comp)}"
    verdict += "; " + diagnose(path, tr, until)
    return (verdict, False)


def micro_key(label):
    st, _, m = label.partition(".")
    return (int(st), int(m) if m else 0)


def diagnose(path, tr, until):
    """Names the first op whose output differs: reruns seedsweep at the test's seed on a copy of
    the file with a check on every layer's output (and the loss) at every micro-step, and
    compares each, in forward order, with the output of the test's own op (the reference's,
    then the sharded computation's rank shards concatenated), over the micro-steps up to
    `until` ((step, micro-step), the last forward before the first differing checked tensor).
    Returns one sentence."""
    import numpy as np
    from ._binary import run_binary

    outs = tr.layer_outputs()
    text = open(path).read()
    have = {c["tensor"]: name for name, c in tr.checks.items() if c.get("at") == "micro-step"}
    extra = []
    names = {}
    for li, l in enumerate(tr.layers):
        t = f"{l['name']}.out"
        if t in have:
            names[li] = have[t]
            continue
        cname = f"diagnose_{l['name']}_out"
        names[li] = cname
        extra.append(f'[[checks]]\nname = "{cname}"\ntensor = "{t}"\nat = "micro-step"\n')
    loss_check = have.get("loss")
    if loss_check is None:
        loss_check = "diagnose_loss"
        extra.append(f'[[checks]]\nname = "{loss_check}"\ntensor = "loss"\nat = "micro-step"\n')
    i = text.find("\n[[checks]]")
    if i < 0:
        return "the layers' outputs were not compared (no [[checks]] table)"
    text = text[:i + 1] + "\n".join(extra) + "\n" + text[i + 1:]
    work = tempfile.mkdtemp(prefix="seedsweep-diagnose-")
    diag = os.path.join(work, "diagnose.toml")
    with open(diag, "w") as f:
        f.write(text)
    dump = os.path.join(work, "dump")
    r = run_binary(["repro", "--config", diag, "--scenario", tr.name, "--param", tr.param_id,
                    "--seed", str(tr.init_seed), "--profile", tr.profile, "--policy", "test",
                    "--dump", dump, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"the layers' outputs were not compared (seedsweep repro exited {r.returncode}: {r.stderr.strip()[-300:]})"
    cands = [d for d in os.listdir(dump) if os.path.isdir(os.path.join(dump, d))]
    if len(cands) != 1:
        return "the layers' outputs were not compared (no dump folder)"
    folder = os.path.join(dump, cands[0])
    labels = sorted((x for x in {k[2] for k in outs} if micro_key(x) <= until), key=micro_key)
    compared = 0
    for lab in labels:
        rows = [(li, comp) for li in range(len(tr.layers)) for comp in ("reference", "sharded")]
        for li, comp in rows + [("loss", "reference"), ("loss", "sharded")]:
            if li == "loss":
                syms = tr.loss_syms["ref" if comp == "reference" else "tp"]
                sym = next((x for x in syms if tr.micro_of(x) == lab), None)
                if sym is None or "value" not in sym.meta:
                    continue
                theirs, ops, cname = sym.meta["value"].reshape(-1), [tr.aten_of(sym)], loss_check
                what = f"the loss ({tr.loss_spec[0]})"
            else:
                got = outs.get((comp, li, lab))
                if got is None or got[0] is None:
                    continue
                theirs, ops = got
                cname = names[li]
                l = tr.layers[li]
                what = f"layer `{l['name']}` ({l['spec'][0]}{', ' + l['parallel'] if l['parallel'] != 'none' else ''})"
            f = os.path.join(folder, f"{comp}__{cname}__step{lab}__value.npy")
            if not os.path.exists(f):
                continue
            ours = np.load(f).reshape(-1)
            t = theirs.detach().contiguous().numpy().astype(np.float32).reshape(-1)
            if ours.size != t.size:
                continue
            compared += 1
            diff = np.nonzero(ours.view(np.uint32) != t.view(np.uint32))[0]
            if diff.size:
                j = int(diff[0])
                src = ", ".join(f"{op} at {line}" for op, line in ops)
                return (f"first op whose output differs: {what} in the {comp} computation at micro-step {lab}, "
                        f"the test's {src}: {diff.size} of {t.size} elements differ, first at flat index {j} "
                        f"(seedsweep {float(ours[j])!r} vs the test's {float(t[j])!r})")
    if not compared:
        return "the layers' outputs were not compared (no recorded values)"
    last = tr.label_str(until, "micro-step")
    return (f"every layer's output and the loss equal the test's bit for bit up to micro-step {last} ({compared} "
            "tensors compared): the difference arises in a backward or an optimizer step, not in the forward ops")


def main(argv):
    ap = argparse.ArgumentParser(prog="python -m seedsweep capture", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nodeid", help="path/test_x.py::test_name[param]")
    ap.add_argument("-o", "--out", required=True, help="the scenario file to write")
    ap.add_argument("--dump", help="keep seedsweep's dump of the test's seed in this folder")
    a = ap.parse_args(argv)
    if os.environ.get("ATEN_CPU_CAPABILITY") is None:
        env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
        os.execve(sys.executable, [sys.executable, "-m", "seedsweep", "capture", *argv], env)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("seedsweep capture: torch is not installed in this environment", file=sys.stderr)
        return 2
    if os.path.exists(a.out + ".tmp"):
        os.remove(a.out + ".tmp")
    res = capture(a.nodeid, a.out, keep_dump=a.dump)
    if res.errors:
        what = "is not expressible in the scenario language" if res.test_ran else "was not captured"
        print(f"seedsweep capture: {a.nodeid} {what}; no file written:", file=sys.stderr)
        for what, line in res.errors:
            print(f"  {line}: {what}", file=sys.stderr)
        return res.status or 2
    for e in res.failed_asserts:
        print(f"note: at the test's own seed the check at {e['line']} failed (recorded; capture went on)",
              file=sys.stderr)
    print(f"wrote {a.out}")
    print(res.verdict)
    return res.status
