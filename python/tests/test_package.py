"""Tests of the seedsweep Python package: capture, the mirror proof, the pytest plugin and the
pass-through. Run by hand (not in CI, which needs no Python), from anywhere, with the package
installed (`pip install ./python`) in an environment with torch 2.15:

    python -m pytest python/tests -q

Every expectation here is computed by the run under test (exit codes, the files written, the
verdict lines); the only fixed expectations are the committed captures of the examples, which
a fresh capture must reproduce byte for byte, and the counts of checked tensors, which follow
from the example tests' loops (4 checks, 2 tensors each: 2 at each of 6 micro-steps plus 2 at
each of 3 steps = 18 calls, 36 tensors; the classifier: 5 checks at each of 2 steps = 10
calls, 20 tensors; the pre-norm block: 4 checks at each of 2 steps, 16 tensors; the row-parallel
head: 3 checks at each of 10 micro-steps and 2 at each of 5 steps, 80 tensors; the attention
block: 4 checks at each of 3 steps and 2 after each step, 36 tensors; the SwiGLU MLP: 3 checks at
each of 4 micro-steps and 2 at each of 2 steps, 32 tensors; tests/data/test_sdpa_variants.py: 2
checks at each of 2 steps and 1 after each, 12 tensors).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # python/
ENV = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")


def run(args, cwd=PKG, **kw):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True, **kw)


@pytest.mark.parametrize("node,tensors", [
    ("examples/test_tp_mlp.py::test_tp_mlp_adamw[torch-default]", 36),
    ("examples/test_tp_mlp.py::test_tp_mlp_adamw[tight]", 36),
    ("examples/test_tp_classifier.py::test_tp_classifier_sgd[default]", 20),
    ("examples/test_tp_prenorm_block.py::test_tp_prenorm_block_adam", 16),
    ("examples/test_row_parallel_head.py::test_row_parallel_head_sgd", 80),
    ("examples/test_tp_attention.py::test_tp_attention_adamw", 36),
    ("examples/test_tp_swiglu.py::test_tp_swiglu_adamw", 32),
])
def test_capture_reproduces_committed_file_and_mirror_is_exact(node, tensors, tmp_path):
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", node, "-o", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    line = f"mirror exact on {tensors} of {tensors} checked tensors"
    assert r.stdout.strip().splitlines()[-1] == line
    text = out.read_text()
    assert f"# {line}\n" in text
    file, rest = node.split("::")
    name, _, param = rest.rstrip("]").partition("[")
    committed = os.path.join(PKG, "examples", "captures", f"{os.path.splitext(os.path.basename(file))[0]}.{name}"
                             + (f".{param}" if param else "") + ".toml")
    with open(committed) as f:
        assert text == f.read()


def test_unsupported_op_is_listed_with_its_line_and_nothing_is_written(tmp_path):
    src = os.path.join(PKG, "tests", "data", "test_unsupported_op.py")
    with open(src) as f:
        lines = f.read().splitlines()
    ref_line = 1 + next(i for i, l in enumerate(lines) if "ref_out = fc2(a * torch.sigmoid(a))" in l)
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_unsupported_op.py::test_tp_mlp_adamw[tight]",
             "-o", str(out)])
    assert r.returncode == 2
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")
    assert "not expressible in the scenario language; no file written" in r.stderr
    # `a * sigmoid(a)`: the product of two activations is the language's `mul`, the sigmoid is
    # not in the language; only the sigmoid is listed
    assert f"tests/data/test_unsupported_op.py:{ref_line}: aten.sigmoid.default is not in the language" in r.stderr
    assert "aten.mul" not in r.stderr


def test_mirror_proof_catches_a_test_the_file_does_not_compute(tmp_path):
    # The sharded optimizer's gradients are never zeroed, so they accumulate across steps; the
    # language zeroes them every step. The translation cannot see it; the proof must.
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_no_zero_grad.py::test_tp_mlp_adamw[tight]",
             "-o", str(out)])
    assert r.returncode == 3, r.stdout + r.stderr
    verdict = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"mirror NOT exact: (\d+) of 36 checked tensors equal; first difference: sharded "
                     r"fc1_weight \(fc1.weight\) at step 1 \(tests/data/test_no_zero_grad.py:\d+\) differs .*", verdict)
    assert m, verdict
    assert int(m.group(1)) < 36
    # the op behind that tensor, and where the difference arises: the forward ops (every layer's
    # output and the loss, both computations, 4 micro-steps up to the step-1 update: 4 x 8)
    # equal the test's, so it is the backward or the update, the step that zeroes no gradient
    with open(os.path.join(PKG, "tests", "data", "test_no_zero_grad.py")) as f:
        opt_line = 1 + next(i for i, l in enumerate(f.read().splitlines()) if "tp_opt = torch.optim.AdamW" in l)
    assert (f"that tensor comes from the optimizer step (AdamW, tests/data/test_no_zero_grad.py:{opt_line}) on "
            "layer `fc1`'s weight (linear, column)") in verdict, verdict
    assert verdict.endswith("every layer's output and the loss equal the test's bit for bit up to micro-step 1.1 "
                            "(32 tensors compared): the difference arises in a backward or an optimizer step, "
                            "not in the forward ops"), verdict
    assert f"# {verdict}\n" in out.read_text()


def test_plugin_reports_and_fails_the_too_tight_parametrization(tmp_path):
    r = run(["-m", "pytest", "examples/test_tp_mlp.py", "--seedsweep=200", "-p", "no:cacheprovider",
             "-o", "addopts="])
    out = r.stdout
    assert r.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "FAILED examples/test_tp_mlp.py::test_tp_mlp_adamw[tight]" in out
    assert "repro: python -m seedsweep repro --config " in out
    assert "Tensor-likes are not close!" in out
    assert out.count("mirror exact on 36 of 36 checked tensors") == 2
    # the report's failing seeds are those the sweep's own verdict lists
    assert re.search(r"failing seeds: \d+", out)


def test_drift_fails_when_the_test_changes(tmp_path):
    work = tmp_path / "w"
    (work / "captures").mkdir(parents=True)
    shutil.copy(os.path.join(PKG, "examples", "test_tp_mlp.py"), work / "test_tp_mlp.py")
    shutil.copy(os.path.join(PKG, "examples", "captures", "test_tp_mlp.test_tp_mlp_adamw.tight.toml"),
                work / "captures")
    args = ["-m", "pytest", "test_tp_mlp.py", "-k", "tight", "--seedsweep-drift", "-p", "no:cacheprovider"]
    same = run(args, cwd=work)
    assert same.returncode == 0, same.stdout
    assert "matches the fresh capture" in same.stdout
    src = (work / "test_tp_mlp.py").read_text().replace("lr=1e-3", "lr=2e-3")
    (work / "test_tp_mlp.py").write_text(src)
    changed = run(args, cwd=work)
    assert changed.returncode == 1, changed.stdout
    assert "seedsweep drift:" in changed.stdout
    assert "-lr = 0.001" in changed.stdout and "+lr = 0.002" in changed.stdout


def test_python_m_seedsweep_passes_through_to_the_binary():
    r = run(["-m", "seedsweep", "--version"])
    assert r.returncode == 0
    assert re.fullmatch(r"seedsweep \d+\.\d+\.\d+\n", r.stdout)


def test_imported_assert_close_and_allclose_are_recorded(tmp_path):
    # tests/data/test_aliases.py is the MLP example with `from torch.testing import assert_close`
    # (bound before capture patches torch) and `assert torch.allclose(...)` for the loss: the
    # capture must be the example's, but for the description naming the file.
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_aliases.py::test_tp_mlp_adamw[tight]", "-o", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "mirror exact on 36 of 36 checked tensors"
    body = lambda t: [l.split("   # ")[0] for l in t.splitlines() if not l.startswith(("#", "description"))]
    with open(os.path.join(PKG, "examples", "captures", "test_tp_mlp.test_tp_mlp_adamw.tight.toml")) as f:
        assert body(out.read_text()) == body(f.read())


def test_gradient_clipping_is_refused(tmp_path):
    src = os.path.join(PKG, "tests", "data", "test_clip.py")
    with open(src) as f:
        line = 1 + next(i for i, l in enumerate(f.read().splitlines()) if "clip_grad_norm_" in l)
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_clip.py::test_tp_mlp_adamw[tight]", "-o", str(out)])
    assert r.returncode == 2
    assert not out.exists()
    assert f"tests/data/test_clip.py:{line}: aten._foreach_mul_ on a gradient outside backward" in r.stderr


def test_row_parallel_head_with_a_wrong_shard_offset_is_refused(tmp_path):
    src = os.path.join(PKG, "tests", "data", "test_swapped_head_slices.py")
    with open(src) as f:
        line = 1 + next(i for i, l in enumerate(f.read().splitlines()) if "partials = [" in l)
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_swapped_head_slices.py::test_swapped_head_slices",
             "-o", str(out)])
    assert r.returncode == 2, r.stdout + r.stderr
    assert not out.exists()
    assert (f"tests/data/test_swapped_head_slices.py:{line}: a row-parallel matmul of the activation's columns "
            "(18, 36) with the weight's columns (0, 18)") in r.stderr


def variant_line(variant_marker):
    src = os.path.join(PKG, "tests", "data", "test_sdpa_variants.py")
    with open(src) as f:
        return 1 + next(i for i, l in enumerate(f.read().splitlines()) if variant_marker in l)


@pytest.mark.parametrize("variant,expect", [
    ("math-scale", ["op = \"sdpa\"", "heads = 6", "scale = 0.3\n"]),
    ("tril-mask", ["op = \"sdpa\"", "causal = true"]),
    ("softmax", ["op = \"sdpa\"", "causal = true", "op = \"softmax\""]),
])
def test_sdpa_under_math_translates_to_one_sdpa_layer(variant, expect, tmp_path):
    # the MATH backend's decomposition back to one `sdpa` layer with its heads (the whole
    # layer's 6, from 3 per rank), causal flag and scale; a boolean tril mask built as torch
    # builds the causal one is the same ops, so the same layer; a plain F.softmax after it is
    # the language's softmax. Each proves itself bit for bit.
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", f"tests/data/test_sdpa_variants.py::test_sdpa_variant[{variant}]",
             "-o", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "mirror exact on 12 of 12 checked tensors"
    text = out.read_text()
    for e in expect:
        assert e in text, (e, text)
    if variant == "math-scale":
        assert "causal" not in text


def test_sdpa_flash_kernel_is_refused_with_its_line(tmp_path):
    line = variant_line("is_causal=True)")
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_sdpa_variants.py::test_sdpa_variant[flash]",
             "-o", str(out)])
    assert r.returncode == 2, r.stdout + r.stderr
    assert not out.exists() and not os.path.exists(str(out) + ".tmp")
    assert (f"tests/data/test_sdpa_variants.py:{line}: F.scaled_dot_product_attention ran "
            "aten._scaled_dot_product_flash_attention_for_cpu") in r.stderr
    assert "sdpa_kernel(SDPBackend.MATH)" in r.stderr


def test_sdpa_attention_mask_is_refused_with_its_line(tmp_path):
    src = os.path.join(PKG, "tests", "data", "test_sdpa_variants.py")
    with open(src) as f:
        lines = f.read().splitlines()
    mask_line = 1 + next(i for i, l in enumerate(lines) if "torch.full((s, s), -1.0).triu(1)" in l)
    call_line = mask_line + 1
    assert "attn_mask=mask" in lines[call_line - 1]
    out = tmp_path / "out.toml"
    r = run(["-m", "seedsweep", "capture", "tests/data/test_sdpa_variants.py::test_sdpa_variant[mask]",
             "-o", str(out)])
    assert r.returncode == 2, r.stdout + r.stderr
    assert not out.exists()
    assert (f"tests/data/test_sdpa_variants.py:{call_line}: F.scaled_dot_product_attention: an attention mask "
            f"other than is_causal=True's (the mask made at tests/data/test_sdpa_variants.py:{mask_line})") in r.stderr


def test_mirror_proof_names_the_first_op_that_differs(tmp_path):
    # A translation bug planted on purpose (tests/data/mistranslate.py writes gelu-tanh where the
    # test runs the exact gelu): the first differing checked tensor is fc2's output, but the
    # first op whose output differs is the gelu, in the reference computation (compared before
    # the sharded one) at micro-step 0.0; fc1 before it still equals the test's.
    with open(os.path.join(PKG, "examples", "test_tp_mlp.py")) as f:
        src = f.read().splitlines()
    ref_line = 1 + next(i for i, l in enumerate(src) if "ref_out = fc2(F.gelu(fc1(x)))" in l)
    out = tmp_path / "out.toml"
    r = run(["tests/data/mistranslate.py", 'op = "gelu"', 'op = "gelu-tanh"',
             "examples/test_tp_mlp.py::test_tp_mlp_adamw[tight]", "-o", str(out)])
    assert r.returncode == 3, r.stdout + r.stderr
    verdict = r.stdout.strip().splitlines()[-1]
    assert verdict.startswith("mirror NOT exact: 0 of 36 checked tensors equal; first difference: sharded fc2_out "
                              "(fc2.out) at step 0.0"), verdict
    assert "that tensor comes from layer `fc2` (linear, row) forward" in verdict, verdict
    assert (f"first op whose output differs: layer `gelu1` (gelu) in the reference computation at micro-step 0.0, "
            f"the test's aten.gelu.default at examples/test_tp_mlp.py:{ref_line}:") in verdict, verdict
    assert f"# {verdict}\n" in out.read_text()


def test_mirror_proof_names_a_mistranslated_attention(tmp_path):
    # The attention example with `causal = true` dropped from its sdpa layer: q, k and v still
    # equal the test's, the attention is the first op that differs, named with the line of the
    # F.scaled_dot_product_attention call.
    with open(os.path.join(PKG, "examples", "test_tp_attention.py")) as f:
        src = f.read().splitlines()
    call = 1 + next(i for i, l in enumerate(src) if "F.scaled_dot_product_attention(" in l)
    out = tmp_path / "out.toml"
    r = run(["tests/data/mistranslate.py", "causal = true", "",
             "examples/test_tp_attention.py::test_tp_attention_adamw", "-o", str(out)])
    assert r.returncode == 3, r.stdout + r.stderr
    verdict = r.stdout.strip().splitlines()[-1]
    assert verdict.startswith("mirror NOT exact: 0 of 36 checked tensors equal; first difference: sharded wo_out "), \
        verdict
    assert ("first op whose output differs: layer `sdpa1` (sdpa) in the reference computation at micro-step 0, the "
            "test's F.scaled_dot_product_attention (the math path: bmm, _safe_softmax, bmm) at "
            f"examples/test_tp_attention.py:{call}:") in verdict, verdict
