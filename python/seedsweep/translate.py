"""From a recording (`record.Recorder`) to a scenario file of the language
(docs/scenario-language.md), or to the list of what the language cannot express.

Scope of this increment: one process, plain PyTorch, two computations compared by the test:
an unsharded reference built from `nn.Linear` / `nn.Embedding` / `nn.LayerNorm` modules, and a
tensor-parallel copy emulated in one process as `scripts/torch_mirror.py` writes it (each
rank's shard of a weight its own leaf, sliced from the module's initial weight and cloned;
column-parallel `torch.matmul(x, w_r.t()) + b_r`; elementwise activations per rank;
row-parallel `torch.matmul(h_r, w_r.t())` per rank, the partials summed, the bias added once
after). Each piece is matched op by op against the aten ops the test ran; whatever does not
match one of these forms exactly is reported with its source line, and no file is written.
Nothing is guessed: a form that would compute other bits (an `F.linear` on a shard, a
`torch.stack(...).sum(0)` all-reduce, a learning-rate schedule) is refused, not approximated.
"""
import math
import re

from .record import SDPA_FUSED, Sym, sdpa_fused_message

ACTS = {"aten.tanh": "tanh", "aten.relu": "relu", "aten.silu": "silu"}
TORCH_DEFAULT_TOL = {"float32": (1.3e-6, 1e-5)}


class CaptureError(Exception):
    """What the language cannot express: `items` is [(what, line)]."""

    def __init__(self, items):
        items = list(dict.fromkeys(items))
        super().__init__("\n".join(f"{line}: {what}" for what, line in items))
        self.items = items


def unwrap(s):
    """Skips value-preserving copies (`clone`)."""
    while isinstance(s, Sym) and s.op == "copy":
        s = s.args[0]
    return s


def is_t(s):
    return isinstance(s, Sym) and s.op in ("aten.t",) or (
        isinstance(s, Sym) and s.op == "aten.transpose" and sorted(x % 2 for x in s.args[1:3]) == [0, 1])


def fmt_float(v):
    r = repr(float(v))
    return r


def toml_str(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


class Translator:
    def __init__(self, rec, test_id, param_id):
        self.rec = rec
        self.test_id = test_id
        self.param_id = param_id or "default"
        self.errors = []
        self.layers = []          # reference layers in forward order: dicts
        self.ref_memo = {}        # id(Sym) -> ("input", name) | ("layer", index)
        self.tp_memo = {}
        self.inputs = []          # [{name, draw, shape, high, sym_index}]
        self.input_of = {}        # id(draw Sym) -> input name
        self.module_layer = {}    # module index -> layer index
        self.tp = 1
        self.shard_ranges = {}    # module index -> [(lo, hi)] in rank order
        self.rank_order_sum = False
        self.produced = []        # [(side, Sym, parsed value)]: the test's op behind each layer output

    def fail(self, what, line):
        self.errors.append((what, line))

    # ------------------------------------------------------------------------------------
    def run(self):
        rec = self.rec
        for e in rec.events:
            if e["ev"] == "unsupported":
                self.fail(e["what"], e["line"])
        import torch
        if rec.threads - {1}:
            self.fail(f"torch ran with {sorted(rec.threads)} threads; capture models one thread "
                      "(torch.set_num_threads(1))", "<run>")
        cap = torch.backends.cpu.get_cpu_capability()
        if cap != "AVX2":
            self.fail(f"torch's CPU capability is {cap}; the cpu-fma profile models the AVX2 ATen kernels "
                      "(ATEN_CPU_CAPABILITY=avx2)", "<run>")
        self.timeline()
        if self.errors:
            raise CaptureError(self.errors)
        self.optimizers()
        self.forward()
        self.check_list()
        if self.errors:
            raise CaptureError(self.errors)
        return self.emit()

    # -- seeds, modules, draws, steps --------------------------------------------------------
    def timeline(self):
        ev = self.rec.events
        mods = [i for i, e in enumerate(ev) if e["ev"] == "module"]
        if not mods:
            self.fail("no nn.Linear / nn.Embedding / nn.LayerNorm module constructed; the language's weights are "
                      "modules built after torch.manual_seed", "<run>")
            return
        seeds_before = [i for i in range(mods[0]) if ev[i]["ev"] == "seed"]
        if not seeds_before:
            self.fail("modules constructed without torch.manual_seed before them", ev[mods[0]]["line"])
            return
        si = seeds_before[-1]
        self.init_seed = ev[si]["value"]
        for i in range(si + 1, mods[-1]):
            e = ev[i]
            if e["ev"] == "draw" and not e["quiet"]:
                self.fail(f"{e['sym'].args[0]} between the init seed and the last module: the language draws "
                          "the weights in construction order right after torch.manual_seed", e["line"])
            if e["ev"] == "seed":
                self.fail("torch.manual_seed between module constructions", e["line"])
        self.module_events = [ev[i] for i in mods]
        for m in self.module_events:
            self.check_module(m)
        # data: every seed after the modules starts a micro-step's draws
        data = [i for i in range(mods[-1] + 1, len(ev)) if ev[i]["ev"] == "seed"]
        draws_before = [ev[i] for i in range(mods[-1] + 1, data[0] if data else len(ev))
                        if ev[i]["ev"] == "draw" and not ev[i]["quiet"]]
        for d in draws_before:
            self.fail(f"{d['sym'].args[0]} drawn from the weights' generator stream; the language draws "
                      "inputs after torch.manual_seed(data.seed + micro_steps*s + m)", d["line"])
        if not data:
            self.fail("no torch.manual_seed after the modules: the language reseeds before every micro-step's "
                      "inputs", "<run>")
            return
        self.data_seed = ev[data[0]]["value"]
        for k, i in enumerate(data):
            if ev[i]["value"] != self.data_seed + k:
                self.fail(f"torch.manual_seed({ev[i]['value']}) for micro-step {k}; the language seeds micro-step "
                          f"k with data.seed + k = {self.data_seed + k}", ev[i]["line"])
        self.data_idx = data
        bounds = data[1:] + [len(ev)]
        seqs = []
        for k, (a, b) in enumerate(zip(data, bounds)):
            seq = [ev[i] for i in range(a + 1, b) if ev[i]["ev"] == "draw"]
            for d in seq:
                if d["quiet"]:
                    self.fail(f"{d['sym'].args[0]} inside a backward or an optimizer step", d["line"])
            seqs.append(seq)
        first = seqs[0]
        for k, seq in enumerate(seqs):
            sig = [(d["sym"].args[0], d["sym"].meta["shape"], tuple(d["sym"].meta["args"][:1])) for d in seq]
            sig0 = [(d["sym"].args[0], d["sym"].meta["shape"], tuple(d["sym"].meta["args"][:1])) for d in first]
            if sig != sig0:
                self.fail(f"micro-step {k} draws {sig}, micro-step 0 drew {sig0}; the language draws the same "
                          "inputs every micro-step", seq[0]["line"] if seq else ev[data[k]]["line"])
        used = set()
        for j, d in enumerate(first):
            s = d["sym"]
            op = s.args[0]
            name = s.meta.get("name") or f"input{j}"
            if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) or name in used:
                name = f"input{j}"
            used.add(name)
            inp = {"name": name, "shape": list(s.meta["shape"]), "line": d["line"]}
            if op == "aten.randn" and s.meta["dtype"] == "torch.float32" and "generator" not in s.meta["kwargs"]:
                inp["draw"] = "randn"
            elif op == "aten.randint" and s.meta["dtype"] == "torch.int64" and "generator" not in s.meta["kwargs"]:
                a = s.meta["args"]
                if len(a) >= 2 and isinstance(a[0], int) and isinstance(a[1], int):
                    self.fail(f"torch.randint(low={a[0]}, high={a[1]}, ...): the language draws randint(high, shape)",
                              d["line"])
                    continue
                inp["draw"] = "randint"
                inp["high"] = a[0]
            else:
                self.fail(f"{op} ({s.meta['dtype']}{', own generator' if 'generator' in s.meta['kwargs'] else ''}) "
                          "as an input: the language draws randn (float32) and randint (int64) from the default "
                          "generator", d["line"])
                continue
            self.inputs.append(inp)
        for seq in seqs:
            for j, d in enumerate(seq):
                if j < len(self.inputs):
                    self.input_of[id(d["sym"])] = self.inputs[j]["name"]
        # steps
        self.steps_ev = [(i, e) for i, e in enumerate(ev) if e["ev"] == "step"]
        self.backward_ev = [(i, e) for i, e in enumerate(ev) if e["ev"] == "backward"]

    def check_module(self, m):
        kind, a, kw = m["kind"], m["args"], m["kwargs"]
        names = {"Linear": ["in_features", "out_features", "bias", "device", "dtype"],
                 "Embedding": ["num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type",
                               "scale_grad_by_freq", "sparse", "_weight", "_freeze", "device", "dtype"],
                 "LayerNorm": ["normalized_shape", "eps", "elementwise_affine", "bias", "device", "dtype"],
                 "RMSNorm": ["normalized_shape", "eps", "elementwise_affine", "device", "dtype"]}[kind]
        cfg = dict(zip(names, a))
        cfg.update(kw)
        m["cfg"] = cfg
        bad = {k: v for k, v in cfg.items() if k in ("device", "dtype", "max_norm", "_weight") and v is not None}
        if cfg.get("scale_grad_by_freq") or cfg.get("sparse") or cfg.get("_freeze") or bad:
            self.fail(f"nn.{kind} with {bad or 'scale_grad_by_freq/sparse/_freeze'}: the language's {kind} is "
                      "float32 on the CPU with torch's defaults", m["line"])
        expect = {"Linear": ["aten.uniform_"] * (2 if cfg.get("bias", True) else 1),
                  "Embedding": ["aten.normal_"], "LayerNorm": [], "RMSNorm": []}[kind]
        got = [d[0] for d in m["draws"]]
        if got != expect:
            self.fail(f"nn.{kind} init drew {got}, torch's default init draws {expect}", m["line"])
        if kind == "RMSNorm" and cfg.get("eps") is None:
            self.fail("nn.RMSNorm(eps=None) (torch's finfo eps); give eps", m["line"])
        if kind in ("LayerNorm", "RMSNorm"):
            ns = cfg["normalized_shape"]
            if isinstance(ns, (list, tuple)) and len(ns) != 1:
                self.fail(f"nn.{kind} over {ns}: the language normalises the last dim", m["line"])

    def module(self, idx):
        return self.module_events[idx]

    # -- optimizers ---------------------------------------------------------------------------
    def optimizers(self):
        opts = [e for e in self.rec.events if e["ev"] == "optimizer"]
        if len(opts) != 2:
            self.fail(f"{len(opts)} optimizers; capture takes a test with two, the reference's and the sharded "
                      "copy's", opts[0]["line"] if opts else "<run>")
            return
        self.opts = opts
        for o in opts:
            if len(o["groups"]) != 1:
                self.fail(f"{o['cls']} with {len(o['groups'])} parameter groups (the language has one)", o["line"])
        kinds = []
        for o in opts:
            ps = o["groups"][0]["params"] if o["groups"] else []
            kinds.append("ref" if ps and all(p.op == "param" for p in ps) else
                         "tp" if ps and all(p.op == "copy" for p in ps) else "mixed")
        if sorted(kinds) != ["ref", "tp"]:
            self.fail(f"optimizers over {kinds}: one must step the modules' own parameters (the reference), the "
                      "other the sharded copy's leaves (clones of slices of them)", opts[0]["line"])
            return
        self.ref_opt = opts[kinds.index("ref")]
        self.tp_opt = opts[kinds.index("tp")]
        h0, h1 = self.ref_opt["groups"][0]["hyper"], self.tp_opt["groups"][0]["hyper"]
        if self.ref_opt["cls"] != self.tp_opt["cls"] or h0 != h1:
            self.fail(f"the two optimizers differ: {self.ref_opt['cls']} {h0} vs {self.tp_opt['cls']} {h1}",
                      self.tp_opt["line"])
        cls, h = self.ref_opt["cls"], dict(h0)
        fixed = {"maximize": False, "capturable": False, "differentiable": False, "amsgrad": False,
                 "decoupled_weight_decay": cls == "AdamW", "initial_lr": None}
        for k, v in fixed.items():
            if k in h and h[k] != v and not (k == "initial_lr" and "initial_lr" not in h):
                self.fail(f"{cls}({k}={h[k]!r}) is not in the language", self.ref_opt["line"])
        for k in ("foreach", "fused"):
            if h.get(k) not in (None, False):
                self.fail(f"{cls}({k}={h[k]!r}): the language runs torch's single-tensor path (foreach=False)",
                          self.ref_opt["line"])
        train = {}
        if cls == "SGD":
            known = {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach",
                     "differentiable", "fused"}
            if h.get("momentum", 0) == 0:
                train["optimizer"] = "sgd"
                if h.get("nesterov"):
                    self.fail("SGD(nesterov=True) without momentum", self.ref_opt["line"])
            else:
                train["optimizer"] = "nesterov" if h.get("nesterov") else "momentum"
                train["momentum"] = h["momentum"]
                if h.get("dampening", 0):
                    train["dampening"] = h["dampening"]
            if h.get("weight_decay", 0):
                train["weight_decay"] = h["weight_decay"]
        elif cls in ("Adam", "AdamW"):
            known = {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach", "capturable",
                     "differentiable", "fused", "decoupled_weight_decay"}
            train["optimizer"] = "adamw" if cls == "AdamW" or h.get("decoupled_weight_decay") else "adam"
            b = tuple(float(x) for x in h.get("betas", (0.9, 0.999)))
            if b != (0.9, 0.999):
                train["betas"] = list(b)
            if h.get("eps", 1e-8) != 1e-8:
                train["eps"] = h["eps"]
            wd = h.get("weight_decay", 0.0)
            default_wd = 0.01 if train["optimizer"] == "adamw" else 0.0
            if wd != default_wd:
                train["weight_decay"] = wd
        else:
            self.fail(f"torch.optim.{cls} is not in the language (SGD, Adam, AdamW)", self.ref_opt["line"])
            return
        for k in h:
            if k not in known and k != "initial_lr":
                self.fail(f"{cls} option {k}={h[k]!r} is not in the language", self.ref_opt["line"])
        lr = h["lr"]
        if hasattr(lr, "item"):
            self.fail(f"{cls}(lr=<tensor>): a tensor learning rate", self.ref_opt["line"])
            return
        train["lr"] = float(lr)
        for i, e in self.steps_ev:
            if any(l != lr for l in e["lrs"]):
                self.fail(f"the learning rate changed to {e['lrs']} (a schedule; the language's lr is constant)",
                          e["line"])
        ri = self.rec.events.index(self.ref_opt)
        ti = self.rec.events.index(self.tp_opt)
        ref_steps = [i for i, e in self.steps_ev if e["index"] == self.ref_opt["index"]]
        tp_steps = [i for i, e in self.steps_ev if e["index"] == self.tp_opt["index"]]
        if len(ref_steps) != len(tp_steps) or not ref_steps:
            self.fail(f"the reference's optimizer stepped {len(ref_steps)} times, the sharded one's {len(tp_steps)}",
                      self.ref_opt["line"])
            return
        self.ref_steps, self.tp_steps = ref_steps, tp_steps
        steps = len(ref_steps)
        # micro-steps: the data seeds between consecutive steps
        prev = -1
        counts = []
        for s, i in enumerate(ref_steps):
            j = max(i, tp_steps[s])
            counts.append(sum(1 for d in self.data_idx if prev < d < min(i, tp_steps[s])))
            prev = j
        after = sum(1 for d in self.data_idx if d > prev)
        if after:
            self.fail(f"{after} micro-step(s) of inputs drawn after the last optimizer step (the language ends "
                      "every step with the update)", self.rec.events[[d for d in self.data_idx if d > prev][0]]["line"])
        if len(set(counts)) != 1 or counts[0] < 1:
            self.fail(f"micro-steps per step {counts}: the language runs the same number every step",
                      self.ref_opt["line"])
            return
        self.steps, self.micro = steps, counts[0]
        train = {"steps": steps, **({"micro_steps": self.micro} if self.micro > 1 else {}), **train}
        self.train = train
        if ri > self.data_idx[0] or ti > self.data_idx[0]:
            self.fail("an optimizer constructed after the first micro-step's draws", self.rec.events[max(ri, ti)]["line"])

    # -- the forward computations -------------------------------------------------------------
    def forward(self):
        if self.errors:
            return
        ev = self.rec.events
        ref_params = {id(p) for p in self.ref_opt["groups"][0]["params"]}
        per_micro = []
        for k, d in enumerate(self.data_idx):
            end = self.data_idx[k + 1] if k + 1 < len(self.data_idx) else len(ev)
            bw = [(i, e) for i, e in self.backward_ev if d < i < end]
            per_micro.append(bw)
        self.loss_syms = {"ref": [], "tp": []}
        for k, bw in enumerate(per_micro):
            if len(bw) != 2:
                self.fail(f"micro-step {k} runs {len(bw)} backward calls; capture takes one per computation",
                          bw[0][1]["line"] if bw else ev[self.data_idx[k]]["line"])
                return
            for i, e in bw:
                root = e["sym"]
                if e["args"] or e["kwargs"]:
                    self.fail(f"backward({e['args']}, {e['kwargs']}): the language backpropagates the loss alone",
                              e["line"])
                if self.micro > 1:
                    if root.op == "aten.div" and len(root.args) == 2 and root.args[1] == self.micro:
                        loss = root.args[0]
                    else:
                        self.fail(f"backward of {root.op}: with {self.micro} micro-steps the language backpropagates "
                                  f"loss / {self.micro} (torch's div)", e["line"])
                        continue
                else:
                    loss = root
                side = self.which(loss)
                if side is None:
                    self.fail("a backward whose loss uses neither the reference's modules nor the sharded leaves alone",
                              e["line"])
                    continue
                self.loss_syms[side].append(loss)
        if self.errors:
            return
        self.loss_spec = None
        for side in ("ref", "tp"):
            for loss in self.loss_syms[side]:
                spec = self.parse_loss(loss, side)
                if spec is None:
                    return
                if self.loss_spec is None:
                    self.loss_spec = spec
                elif spec != self.loss_spec:
                    self.fail(f"the losses differ: {spec} vs {self.loss_spec}", loss.line)
                    return

    def leaves(self, s, seen=None):
        """The `param` and `copy` leaves a node depends on."""
        out = set()
        stack = [s]
        seen = set()
        while stack:
            x = stack.pop()
            if not isinstance(x, Sym) or id(x) in seen:
                if isinstance(x, (tuple, list)):
                    stack.extend(x)
                continue
            seen.add(id(x))
            if x.op == "param":
                out.add(("param", x.args))
                continue
            if x.op == "copy":
                inner = x.args[0]
                if isinstance(inner, Sym) and inner.op == "slice":
                    inner = inner.args[0]
                if isinstance(inner, Sym) and inner.op == "param":
                    out.add(("copy", id(x)))
                    continue
            for a in x.args:
                stack.append(a)
            for v in x.meta.get("kwargs", {}).values() if isinstance(x.meta.get("kwargs"), dict) else ():
                stack.append(v)
        return out

    def which(self, s):
        lv = self.leaves(s)
        if lv and all(k == "param" for k, _ in lv):
            return "ref"
        if lv and all(k == "copy" for k, _ in lv):
            return "tp"
        return None

    def parse_loss(self, loss, side):
        if loss.op == "aten.mse_loss":
            red = loss.args[2] if len(loss.args) > 2 else loss.meta["kwargs"].get("reduction", 1)
            if red != 1:
                self.fail("F.mse_loss with reduction other than mean", loss.line)
                return None
            pred, target = loss.args[0], loss.args[1]
            tname = self.input_name(target)
            if tname is None:
                self.fail("an mse target that is not a drawn input", loss.line)
                return None
            v = self.parse(pred, side)
            if v is None:
                return None
            return ("mse", self.whole_key(v, side, loss.line), tname)
        if loss.op == "getitem" and loss.args[0].op == "aten.nll_loss_forward" and loss.args[1] == 0:
            nll = loss.args[0]
            a = list(nll.args) + [None] * 5
            lsm, labels, weight, red, ignore = a[:5]
            if weight is not None or red != 1 or ignore != -100:
                self.fail("F.cross_entropy with class weights, another reduction or ignore_index", nll.line)
                return None
            if not (isinstance(lsm, Sym) and lsm.op == "aten._log_softmax" and lsm.args[2] is False):
                self.fail("nll_loss on something other than log_softmax", nll.line)
                return None
            lname = self.input_name(labels)
            if lname is None:
                self.fail("cross-entropy labels that are not a drawn input", nll.line)
                return None
            v = self.parse(lsm.args[0], side)
            if v is None:
                return None
            return ("cross-entropy", self.whole_key(v, side, loss.line), lname)
        self.fail(f"{loss.op}: the loss must be F.mse_loss or F.cross_entropy (mean)", loss.line)
        return None

    def input_name(self, s):
        s = unwrap(s)
        if isinstance(s, Sym) and s.op == "draw":
            return self.input_of.get(id(s))
        return None

    def whole_key(self, v, side, line):
        if v[0] in ("input", "layer"):
            return v
        self.fail(f"the {side} computation's result is still sharded ({v[0]})", line)
        return None

    # parse() returns ("input", name) | ("layer", idx) for whole values; in the sharded
    # computation also ("part", layer idx, rank) and ("rowpart", module idx, rank, src layer idx).
    def parse(self, s, side):
        memo = self.ref_memo if side == "ref" else self.tp_memo
        key = id(s)
        if key in memo:
            return memo[key]
        v = self._parse(s, side)
        memo[key] = v
        if v is not None and v[0] in ("layer", "part") and isinstance(s, Sym):
            self.produced.append((side, s, v))
        return v

    def layer(self, spec, line):
        """The index of the layer `spec` (op, module, input, ...), created in forward order on
        first sight (the reference's parse creates them; the sharded one must find them)."""
        for i, l in enumerate(self.layers):
            if l["spec"] == spec:
                return i
        self.layers.append({"spec": spec, "line": line, "parallel": "none"})
        return len(self.layers) - 1

    def mod_of(self, s, attr, side):
        """The module index of a parameter node (`param` in the reference; in the sharded
        computation a `copy` of it, whole or sliced: (module, dim, lo, hi))."""
        if side == "ref":
            if isinstance(s, Sym) and s.op == "param" and s.args[1] == attr:
                return (s.args[0], None, None, None)
            return None
        if not (isinstance(s, Sym) and s.op == "copy"):
            return None
        b = s.args[0]
        if isinstance(b, Sym) and b.op == "param" and b.args[1] == attr:
            return (b.args[0], None, None, None)
        if isinstance(b, Sym) and b.op == "slice" and b.args[4] == 1:
            p = b.args[0]
            if isinstance(p, Sym) and p.op == "param" and p.args[1] == attr:
                return (p.args[0], b.args[1], b.args[2], b.args[3])
        return None

    def _parse(self, s, side):
        s = unwrap(s) if side == "ref" else s
        if not isinstance(s, Sym):
            self.fail(f"a constant {s!r} where a tensor was expected", "<run>")
            return None
        if s.op == "copy":
            inner = s.args[0]
            if isinstance(inner, Sym) and inner.op == "draw":
                return self._parse(inner, side)
            if side == "tp":
                return self.parse(inner, side)
        if s.op == "draw":
            name = self.input_of.get(id(s))
            if name is None:
                self.fail(f"{s.args[0]} that is not one of the micro-step's inputs", s.line)
                return None
            return ("input", name)
        if s.op in ("aten.addmm", "aten.mm"):
            return self.parse_matmul(s, side)
        if s.op == "aten.gelu" or s.op in ACTS:
            x = self.parse(s.args[0], side)
            if x is None:
                return None
            if s.op == "aten.gelu":
                approx = s.args[1] if len(s.args) > 1 else s.meta["kwargs"].get("approximate", "none")
                op = {"none": "gelu", "tanh": "gelu-tanh"}[approx]
            else:
                op = ACTS[s.op]
            if x[0] == "part":
                li = self.find_layer((op, ("layer", x[1])), s.line)
                return None if li is None else ("part", li, x[2])
            if x[0] in ("input", "layer"):
                if side == "ref":
                    return ("layer", self.layer((op, x), s.line))
                li = self.find_layer((op, x), s.line)
                return None if li is None else ("layer", li)
            self.fail(f"{s.op} on a row-parallel partial (before its all-reduce)", s.line)
            return None
        if s.op == "getitem" and isinstance(s.args[0], Sym) and s.args[0].op == "aten.native_layer_norm" and s.args[1] == 0:
            ln = s.args[0]
            x = self.parse(ln.args[0], side)
            if x is None:
                return None
            w = ln.args[2] if len(ln.args) > 2 else None
            b = ln.args[3] if len(ln.args) > 3 else None
            eps = ln.args[4] if len(ln.args) > 4 else 1e-5
            mw = self.mod_of(w, "weight", side) if w is not None else None
            if w is None or mw is None or mw[1] is not None:
                self.fail("layer_norm whose weight is not an nn.LayerNorm's (or a replicated copy of it)", ln.line)
                return None
            mi = mw[0]
            if self.module(mi)["kind"] != "LayerNorm" or not math.isclose(eps, self.module(mi)["cfg"].get("eps", 1e-5), rel_tol=0):
                self.fail("layer_norm not through its nn.LayerNorm module's eps", ln.line)
                return None
            if x[0] not in ("input", "layer"):
                self.fail("layer_norm on a sharded activation", ln.line)
                return None
            spec = ("layernorm", mi, x)
            if side == "ref":
                return ("layer", self.layer(spec, ln.line))
            li = self.find_layer(spec, ln.line)
            return None if li is None else ("layer", li)
        if s.op == "aten.embedding":
            w, ids = s.args[0], s.args[1]
            mw = self.mod_of(w, "weight", side)
            x = self.parse(ids, side)
            if mw is None or mw[1] is not None or x is None or x[0] != "input":
                self.fail("embedding that is not an nn.Embedding's lookup of drawn ids", s.line)
                return None
            pad = self.module(mw[0])["cfg"].get("padding_idx")
            num = self.module(mw[0])["cfg"]["num_embeddings"]
            want = -1 if pad is None else pad % num
            got = s.args[2] if len(s.args) > 2 else s.meta["kwargs"].get("padding_idx", -1)
            got = got % num if got is not None and got >= 0 else (got + num if got is not None and got < -1 else got)
            scale = s.args[3] if len(s.args) > 3 else s.meta["kwargs"].get("scale_grad_by_freq", False)
            sparse = s.args[4] if len(s.args) > 4 else s.meta["kwargs"].get("sparse", False)
            if got != want or scale or sparse:
                self.fail(f"embedding lookup with padding_idx {got} (the module's is {pad}) or scale_grad_by_freq / "
                          "sparse", s.line)
                return None
            spec = ("embedding", mw[0], x)
            if side == "ref":
                return ("layer", self.layer(spec, s.line))
            li = self.find_layer(spec, s.line)
            return None if li is None else ("layer", li)
        if s.op == "aten.add":
            return self.parse_add(s, side)
        if s.op == "aten.mul":
            return self.parse_mul(s, side)
        if s.op == "aten._softmax":
            return self.parse_softmax(s, side)
        if s.op in ("aten.transpose", "aten.permute") and isinstance(s.args[0], Sym) \
                and (unwrap(s.args[0]).op == "aten.bmm" or (s.args[0].op == "getitem" and isinstance(
                    s.args[0].args[0], Sym) and s.args[0].args[0].op in SDPA_FUSED)):
            return self.parse_sdpa(s, side)
        if s.op == "getitem" and isinstance(s.args[0], Sym) and s.args[0].op in SDPA_FUSED:
            self.fail(sdpa_fused_message(s.args[0].op), s.args[0].line)
            return None
        if s.op == "slice" and side == "tp":
            return self.parse_input_slice(s)
        if s.op == "aten.cat" and side == "tp":
            return self.parse_gather(s)
        self.fail(f"{s.meta.get('overload', s.op)} is not in the language (or not in this form)", s.line)
        # list what lies below it too, op by op (each path stops at its first op the language lacks)
        for a in list(s.args) + list(s.meta.get("kwargs", {}).values()):
            for x in (a if isinstance(a, tuple) else (a,)):
                if isinstance(x, Sym) and x.op not in ("param", "copy", "draw", "slice", "grad") \
                        and not x.op.startswith(("aten.t", "aten.transpose")):
                    self.parse(x, side)
        return None

    def find_layer(self, spec, line):
        for i, l in enumerate(self.layers):
            if l["spec"] == spec:
                l.setdefault("tp_line", line)
                return i
        self.fail(f"the sharded computation runs {spec[0]} where the reference does not", line)
        return None

    def parse_matmul(self, s, side):
        if s.op == "aten.addmm":
            if s.meta["kwargs"].get("beta", 1) != 1 or s.meta["kwargs"].get("alpha", 1) != 1:
                self.fail("addmm with beta/alpha", s.line)
                return None
            bias, x, wt = s.args[0], s.args[1], s.args[2]
        else:
            bias, x, wt = None, s.args[0], s.args[1]
        if not is_t(wt):
            self.fail(f"{s.op} whose second operand is not a weight's transpose (w.t())", s.line)
            return None
        w = wt.args[0]
        mw = self.mod_of(w, "weight", side)
        if mw is None or self.module(mw[0])["kind"] != "Linear":
            self.fail(f"{s.op} with a weight that is not an nn.Linear's"
                      f"{' (or a clone of a slice of it)' if side == 'tp' else ''}", s.line)
            return None
        mi, dim, lo, hi = mw
        has_bias = self.module(mi)["cfg"].get("bias", True)
        xv = self.parse(x, side)
        if xv is None:
            return None
        if side == "ref" or dim is None:
            # a whole linear: F.linear is addmm with the bias, mm without
            if has_bias and s.op != "aten.addmm":
                self.fail("a linear layer with a bias computed as mm + add (the language's unsharded linear is "
                          "F.linear: addmm)", s.line)
                return None
            if s.op == "aten.addmm":
                mb = self.mod_of(bias, "bias", side)
                if mb is None or mb[0] != mi or mb[1] is not None:
                    self.fail("addmm whose bias is not the layer's own", s.line)
                    return None
            if xv[0] not in ("input", "layer"):
                self.fail("a replicated linear on a sharded activation", s.line)
                return None
            spec = ("linear", mi, xv)
            if side == "ref":
                return ("layer", self.layer(spec, s.line))
            li = self.find_layer(spec, s.line)
            return None if li is None else ("layer", li)
        if s.op == "aten.addmm":
            self.fail("F.linear (addmm) on a weight shard: the language's sharded linear is torch.matmul(x, w_r.t()) "
                      "then + b_r, as Megatron and DeepSpeed write it", s.line)
            return None
        rg = self.rank_of(mi, dim, lo, hi, s.line)
        if rg is None:
            return None
        if dim == 0:
            if xv[0] not in ("input", "layer"):
                self.fail("a column-parallel linear on a sharded activation", s.line)
                return None
            li = self.find_layer(("linear", mi, xv), s.line)
            if li is None:
                return None
            self.set_parallel(li, "column", s.line)
            if has_bias:
                return ("colmm", li, rg)
            return ("part", li, rg)
        # dim 1: row-parallel partial
        if xv[0] == "inslice":
            # DeepSpeed's row-parallel head on a replicated input (LinearAllreduceWithReplicatedInput):
            # the rank narrows the whole activation to the columns its weight shard holds
            if xv[2] != rg:
                self.fail(f"a row-parallel matmul of the activation's columns {xv[2]} with the weight's columns {rg}",
                          s.line)
                return None
            li = self.find_layer(("linear", mi, xv[1]), s.line)
            if li is None:
                return None
            self.set_parallel(li, "row", s.line)
            return ("rowpart", li, rg)
        if xv[0] != "part":
            self.fail("a row-parallel matmul whose input is neither a column-parallel rank's activation nor the "
                      "rank's columns of a whole activation", s.line)
            return None
        if xv[2] != rg or self.shard_ranges[mi] != self.shard_ranges[self.layers[self.col_root(xv[1])]["spec"][1]]:
            self.fail("a row-parallel shard that does not match its input's column shard", s.line)
            return None
        li = self.find_layer(("linear", mi, ("layer", xv[1])), s.line)
        if li is None:
            return None
        self.set_parallel(li, "row", s.line)
        return ("rowpart", li, rg)

    # -- shapes of the language's values ---------------------------------------------------
    def shape_of(self, v):
        """The shape of a parsed value as the language sees it (inputs' drawn shapes through
        the layers; a rank's part has its shard's width in the last dim)."""
        if v[0] == "input":
            return list(next(i["shape"] for i in self.inputs if i["name"] == v[1]))
        if v[0] == "part":
            lo, hi = v[2]
            return self.shape_of(("layer", v[1]))[:-1] + [hi - lo]
        spec = self.layers[v[1]]["spec"]
        op = spec[0]
        if op == "linear":
            return self.shape_of(spec[2])[:-1] + [self.module(spec[1])["cfg"]["out_features"]]
        if op == "embedding":
            return self.shape_of(spec[2]) + [self.module(spec[1])["cfg"]["embedding_dim"]]
        if op == "layernorm":
            return self.shape_of(spec[2])
        return self.shape_of(spec[1])

    def whole_or_part(self, op, vals, s, side):
        """A layer of `op` over whole values, or over parts of one rank split alike (the
        language's elementwise ops and sdpa follow their operands' sharding); `vals` the
        parsed operands, the spec's extra keys after them are in `op` (a tuple)."""
        key = op if isinstance(op, tuple) else (op,)
        if all(v[0] in ("input", "layer") for v in vals):
            spec = (key[0], *vals, *key[1:])
            if side == "ref":
                return ("layer", self.layer(spec, s.line))
            li = self.find_layer(spec, s.line)
            return None if li is None else ("layer", li)
        if side == "tp" and all(v[0] == "part" for v in vals):
            rgs = {v[2] for v in vals}
            widths = {self.shape_of(("layer", v[1]))[-1] for v in vals}
            if len(rgs) != 1 or len(widths) != 1:
                self.fail(f"{key[0]} of rank shards that are not split alike (columns {sorted(rgs)} of layers of "
                          f"widths {sorted(widths)})", s.line)
                return None
            li = self.find_layer((key[0], *(("layer", v[1]) for v in vals), *key[1:]), s.line)
            return None if li is None else ("part", li, vals[0][2])
        self.fail(f"{key[0]} of {' and '.join(v[0] for v in vals)} values (both whole, or both one rank's shards "
                  "of column-parallel outputs split alike)", s.line)
        return None

    def parse_mul(self, s, side):
        """`a * b` of two activations (SwiGLU's `silu(gate) * up`): the language's `mul`."""
        a, b = s.args[0], s.args[1]
        if s.meta.get("overload") != "aten.mul.Tensor" or not isinstance(a, Sym) or not isinstance(b, Sym):
            self.fail(f"{s.meta.get('overload', s.op)} by a constant {b!r} (the language's mul multiplies two "
                      "activations)", s.line)
            return None
        av, bv = self.parse(a, side), self.parse(b, side)
        if av is None or bv is None:
            return None
        if self.shape_of(av) != self.shape_of(bv):
            self.fail(f"mul of shapes {self.shape_of(av)} and {self.shape_of(bv)} (a broadcast; the language "
                      "multiplies tensors of one shape)", s.line)
            return None
        return self.whole_or_part("mul", [av, bv], s, side)

    def parse_softmax(self, s, side):
        """`F.softmax(x, -1)`: aten._softmax(x, last dim, half_to_float=False)."""
        x = self.parse(s.args[0], side)
        if x is None:
            return None
        dim, half = s.args[1], s.args[2] if len(s.args) > 2 else False
        nd = len(self.shape_of(x))
        if half or dim % nd != nd - 1:
            self.fail(f"softmax over dim {dim} of a {nd}-d tensor{' to float' if half else ''}: the language's "
                      "softmax is over the last dim", s.line)
            return None
        if x[0] == "part":
            self.fail("softmax of a column-parallel shard: it needs the whole last dim (gather it first)", s.line)
            return None
        return self.whole_or_part("softmax", [x], s, side)

    def parse_sdpa(self, s, side):
        """`F.scaled_dot_product_attention(q, k, v, is_causal=..., scale=...)` under
        `sdpa_kernel(SDPBackend.MATH)`, fed by the heads of three `[batch, seq, heads·head_dim]`
        activations and read back the same way, as torch 2.15's math path
        (`_scaled_dot_product_attention_math`) runs on the CPU and a dispatch mode sees it:

            qh = x_q.view(B, S, H, D).transpose(1, 2)          (the test's; likewise kh, vh)
            qs = qh * f                                        aten.mul.Scalar, f = sqrt(scale)
            ks = kh.transpose(-2, -1) * f
            a  = bmm(qs, ks)                                   (expand / clone / view around it)
            a  = a + where(tril(ones(S, S)), 0, -inf)           only when causal
            p  = _safe_softmax(a, -1)
            o  = bmm(p, vh)
            out = o.transpose(1, 2).reshape(B, S, H·D)         (the test's)

        Every node is matched; anything else (a mask, dropout, another head layout, a fused
        kernel) is refused with its line."""
        line = s.line
        where = "F.scaled_dot_product_attention"

        def perm(t):
            """(src, dims) for a transpose of two dims or a permute, else None."""
            if isinstance(t, Sym) and t.op == "aten.transpose":
                return t.args[0], tuple(t.args[1:3])
            if isinstance(t, Sym) and t.op == "aten.permute":
                return t.args[0], tuple(t.args[1])
            return None

        def swaps12(t):
            p = perm(t)
            if p is None:
                return False
            dims = tuple(d % 4 for d in p[1])
            return dims in ((1, 2), (2, 1)) if len(dims) == 2 else dims == (0, 2, 1, 3)

        def strip(t):
            """Skips the value-preserving expand (no broadcast) / clone / view around bmm."""
            while isinstance(t, Sym):
                if t.op == "copy":
                    t = t.args[0]
                elif t.op == "aten.expand" and isinstance(t.args[0], Sym) \
                        and t.args[0].meta.get("shape") == t.meta.get("shape"):
                    t = t.args[0]
                else:
                    break
            return t

        def refuse(what, at=None):
            self.fail(f"{where}: {what}", (at.line if isinstance(at, Sym) and at.line else line))
            return None

        # the output: o.transpose(1, 2) of the [B, H, S, D] product
        src = s.args[0]
        if isinstance(src, Sym) and src.op == "getitem" and isinstance(src.args[0], Sym) \
                and src.args[0].op in SDPA_FUSED:
            self.fail(sdpa_fused_message(src.args[0].op), src.args[0].line)
            return None
        o = strip(src)
        if not swaps12(s) or not (isinstance(o, Sym) and o.op == "aten.bmm"):
            return refuse("its output read other than as out.transpose(1, 2) back to [batch, seq, heads*head_dim]")
        out_shape = s.meta.get("shape")
        if not out_shape or len(out_shape) != 4:
            return refuse(f"an output of shape {out_shape}; the language's attention is 4-d [batch, heads, seq, "
                          "head_dim] inside, [batch, seq, heads*head_dim] outside")
        B, S, H, D = out_shape
        p, vt = strip(o.args[0]), strip(o.args[1])
        if not (isinstance(p, Sym) and p.op in ("aten._safe_softmax", "aten._softmax")):
            return refuse("the attention weights are not softmax(q·kᵀ) (an attention mask, dropout or another "
                          "formula)", o)
        pdim = p.args[1] if len(p.args) > 1 else -1
        if pdim % 4 != 3 or (len(p.args) > 2 and p.args[2] not in (None, False)):
            return refuse(f"a softmax over dim {pdim}", p)
        a = p.args[0]
        causal = False
        if isinstance(a, Sym) and a.op == "aten.add":
            causal = True
            added = a
            a, mask = a.args[0], a.args[1]
            ok = isinstance(mask, Sym) and mask.op == "aten.where" and len(mask.args) == 3
            if ok:
                cond, yes, no = mask.args
                ok = (isinstance(cond, Sym) and cond.op == "aten.tril" and (len(cond.args) < 2 or cond.args[1] == 0)
                      and isinstance(cond.args[0], Sym) and cond.args[0].op == "aten.ones"
                      and list(cond.args[0].args[0]) == [S, S]
                      and all(isinstance(x, Sym) and x.op == "aten.scalar_tensor" for x in (yes, no))
                      and yes.args[0] == 0.0 and no.args[0] == float("-inf"))
            if not ok:
                at = f" (the mask made at {mask.line})" if isinstance(mask, Sym) and mask.line else ""
                return refuse(f"an attention mask other than is_causal=True's{at}; attn_mask is not in the language",
                              added)
        scores = strip(a)
        if not (isinstance(scores, Sym) and scores.op == "aten.bmm"):
            return refuse("scores that are not one bmm of the scaled q and kᵀ", a)
        qs, ks = strip(scores.args[0]), strip(scores.args[1])
        fs = []
        for t in (qs, ks):
            if not (isinstance(t, Sym) and t.op == "aten.mul" and t.meta.get("overload") == "aten.mul.Scalar"):
                return refuse("q or kᵀ not scaled by sqrt(scale) as the math path does (enable_gqa, or another "
                              "backend)", t)
            fs.append(t.args[1])
        if fs[0] != fs[1]:
            return refuse(f"q and kᵀ scaled by {fs[0]!r} and {fs[1]!r}", qs)
        f = float(fs[0])
        qh = qs.args[0]
        kp = perm(ks.args[0])
        if kp is None or tuple(d % 4 for d in kp[1]) not in ((2, 3), (3, 2)):
            return refuse("a key not transposed as kᵀ by the math path", ks)
        kh = kp[0]
        heads = []
        for name, h in (("q", qh), ("k", kh), ("v", vt)):
            if not swaps12(h) or h.meta.get("shape") != (B, H, S, D):
                return refuse(f"{name} is not x.view(batch, seq, heads, head_dim).transpose(1, 2) of a "
                              f"[batch, seq, heads*head_dim] activation (recorded shape {h.meta.get('shape')})", h)
            x = self.parse(h.args[0], side)
            if x is None:
                return None
            if self.shape_of(x) != [B, S, H * D]:
                return refuse(f"{name} comes from a tensor of shape {self.shape_of(x)}, viewed as [{B}, {S}, {H}, "
                              f"{D}] (the language views [batch, seq, heads*head_dim])", h)
            heads.append(x)
        if len({repr(v) for v in heads}) != 3:
            return refuse("q, k and v are not three different tensors (the language's sdpa reads three layers)")
        # the language's heads count the whole layer's heads: a rank's part holds H of them
        total = H
        if heads[0][0] == "part":
            width = self.shape_of(("layer", heads[0][1]))[-1]
            if width % D:
                return refuse(f"a rank's q holds {H} heads of {D} of a layer {width} wide: not whole heads")
            total = width // D
        default_f = math.sqrt(1.0 / math.sqrt(D))
        if f == default_f:
            scale = None
        else:
            # the test's scale is a double whose sqrt is f: of the doubles near f*f with that
            # sqrt, the one with the shortest decimal form (`scale=0.3`, not 0.29999999999999993)
            lo = hi = f * f
            cands = [f * f]
            for _ in range(4):
                lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
                cands += [lo, hi]
            ok = [c for c in cands if c > 0 and math.sqrt(c) == f]
            scale = min(ok, key=lambda c: (len(repr(c)), abs(c - f * f))) if ok else None
            if scale is None:
                return refuse(f"a scale factor {f!r} that is the square root of no double", qs)
        # the layer's line: the F.scaled_dot_product_attention call (its bmm), not the read-back
        call = Sym(s.op, s.args, o.line or s.line, s.meta)
        return self.whole_or_part(("sdpa", total, causal, scale), heads, call, side)

    def parse_input_slice(self, s):
        """A rank's slice of a whole activation on its last dim (`h[..., lo:hi]`): the input of a
        row-parallel matmul, ("inslice", whole value, (lo, hi)); anything else is refused."""
        src, dim, lo, hi, step = s.args
        x = self.parse(src, "tp")
        if x is None:
            return None
        shape = s.meta.get("shape") or ()
        if step != 1 or x[0] not in ("input", "layer") or dim != len(shape) - 1:
            self.fail("a slice that is not a rank's contiguous columns (last dim) of a whole activation", s.line)
            return None
        return ("inslice", x, (lo, hi))

    def col_root(self, li):
        """The column-parallel layer a sharded activation comes from."""
        while self.layers[li]["spec"][0] != "linear":
            li = self.layers[li]["spec"][1][1]
        return li

    def set_parallel(self, li, par, line):
        cur = self.layers[li]["parallel"]
        if cur not in ("none", par):
            self.fail(f"layer run as {cur} and as {par}", line)
        self.layers[li]["parallel"] = par

    def rank_of(self, mi, dim, lo, hi, line):
        m = self.module(mi)
        cfg = m["cfg"]
        total = cfg["out_features"] if dim == 0 else cfg["in_features"]
        rs = self.shard_ranges.setdefault(mi, [])
        if (lo, hi) not in rs:
            rs.append((lo, hi))
            rs.sort()
        return (lo, hi)

    def parse_add(self, s, side):
        a, b = s.args[0], s.args[1]
        alpha = s.args[2] if len(s.args) > 2 else s.meta["kwargs"].get("alpha", 1)
        if alpha != 1 or not isinstance(b, Sym):
            self.fail("add with alpha or a scalar", s.line)
            return None
        if side == "tp":
            # column bias: colmm + b_r
            for x, y in ((a, b), (b, a)):
                xv = self.parse(x, side) if isinstance(x, Sym) and x.op == "aten.mm" else None
                if xv is not None and xv[0] == "colmm":
                    li, rg = xv[1], xv[2]
                    mi = self.layers[li]["spec"][1]
                    mb = self.mod_of(y, "bias", side)
                    if mb is None or mb[0] != mi or mb[1] != 0 or (mb[2], mb[3]) != rg:
                        self.fail("a column-parallel partial plus something other than its bias shard", s.line)
                        return None
                    return ("part", li, rg)
            # row all-reduce: a sum of the ranks' partials, then the bias once
            terms = self.flatten_add(s)
            vals = [self.parse(t, side) if not self.is_bias_copy(t) else ("bias", t) for t in terms]
            if any(v is None for v in vals):
                return None
            if all(v[0] == "rowpart" for v in vals if v[0] != "bias") and any(v[0] == "rowpart" for v in vals):
                return self.reduce(s, vals)
        av, bv = self.parse(a, side), self.parse(b, side)
        if av is None or bv is None:
            return None
        if av[0] in ("input", "layer") and bv[0] in ("input", "layer"):
            spec = ("residual-add", av, bv)
            if side == "ref":
                return ("layer", self.layer(spec, s.line))
            li = self.find_layer(spec, s.line)
            return None if li is None else ("layer", li)
        if av[0] == "part" and bv[0] == "part":
            # two activations of one rank split alike (the language's `add` with `inputs`)
            if self.shape_of(av) != self.shape_of(bv):
                self.fail(f"add of shapes {self.shape_of(av)} and {self.shape_of(bv)}", s.line)
                return None
            return self.whole_or_part("residual-add", [av, bv], s, side)
        self.fail(f"add of {av[0]} and {bv[0]} is not in the language", s.line)
        return None

    def is_bias_copy(self, t):
        return isinstance(t, Sym) and t.op == "copy" and isinstance(t.args[0], Sym) and t.args[0].op == "param" \
            and t.args[0].args[1] == "bias"

    def flatten_add(self, s):
        """The terms of a left-nested sum ((a + b) + c) + d, in order."""
        if isinstance(s, Sym) and s.op == "aten.add" and (len(s.args) < 3 or s.args[2] == 1) \
                and not s.meta["kwargs"].get("alpha", 1) != 1 and isinstance(s.args[1], Sym):
            return self.flatten_add(s.args[0]) + [s.args[1]]
        return [s]

    def reduce(self, s, vals):
        biases = [i for i, v in enumerate(vals) if v[0] == "bias"]
        parts = [v for v in vals if v[0] == "rowpart"]
        li = parts[0][1]
        mi = self.layers[li]["spec"][1]
        if any(p[1] != li for p in parts):
            self.fail("partials of different layers summed together", s.line)
            return None
        ranges = self.shard_ranges[mi]
        order = [ranges.index(p[2]) for p in parts]
        n = len(ranges)
        if sorted(order) != list(range(n)):
            self.fail(f"the all-reduce sums ranks {order} of {n}", s.line)
            return None
        has_bias = self.module(mi)["cfg"].get("bias", True)
        if has_bias:
            if biases != [len(vals) - 1]:
                self.fail("the row-parallel bias must be added once, after the partials are summed", s.line)
                return None
            mb = self.mod_of(self.flatten_add(s)[-1], "bias", "tp")
            if mb is None or mb[0] != mi or mb[1] is not None:
                self.fail("a row-parallel output plus another layer's bias", s.line)
                return None
        elif biases:
            self.fail("a bias added to a layer built with bias=False", s.line)
            return None
        if n > 2:
            if order != list(range(n)):
                self.fail(f"the partials of {n} ranks summed in the order {order}: the language models the "
                          "ring all-reduce or rank order ((x0 + x1) + x2) + ...", s.line)
                return None
            self.rank_order_sum = True
        self.tp = max(self.tp, n)
        return ("layer", li)

    def parse_gather(self, s):
        parts = s.args[0]
        dim = s.args[1] if len(s.args) > 1 else s.meta["kwargs"].get("dim", 0)
        vals = [self.parse(p, "tp") for p in parts]
        if any(v is None for v in vals):
            return None
        if not all(v[0] == "part" for v in vals) or len({v[1] for v in vals}) != 1:
            self.fail("torch.cat of tensors that are not one column-parallel layer's rank outputs", s.line)
            return None
        li = vals[0][1]
        if self.layers[li]["spec"][0] != "linear":
            self.fail("an all-gather after an elementwise op on the shards (gather the linear's output)", s.line)
            return None
        rs = self.shard_ranges[self.layers[li]["spec"][1]]
        shape = s.meta.get("shape") or ()
        if [v[2] for v in vals] != rs or dim not in (-1, len(shape) - 1):
            self.fail("torch.cat of the ranks' outputs out of rank order or not on the last dim", s.line)
            return None
        self.set_parallel(li, "column-gather", s.line)
        self.tp = max(self.tp, len(rs))
        return ("layer", li)

    # -- checks -------------------------------------------------------------------------------
    def position(self, idx):
        """(global micro-step, steps done by both optimizers) at event index idx."""
        gm = sum(1 for d in self.data_idx if d < idx) - 1
        sr = sum(1 for i in self.ref_steps if i < idx)
        st = sum(1 for i in self.tp_steps if i < idx)
        return gm, sr, st

    def tensor_of(self, ref_sym, tp_sym, line):
        """The language's tensor name of a checked pair, or None (after failing)."""
        # the loss
        for k, l in enumerate(self.loss_syms["ref"]):
            if unwrap(ref_sym) is l:
                if tp_sym is not self.loss_syms["tp"][k] and unwrap(tp_sym) is not self.loss_syms["tp"][k]:
                    self.fail("a check of the reference's loss against something other than the sharded loss", line)
                    return None
                return "loss", "loss"
        r = unwrap(ref_sym)
        if isinstance(r, Sym) and r.op == "param":
            mi, attr = r.args
            return self.param_check(mi, attr, tp_sym, line, grad=False)
        if isinstance(r, Sym) and r.op == "grad" and unwrap(r.args[0]).op == "param":
            mi, attr = unwrap(r.args[0]).args
            return self.param_check(mi, attr, tp_sym, line, grad=True)
        rv = self.ref_memo.get(id(r)) or self.ref_memo.get(id(ref_sym))
        if rv is None:
            rv = self.parse(r, "ref")
        if rv is None:
            return None
        tv = self.parse(tp_sym, "tp")
        if tv is None:
            return None
        if rv != tv or rv[0] != "layer":
            self.fail(f"a check of {rv} against {tv}: not the same layer's output in both computations", line)
            return None
        name = self.layer_name(rv[1])
        return f"{name}.out", f"{name}_out"

    def param_check(self, mi, attr, tp_sym, line, grad):
        li = self.module_layer.get(mi)
        if li is None:
            self.fail("a check of a parameter no layer uses", line)
            return None
        par = self.layers[li]["parallel"]
        t = tp_sym
        leaves = []
        if isinstance(t, Sym) and t.op == "aten.cat":
            dim = t.args[1] if len(t.args) > 1 else t.meta["kwargs"].get("dim", 0)
            leaves, cat_dim = list(t.args[0]), dim
        else:
            leaves, cat_dim = [t], None
        got = []
        for x in leaves:
            if grad:
                if not (isinstance(x, Sym) and x.op == "grad"):
                    self.fail("a gradient checked against something other than the shards' .grad", line)
                    return None
                x = x.args[0]
            mw = self.mod_of(x, attr, "tp")
            if mw is None or mw[0] != mi:
                self.fail(f"a check of {self.layer_name(li)}.{attr} against something other than its shards", line)
                return None
            got.append(mw)
        whole = [g for g in got if g[1] is None]
        if whole:
            ok = len(got) == 1
        else:
            dims = {g[1] for g in got}
            rs = self.shard_ranges.get(mi, [])
            ok = len(dims) == 1 and [(g[2], g[3]) for g in got] == rs and cat_dim is not None \
                and cat_dim == next(iter(dims))
        if not ok:
            self.fail(f"{self.layer_name(li)}.{attr}: the shards are not concatenated whole in rank order", line)
            return None
        name = self.layer_name(li)
        suffix = ".grad" if grad else ""
        return f"{name}.{attr}{suffix}", f"{name}_{attr}{'_grad' if grad else ''}"

    def layer_name(self, li):
        return self.layers[li]["name"]

    def name_layers(self):
        used = set()
        counts = {}
        for i, l in enumerate(self.layers):
            spec = l["spec"]
            op = spec[0]
            name = None
            if op in ("linear", "embedding", "layernorm"):
                mi = spec[1]
                self.module_layer[mi] = i
                name = self.module(mi).get("name")
            if not name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) or name in used:
                counts[op] = counts.get(op, 0) + 1
                name = f"{op.replace('-', '_')}{counts[op]}"
                while name in used:
                    counts[op] += 1
                    name = f"{op.replace('-', '_')}{counts[op]}"
            used.add(name)
            l["name"] = name

    def check_list(self):
        if self.errors:
            return
        self.name_layers()
        self.checks = {}      # name -> dict
        self.check_calls = []
        ev = self.rec.events
        for i, e in enumerate(ev):
            if e["ev"] != "check":
                continue
            if "unsupported" in e:
                self.fail(e["unsupported"], e["line"])
                continue
            extra = e.get("extra", {})
            if extra.get("equal_nan"):
                self.fail(f"{e['kind']}(equal_nan=True)", e["line"])
            a, x = e["actual"], e["expected"]
            sa, sx = self.which(a), self.which(x)
            if sa == "ref" and sx == "tp":
                self.fail("the check's expected tensor is the sharded computation's and its actual the reference's: "
                          "the language's checks measure |sharded - ref| against atol + rtol*|ref|", e["line"])
                continue
            if (sa, sx) != ("tp", "ref"):
                self.fail(f"a check between {sa or 'a mixed/unknown'} and {sx or 'a mixed/unknown'} tensors "
                          "(capture takes sharded vs reference)", e["line"])
                continue
            got = self.tensor_of(x, a, e["line"])
            if got is None:
                continue
            tensor, cname = got
            dt = str(e["expected_value"].dtype).replace("torch.", "")
            if dt != "float32" or str(e["actual_value"].dtype) != "torch.float32":
                self.fail(f"a check on {dt} tensors (the language checks float32)", e["line"])
                continue
            rtol, atol = e["rtol"], e["atol"]
            if rtol is None and atol is None:
                rtol, atol = TORCH_DEFAULT_TOL["float32"]
            gm, sr, st = self.position(i)
            kind = "param" if tensor.endswith((".weight", ".bias")) else "grad" if tensor.endswith(".grad") else "act"
            if kind == "param":
                if sr != st or sr == 0:
                    self.fail(f"{tensor} checked after {sr} reference and {st} sharded optimizer steps", e["line"])
                    continue
                label = (sr - 1, None)
            else:
                if gm < 0:
                    self.fail(f"{tensor} checked before the first micro-step", e["line"])
                    continue
                s, m = divmod(gm, self.micro)
                if sr != s or st != s:
                    self.fail(f"{tensor} of micro-step {gm} checked after the optimizer step", e["line"])
                    continue
                label = (s, m)
            c = self.checks.setdefault(cname, {"tensor": tensor, "kind": kind, "tol": (atol, rtol), "labels": [],
                                               "line": e["line"], "first": i})
            if c["tol"] != (atol, rtol):
                self.fail(f"{tensor} checked with atol/rtol {c['tol']} and {(atol, rtol)}", e["line"])
                continue
            if label in c["labels"]:
                self.fail(f"{tensor} checked twice at the same step", e["line"])
                continue
            c["labels"].append(label)
            self.check_calls.append((cname, label, e))
        if not self.checks and not self.errors:
            self.fail("the test calls no assert_close / allclose on the two computations", "<run>")
        for cname, c in self.checks.items():
            if c["kind"] == "param":
                want = [(s, None) for s in range(self.steps)]
                c["at"] = "step"
            else:
                every = [(s, m) for s in range(self.steps) for m in range(self.micro)]
                last = [(s, self.micro - 1) for s in range(self.steps)]
                if c["labels"] == every:
                    want, c["at"] = every, "micro-step"
                elif c["kind"] == "grad" and c["labels"] == last:
                    want, c["at"] = last, "step"
                else:
                    want = every
            if c["labels"] != want:
                self.fail(f"{c['tensor']} is checked at {self.fmt_labels(c['labels'])}; the language checks it at "
                          f"every {'step' if c['kind'] == 'param' else 'micro-step'}", c["line"])

    def fmt_labels(self, labels):
        return ", ".join(self.label_str(l, "step" if l[1] is None else "micro-step") for l in labels)

    def label_str(self, label, at):
        s, m = label
        if m is None or (at == "step"):
            return f"{s}"
        return f"{s}.{m}" if self.micro > 1 else f"{s}"

    # -- the file -----------------------------------------------------------------------------
    def emit(self):
        test_name = self.test_id.split("::")[-1]
        base = re.sub(r"[^A-Za-z0-9_-]", "-", test_name.split("[")[0])[:64]
        self.name = base
        profile = "cpu-fma+mkl-threads-1" + ("+allreduce-rank-order" if self.rank_order_sum else "")
        self.profile = profile
        L = []
        L.append(f"name = {toml_str(self.name)}")
        # the file's base name: a capture must not depend on the directory pytest ran from
        where = self.test_id.split("::", 1)
        where = "::".join([where[0].replace("\\", "/").rsplit("/", 1)[-1]] + where[1:])
        L.append(f"description = {toml_str('captured from ' + where)}")
        L.append(f"first_seed = {self.init_seed}")
        L.append('rng = "torch"')
        L.append(f"default_profiles = [{toml_str(profile)}]   # torch on the CPU at one thread, AVX2 ATen kernels")
        L.append('default_policies = ["test"]')
        L.append("")
        if self.tp > 1:
            rule = self.shard_rule()
            L.append("[parallel]")
            L.append(f"tp = {self.tp}")
            L.append(f"shard_rule = {toml_str(rule)}")
            L.append("")
        L.append("[data]")
        L.append(f"seed = {self.data_seed}   # micro-step k draws after torch.manual_seed({self.data_seed} + k)")
        L.append("")
        for inp in self.inputs:
            L.append(f"[[inputs]]   # {inp['line']}")
            L.append(f"name = {toml_str(inp['name'])}")
            L.append(f"draw = {toml_str(inp['draw'])}")
            L.append(f"shape = {inp['shape']}")
            if inp["draw"] == "randint":
                L.append(f"high = {inp['high']}")
            L.append("")
        for l in self.layers:
            spec = l["spec"]
            op = spec[0]
            L.append(f"[[layers]]   # {l['line']}")
            L.append(f"name = {toml_str(l['name'])}")
            L.append(f"op = {toml_str(op)}")
            if op in ("residual-add", "mul"):
                L.append(f"inputs = [{toml_str(self.ref_name(spec[1]))}, {toml_str(self.ref_name(spec[2]))}]")
            elif op == "sdpa":
                L.append(f"inputs = [{', '.join(toml_str(self.ref_name(v)) for v in spec[1:4])}]")
                heads, causal, scale = spec[4:7]
                L.append(f"heads = {heads}")
                if causal:
                    L.append("causal = true")
                if scale is not None:
                    L.append(f"scale = {fmt_float(scale)}")
            else:
                src = spec[2] if op in ("linear", "embedding", "layernorm") else spec[1]
                L.append(f"input = {toml_str(self.ref_name(src))}")
            if op == "linear":
                cfg = self.module(spec[1])["cfg"]
                L.append(f"out = {cfg['out_features']}")
                L.append(f"bias = {'true' if cfg.get('bias', True) else 'false'}")
            if op == "embedding":
                cfg = self.module(spec[1])["cfg"]
                L.append(f"num = {cfg['num_embeddings']}")
                L.append(f"dim = {cfg['embedding_dim']}")
                if cfg.get("padding_idx") is not None:
                    L.append(f"padding_idx = {cfg['padding_idx'] % cfg['num_embeddings']}")
            if op == "layernorm":
                cfg = self.module(spec[1])["cfg"]
                L.append(f"eps = {fmt_float(cfg.get('eps', 1e-5))}")
                L.append(f"affine = {'true' if cfg.get('elementwise_affine', True) else 'false'}")
                if cfg.get("bias", True) is False:
                    self.fail("nn.LayerNorm(bias=False) is not in the language", self.module(spec[1])["line"])
            if l["parallel"] != "none":
                L.append(f"parallel = {toml_str(l['parallel'])}")
            L.append("")
        op, src, tgt = self.loss_spec
        L.append("[loss]")
        L.append(f"op = {toml_str(op)}")
        L.append(f"input = {toml_str(self.layer_name(src[1]) if src[0] == 'layer' else src[1])}")
        L.append(f"{'target' if op == 'mse' else 'labels'} = {toml_str(tgt)}")
        L.append("")
        L.append(f"[train]   # {self.ref_opt['line']}")
        for k, v in self.train.items():
            if isinstance(v, str):
                L.append(f"{k} = {toml_str(v)}")
            elif isinstance(v, list):
                L.append(f"{k} = [{', '.join(fmt_float(x) for x in v)}]")
            elif isinstance(v, float):
                L.append(f"{k} = {fmt_float(v)}")
            else:
                L.append(f"{k} = {v}")
        L.append("")
        # init order: the modules' construction order, of the modules the layers use
        used = [self.module_layer[e["index"]] for e in self.module_events if e["index"] in self.module_layer]
        unused = [e for e in self.module_events if e["index"] not in self.module_layer]
        for e in unused:
            self.fail(f"nn.{e['kind']} constructed but used by neither computation (its init draws would shift "
                      "the generator; the language draws only its layers' weights)", e["line"])
        order = [self.layers[i]["name"] for i in used]
        layer_order = [l["name"] for l in self.layers if l["spec"][0] in ("linear", "embedding", "layernorm")]
        if order != layer_order:
            L.append("[init]")
            L.append(f"order = [{', '.join(toml_str(n) for n in order)}]   # construction order")
            L.append("")
        phase = {"act": 0, "grad": 1, "param": 2}
        ordered = sorted(self.checks.items(), key=lambda kv: (phase[kv[1]["kind"]], kv[1]["first"]))
        for cname, c in ordered:
            L.append(f"[[checks]]   # {c['line']}")
            L.append(f"name = {toml_str(cname)}")
            L.append(f"tensor = {toml_str(c['tensor'])}")
            L.append(f"at = {toml_str(c['at'])}")
            L.append("")
        L.append("[[params]]")
        L.append(f"id = {toml_str(self.param_id)}")
        L.append("")
        tols = [c["tol"] for _, c in ordered]
        default = max(set(tols), key=tols.count)
        L.append("[policies.test]")
        L.append(f"description = {toml_str('the tolerances the test passes to assert_close / allclose')}")
        L.append(f"default = {{ atol = {fmt_float(default[0])}, rtol = {fmt_float(default[1])} }}")
        for cname, c in ordered:
            if c["tol"] != default:
                L.append(f"checks.{cname} = {{ atol = {fmt_float(c['tol'][0])}, rtol = {fmt_float(c['tol'][1])} }}")
        if self.errors:
            raise CaptureError(self.errors)
        self.ordered_checks = ordered
        return "\n".join(L) + "\n"

    def ref_name(self, v):
        return v[1] if v[0] == "input" else self.layer_name(v[1])

    def shard_rule(self):
        rules = set()
        for mi, rs in self.shard_ranges.items():
            cfg = self.module(mi)["cfg"]
            n = len(rs)
            spans = [hi - lo for lo, hi in rs]
            if rs[0][0] != 0 or any(rs[i][1] != rs[i + 1][0] for i in range(n - 1)):
                self.fail("shards that do not tile the weight", self.module(mi)["line"])
                continue
            if n != self.tp:
                self.fail(f"a layer sharded over {n} ranks, another over {self.tp}", self.module(mi)["line"])
            total = rs[-1][1]
            even = [total // n + (1 if r < total % n else 0) for r in range(n)]
            if total % n == 0 and spans == [total // n] * n:
                rules.add("either")
            elif spans == even:
                rules.add("deepspeed")
            else:
                self.fail(f"shard sizes {spans}: neither Megatron's equal split nor DeepSpeed's near-even rule",
                          self.module(mi)["line"])
        return "deepspeed" if "deepspeed" in rules else "megatron"

    # -- what produced a tensor, for a mirror that is not exact ------------------------------
    def micro_of(self, sym):
        """The micro-step label (`s.m`, or `s` with one micro-step) an op ran in, or None."""
        ev = sym.meta.get("ev")
        if ev is None:
            return None
        gm = sum(1 for d in self.data_idx if d < ev) - 1
        if gm < 0:
            return None
        return self.label_str(divmod(gm, self.micro), "micro-step")

    def aten_of(self, sym):
        """(the test's op behind a value, its source line)."""
        sym = unwrap(sym)
        if sym.op in ("aten.transpose", "aten.permute") and isinstance(sym.args[0], Sym) \
                and unwrap(sym.args[0]).op == "aten.bmm":
            return ("F.scaled_dot_product_attention (the math path: bmm, _safe_softmax, bmm)",
                    unwrap(sym.args[0]).line)
        op = sym.meta.get("overload") or sym.op
        if sym.op == "getitem" and isinstance(sym.args[0], Sym):
            op = sym.args[0].meta.get("overload") or sym.args[0].op
        return (op, sym.line)

    def layer_outputs(self):
        """{(computation, layer index, micro-step label): (value as a flat float32 tensor or None,
        [(aten op, source line)])}: the test's own output of every layer, the sharded
        computation's rank shards concatenated in rank order on the last dim."""
        import torch
        parts = {}
        out = {}
        for side, sym, v in self.produced:
            comp = "reference" if side == "ref" else "sharded"
            lab = self.micro_of(sym)
            if lab is None:
                continue
            if v[0] == "layer":
                key = (comp, v[1], lab)
                if key not in out or (out[key][0] is None and "value" in sym.meta):
                    val = sym.meta.get("value")
                    out[key] = (None if val is None else val.reshape(-1), [self.aten_of(sym)])
            else:
                parts.setdefault((comp, v[1], lab), {}).setdefault(v[2], sym)
        for key, by_rank in parts.items():
            if key in out:
                continue
            li = key[1]
            spec = self.layers[li]["spec"]
            root = self.col_root(li) if spec[0] != "linear" else li
            rs = self.shard_ranges.get(self.layers[root]["spec"][1], [])
            syms = [by_rank.get(rg) for rg in rs]
            ops = [self.aten_of(x) for x in syms if x is not None]
            if not rs or any(x is None or "value" not in x.meta for x in syms):
                out[key] = (None, ops)
                continue
            vals = [x.meta["value"] for x in syms]
            widths = [hi - lo for lo, hi in rs]
            whole = torch.cat([t.reshape(-1, w) for t, w in zip(vals, widths)], dim=1)
            out[key] = (whole.reshape(-1), list(dict.fromkeys(ops)))
        return out

    def producer(self, tensor, comp="reference"):
        """Words for the op that produced a check's tensor (`fc1.out`, `fc1.weight.grad`,
        `fc1.weight`, `loss`), with the test's source line."""
        if tensor == "loss":
            op = self.loss_spec[0]
            line = next((l.line for l in self.loss_syms["tp" if comp == "sharded" else "ref"]), "<run>")
            return f"the loss ({op}, the test's line {line})"
        parts = tensor.split(".")
        name = parts[0]
        li = next((i for i, l in enumerate(self.layers) if l["name"] == name), None)
        if li is None:
            return tensor
        l = self.layers[li]
        op = l["spec"][0] + (f", {l['parallel']}" if l["parallel"] != "none" else "")
        lines = l["line"]
        if l.get("tp_line", lines) != lines:
            lines = f"{lines} (reference) and {l['tp_line']} (sharded)"
        if parts[1] == "out":
            return f"layer `{name}` ({op}) forward, the test's op at {lines}"
        if parts[-1] == "grad":
            return (f"the backward of layer `{name}` ({op}) into its {parts[1]} (autograd of the test's op at "
                    f"{lines})")
        opt = self.tp_opt if comp == "sharded" else self.ref_opt
        return f"the optimizer step ({opt['cls']}, {opt['line']}) on layer `{name}`'s {parts[1]} ({op})"

    # the recorded values at every checked point, for the mirror proof
    def recorded(self):
        """[(check name, step label, computation, tensor value, source line)]."""
        out = []
        for cname, label, e in self.check_calls:
            at = self.checks[cname]["at"]
            lab = self.label_str(label, at)
            out.append((cname, lab, "sharded", e["actual_value"], e["line"]))
            out.append((cname, lab, "reference", e["expected_value"], e["line"]))
        return out
