"""Recording a PyTorch test as it runs (one process, eager, CPU).

What is recorded, in program order (`Recorder.events`):
- `torch.manual_seed(v)` calls (`seed`);
- module construction of `nn.Linear`, `nn.Embedding`, `nn.LayerNorm`, `nn.RMSNorm` with their
  arguments, and the generator draws their default init makes (`module`);
- every other generator draw, as the aten op a `TorchDispatchMode` sees (`aten.randn`,
  `aten.randint`, `aten.normal_`, `aten.uniform_`: `draw`);
- every other aten op of the forward computations, as a symbolic node (`Sym`) whose arguments
  are the nodes of its tensor arguments, so that a checked tensor can be traced back to the
  draws and parameters it came from; ops that do not change values (detach, clone, views that
  keep the element order) map to their input's node;
- `Tensor.backward` / `torch.autograd.backward` calls (`backward`), whose aten ops are not
  recorded (autograd computes them from the forward ops);
- optimizer construction (`optimizer`: class, hyperparameters, parameters) and every
  `optimizer.step()` (`step`), whose aten ops are not recorded;
- every `torch.testing.assert_close` and `torch.allclose` call (`check`): both tensors (their
  nodes and a copy of their values), rtol, atol, the source line, and whether it passed.

Every event carries the test's source line (the innermost frame outside torch, pytest and this
package). Nothing here interprets the events; `translate.py` does.
"""
import functools
import os
import re
import sys
import threading
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

_HERE = os.path.dirname(os.path.abspath(__file__))
_SKIP = (os.path.dirname(torch.__file__), _HERE, os.sep + "_pytest" + os.sep, os.sep + "pluggy" + os.sep,
         os.sep + "contextlib.py", os.sep + "unittest" + os.sep)


def user_frame(depth=2):
    """The innermost frame that belongs to the test (not torch, pytest or this package)."""
    f = sys._getframe(depth)
    while f is not None:
        fn = f.f_code.co_filename
        if not any(s in fn for s in _SKIP):
            return f
        f = f.f_back
    return None


def user_line(depth=3):
    f = user_frame(depth)
    if f is None:
        return "<unknown>"
    fn = f.f_code.co_filename
    try:
        rel = os.path.relpath(fn)
        fn = rel if not rel.startswith("..") else fn
    except ValueError:
        pass
    return f"{fn}:{f.f_lineno}"


def assigned_name(depth=3):
    """The name a source line assigns to (`x = torch.randn(...)` -> `x`, `self.fc1 = ...` ->
    `fc1`), or None."""
    f = user_frame(depth)
    if f is None:
        return None
    import linecache
    src = linecache.getline(f.f_code.co_filename, f.f_lineno)
    m = re.match(r"\s*(?:self\.)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]+)?=[^=]", src)
    return m.group(1) if m else None


@dataclass(eq=False)
class Sym:
    """A node of the recorded computation: `op` (an aten op name such as `aten.addmm`, or
    `param`, `input`, `leaf`, `const`), its arguments (Syms for tensors, plain values
    otherwise) and the source line."""
    op: str
    args: tuple = ()
    line: str = ""
    meta: dict = field(default_factory=dict)

    def __repr__(self):
        return f"Sym({self.op}@{self.line})"


# ops that leave every element's value where it was (the node of the output is the input's)
_IDENTITY = {"aten.detach", "aten.alias", "aten.view", "aten._unsafe_view", "aten.reshape",
             "aten._reshape_alias", "aten.lift_fresh", "aten.lift_fresh_copy", "aten.contiguous"}
_DRAWS = {"aten.randn", "aten.randint", "aten.normal_", "aten.uniform_", "aten.rand", "aten.randperm",
          "aten.bernoulli_", "aten.random_", "aten.exponential_", "aten.normal", "aten.bernoulli",
          "aten.multinomial", "aten.rand_like", "aten.randn_like", "aten.randint_like"}
# factories whose values do not depend on the generator
_FACTORIES = {"aten.empty", "aten.zeros", "aten.ones", "aten.full", "aten.arange", "aten.empty_like",
              "aten.zeros_like", "aten.ones_like", "aten.full_like", "aten.scalar_tensor", "aten.empty_strided"}

# F.scaled_dot_product_attention's fused kernels: the language's `sdpa` is the MATH backend's
# decomposition (`_scaled_dot_product_attention_math`), which a dispatch mode sees op by op
SDPA_FUSED = {"aten._scaled_dot_product_flash_attention_for_cpu", "aten._scaled_dot_product_flash_attention",
              "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_cudnn_attention",
              "aten._scaled_dot_product_fused_attention_overrideable"}


def sdpa_fused_message(name):
    return (f"F.scaled_dot_product_attention ran {name} (a fused kernel: torch's default CPU backend is the "
            "flash kernel), which the language does not model; run the attention under "
            "`with torch.nn.attention.sdpa_kernel(SDPBackend.MATH):`, the math path the language's sdpa is")


MODULE_KINDS = (nn.Linear, nn.Embedding, nn.LayerNorm, getattr(nn, "RMSNorm", nn.LayerNorm))


def op_name(func):
    """`aten.addmm.default` -> `aten.addmm`."""
    s = str(func)
    parts = s.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else s


# the forward ops' output values are kept (a copy each) up to this many bytes, so that a mirror
# that is not exact can name the first op whose output differs (`capture.diagnose`)
VALUE_BUDGET = int(os.environ.get("SEEDSWEEP_CAPTURE_VALUE_BYTES", 256 << 20))


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.value_bytes = 0
        self.events = []
        self.node = {}          # id(tensor) -> Sym
        self.keep = []          # strong references, so that ids stay unique
        self.modules = []       # [(module, kind, cfg, name, line)]
        self.optimizers = []    # [optimizer]
        self.quiet = 0          # > 0: inside module init, backward or optimizer step
        self.phase = None
        self.threads = set()
        self.capture_mode = True   # assert_close records and does not raise
        self.failures = []

    # -- tensors <-> nodes -------------------------------------------------------------------

    def sym(self, t):
        s = self.node.get(id(t))
        if s is None:
            s = Sym("unknown-tensor", (), user_line(4), {"shape": tuple(t.shape), "dtype": str(t.dtype)})
            self.bind(t, s)
        return s

    def bind(self, t, s):
        self.node[id(t)] = s
        self.keep.append(t)

    def keep_value(self, s, out):
        """Stores a copy of a forward op's float output in `s.meta["value"]` (within the
        budget) and the event position it ran at (`s.meta["ev"]`: ops after the k-th data seed
        belong to that micro-step)."""
        s.meta["ev"] = len(self.events)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.device.type == "cpu":
            n = out.numel() * out.element_size()
            if self.value_bytes + n <= VALUE_BUDGET:
                self.value_bytes += n
                s.meta["value"] = out.detach().clone()

    def arg(self, a):
        if isinstance(a, torch.Tensor):
            return self.sym(a)
        if isinstance(a, (list, tuple)):
            return tuple(self.arg(x) for x in a)
        return a

    # -- the dispatch mode ------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = op_name(func)
        self.threads.add(torch.get_num_threads())
        if name in _DRAWS:
            if self.phase == "module":
                self.events[-1]["draws"].append((name, [a for a in args if not isinstance(a, torch.Tensor)]))
            else:
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else ()
                line = user_line(3)
                s = Sym("draw", (name,), line, {"shape": shape, "args": [a for a in args if not isinstance(a, torch.Tensor)],
                                                "kwargs": {k: v for k, v in kwargs.items() if k in ("dtype", "generator")},
                                                "dtype": str(out.dtype) if isinstance(out, torch.Tensor) else None,
                                                "name": assigned_name(3)})
                self.events.append({"ev": "draw", "sym": s, "line": line, "quiet": self.quiet > 0})
                if isinstance(out, torch.Tensor):
                    self.bind(out, s)
            return out
        if self.quiet:
            return out
        if name in _FACTORIES:
            s = Sym(name, tuple(self.arg(a) for a in args), user_line(3), {"kwargs": dict(kwargs)})
            if isinstance(out, torch.Tensor):
                self.bind(out, s)
            return out
        if name in _IDENTITY and args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor):
            self.bind(out, self.sym(args[0]))
            return out
        if name == "aten.clone" and args and isinstance(out, torch.Tensor):
            # a copy: the same values, but its own tensor (a leaf of the sharded copy, a rank's input)
            c = Sym("copy", (self.sym(args[0]),), user_line(3))
            self.keep_value(c, out)
            self.bind(out, c)
            return out
        if isinstance(out, torch.Tensor) and out.device.type != "cpu":
            self.events.append({"ev": "unsupported", "line": user_line(3),
                                "what": f"{name} on {out.device}: capture mirrors torch on the CPU"})
        if name == "aten._to_copy" and args and isinstance(args[0], torch.Tensor):
            if isinstance(out, torch.Tensor) and out.dtype == args[0].dtype and out.device == args[0].device:
                self.bind(out, self.sym(args[0]))
                return out
        if name == "aten.slice" and args and isinstance(args[0], torch.Tensor):
            t = args[0]
            dim = args[1] if len(args) > 1 else 0
            start = args[2] if len(args) > 2 else None
            end = args[3] if len(args) > 3 else None
            step = args[4] if len(args) > 4 else 1
            dim = dim % t.dim()
            size = t.shape[dim]
            start = 0 if start is None else (start + size if start < 0 else min(start, size))
            end = size if end is None else (end + size if end < 0 else min(end, size))
            if step == 1 and start == 0 and end == size:
                self.bind(out, self.sym(t))
                return out
            s = Sym("slice", (self.sym(t), dim, start, end, step), user_line(3), {"shape": tuple(out.shape)})
            self.bind(out, s)
            return out
        line = user_line(3)
        if name in SDPA_FUSED:
            self.events.append({"ev": "unsupported", "line": line, "what": sdpa_fused_message(name)})
        if name.endswith("_") or name in ("aten.copy_", "aten._foreach_mul_", "aten._foreach_div_"):
            # an in-place op on a gradient or a parameter outside backward and the optimizer's
            # step (clipping, scaling, zero_grad(set_to_none=False), a hand-made update):
            # numerics the language does not have, and that may act at other seeds only
            flat = []
            for a in args:
                flat.extend(a if isinstance(a, (list, tuple)) else [a])
            for a in flat:
                if isinstance(a, torch.Tensor):
                    sa = self.node.get(id(a))
                    if sa is not None and sa.op in ("grad", "param") or (
                            sa is not None and sa.op == "copy" and a.is_leaf and a.requires_grad):
                        self.events.append({"ev": "unsupported", "line": line,
                                            "what": f"{name} on a {'gradient' if sa.op == 'grad' else 'parameter'} "
                                                    "outside backward and optimizer.step()"})
                        break
        s = Sym(name, tuple(self.arg(a) for a in args), line,
                {"kwargs": {k: self.arg(v) for k, v in kwargs.items()},
                 "shape": tuple(out.shape) if isinstance(out, torch.Tensor) else None,
                 "overload": str(func)})
        if isinstance(out, torch.Tensor):
            self.keep_value(s, out)
            self.bind(out, s)
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    g = Sym("getitem", (s, i), line)
                    self.keep_value(g, o)
                    self.bind(o, g)
        return out

    # -- patches -----------------------------------------------------------------------------

    def install(self):
        self._saved = []
        rec = self

        def patch(owner, attr, wrapper):
            orig = getattr(owner, attr)
            self._saved.append((owner, attr, orig))
            setattr(owner, attr, wrapper(orig))

        def seed_wrap(orig):
            @functools.wraps(orig)
            def manual_seed(seed):
                rec.events.append({"ev": "seed", "value": int(seed), "line": user_line(2)})
                return orig(seed)
            return manual_seed

        patch(torch, "manual_seed", seed_wrap)
        patch(torch.random, "manual_seed", seed_wrap)

        for cls in set(MODULE_KINDS):
            def init_wrap(orig, cls=cls):
                @functools.wraps(orig)
                def __init__(mod, *a, **kw):
                    if type(mod) is not cls or rec.phase == "module":
                        return orig(mod, *a, **kw)
                    ev = {"ev": "module", "kind": cls.__name__, "args": a, "kwargs": dict(kw),
                          "line": user_line(2), "name": assigned_name(2), "draws": [], "index": len(rec.modules)}
                    rec.events.append(ev)
                    rec.phase = "module"
                    rec.quiet += 1
                    try:
                        orig(mod, *a, **kw)
                    finally:
                        rec.quiet -= 1
                        rec.phase = None
                    ev["module"] = mod
                    rec.modules.append(mod)
                    for pname, p in mod.named_parameters(recurse=False):
                        rec.bind(p, Sym("param", (ev["index"], pname), ev["line"]))
                return __init__
            patch(cls, "__init__", init_wrap)

        def backward_wrap(orig):
            @functools.wraps(orig)
            def backward(t, *a, **kw):
                rec.events.append({"ev": "backward", "sym": rec.sym(t), "line": user_line(2),
                                   "args": a, "kwargs": dict(kw)})
                rec.quiet += 1
                try:
                    return orig(t, *a, **kw)
                finally:
                    rec.quiet -= 1
                    rec.bind_grads()
            return backward

        patch(torch.Tensor, "backward", backward_wrap)

        def autograd_backward_wrap(orig):
            @functools.wraps(orig)
            def backward(*a, **kw):
                if rec.quiet:
                    return orig(*a, **kw)
                rec.events.append({"ev": "unsupported", "what": "torch.autograd.backward called directly",
                                   "line": user_line(2)})
                return orig(*a, **kw)
            return backward

        patch(torch.autograd, "backward", autograd_backward_wrap)

        def grad_wrap(orig):
            @functools.wraps(orig)
            def grad(*a, **kw):
                rec.events.append({"ev": "unsupported", "what": "torch.autograd.grad", "line": user_line(2)})
                return orig(*a, **kw)
            return grad

        patch(torch.autograd, "grad", grad_wrap)

        fn_cls = torch.autograd.Function
        orig_apply = fn_cls.__dict__["apply"]
        self._saved.append((fn_cls, "apply", orig_apply))

        def apply(cls, *a, **kw):
            if not rec.quiet:
                rec.events.append({"ev": "unsupported", "line": user_line(2),
                                   "what": f"custom autograd Function {cls.__name__} (its backward is its own code, "
                                           "not recorded)"})
            return orig_apply.__func__(cls, *a, **kw)

        fn_cls.apply = classmethod(apply)

        def hook_wrap(orig):
            @functools.wraps(orig)
            def register(*a, **kw):
                rec.events.append({"ev": "unsupported", "line": user_line(2),
                                   "what": f"{orig.__name__}: a hook changes gradients the language does not see"})
                return orig(*a, **kw)
            return register

        patch(torch.Tensor, "register_hook", hook_wrap)
        for attr in ("register_full_backward_hook", "register_backward_hook", "register_full_backward_pre_hook"):
            patch(nn.Module, attr, hook_wrap)

        def opt_init_wrap(orig):
            @functools.wraps(orig)
            def __init__(opt, params, defaults, *a, **kw):
                params = list(params)
                orig(opt, params, defaults, *a, **kw)
                if any(o is opt for o in rec.optimizers):
                    return
                rec.optimizers.append(opt)
                groups = []
                for g in opt.param_groups:
                    groups.append({"params": [rec.sym(p) for p in g["params"]],
                                   "tensors": list(g["params"]),
                                   "hyper": {k: v for k, v in g.items() if k != "params"}})
                rec.events.append({"ev": "optimizer", "index": len(rec.optimizers) - 1, "cls": type(opt).__name__,
                                   "groups": groups, "line": user_line(2), "opt": opt})
            return __init__

        patch(torch.optim.Optimizer, "__init__", opt_init_wrap)

        def pre(opt, args, kwargs):
            idx = next((i for i, o in enumerate(rec.optimizers) if o is opt), None)
            rec.events.append({"ev": "step", "index": idx, "line": user_line(2),
                               "lrs": [g.get("lr") for g in opt.param_groups]})
            rec.quiet += 1

        def post(opt, args, kwargs):
            rec.quiet -= 1

        optmod = sys.modules[torch.optim.Optimizer.__module__]
        self._hooks = [optmod.register_optimizer_step_pre_hook(pre),
                       optmod.register_optimizer_step_post_hook(post)]

        def assert_close_wrap(orig):
            @functools.wraps(orig)
            def assert_close(actual, expected, *a, **kw):
                return rec.check("assert_close", orig, actual, expected, a, kw)
            return assert_close

        patch(torch.testing, "assert_close", assert_close_wrap)

        def allclose_wrap(orig):
            @functools.wraps(orig)
            def allclose(input, other, *a, **kw):
                if rec.quiet:
                    return orig(input, other, *a, **kw)
                return rec.check("allclose", orig, input, other, a, kw)
            return allclose

        patch(torch, "allclose", allclose_wrap)
        patch(torch.Tensor, "allclose", allclose_wrap)

        # `from torch.testing import assert_close` (and the like) bound the originals in the
        # test's modules before the patches: rebind those names too, for the run
        wrapped = {id(orig): getattr(owner, attr) for owner, attr, orig in self._saved}
        torch_dir = os.path.dirname(torch.__file__)
        for mod in list(sys.modules.values()):
            f = getattr(mod, "__file__", None) or ""
            if mod is None or f.startswith(torch_dir) or f.startswith(_HERE):
                continue
            try:
                items = list(vars(mod).items())
            except TypeError:
                continue
            for name, val in items:
                if callable(val) and id(val) in wrapped and not isinstance(val, type):
                    self._saved.append((mod, name, val))
                    setattr(mod, name, wrapped[id(val)])

    def uninstall(self):
        for h in getattr(self, "_hooks", []):
            h.remove()
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)
        self._saved = []

    def check(self, kind, orig, actual, expected, a, kw):
        line = user_line(3)
        ev = {"ev": "check", "kind": kind, "line": line}
        if kind == "assert_close":
            names = ["allow_subclasses", "rtol", "atol", "equal_nan", "check_device", "check_dtype",
                     "check_layout", "check_stride", "msg"]
            opts = dict(zip(names, a))
            opts.update(kw)
            ev["rtol"], ev["atol"] = opts.get("rtol"), opts.get("atol")
            ev["extra"] = {k: v for k, v in opts.items() if k not in ("rtol", "atol")}
        else:
            names = ["rtol", "atol", "equal_nan"]
            opts = dict(zip(names, a))
            opts.update(kw)
            ev["rtol"], ev["atol"] = opts.get("rtol", 1e-5), opts.get("atol", 1e-8)
            ev["extra"] = {k: v for k, v in opts.items() if k not in ("rtol", "atol")}
        ok_types = isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
        if ok_types:
            ev["actual"], ev["expected"] = self.sym(actual), self.sym(expected)
            ev["actual_tensor"], ev["expected_tensor"] = actual, expected
            ev["actual_value"] = actual.detach().clone()
            ev["expected_value"] = expected.detach().clone()
        else:
            ev["unsupported"] = f"{kind} on {type(actual).__name__} / {type(expected).__name__} (tensors only)"
        self.events.append(ev)
        self.quiet += 1
        try:
            if kind == "assert_close":
                try:
                    out = orig(actual, expected, *a, **kw)
                    ev["passed"] = True
                    return out
                except AssertionError as e:
                    ev["passed"] = False
                    ev["message"] = str(e)
                    if not self.capture_mode:
                        raise
                    self.failures.append(ev)
                    return None
            out = orig(actual, expected, *a, **kw)
            ev["passed"] = bool(out)
            if not out and self.capture_mode:
                # recorded; the run goes on to the test's later checks (as for assert_close)
                self.failures.append(ev)
                ev["message"] = f"torch.allclose(..., rtol={ev['rtol']}, atol={ev['atol']}) is False"
                return True
            return out
        finally:
            self.quiet -= 1

    def bind_grads(self):
        """After a backward: every recorded leaf's `.grad` gets the node `grad(leaf)`."""
        seen = set()
        leaves = [p for m in self.modules for p in m.parameters(recurse=False)] + list(self.keep)
        for t in leaves:
            if id(t) in seen or not isinstance(t, torch.Tensor) or not t.is_leaf or not t.requires_grad:
                continue
            seen.add(id(t))
            if t.grad is not None:
                self.bind(t.grad, Sym("grad", (self.sym(t),), ""))

    def __enter__(self):
        self.install()
        try:
            return super().__enter__()
        except BaseException:
            self.uninstall()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self.uninstall()
