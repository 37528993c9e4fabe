//! DiLoCo (Distributed Low-Communication training) as a seed sweep, and the DiLoCo engine that
//! `maxtext_diloco` (T3, `../shared/docs/mission.md`) runs on fixed data.
//!
//! # The algorithm (MaxText's `diloco.py`)
//!
//! `replicas` copies of the model train independently with an inner optimizer. After every
//! inner step k (1-based) with `k % inner_steps == 0` they synchronize:
//! - pseudo-gradient `g = (Σ_r (outer − inner_r)) / replicas`: every replica's delta is summed
//!   by an all-reduce, then divided once by the replica count (`drjax.reduce_mean`);
//! - outer step, `optax.sgd(outer_lr, momentum, nesterov)`: trace `t ← g + momentum·t`, update
//!   `u = g + momentum·t` (Nesterov) or `u = t`, `outer ← outer − outer_lr·u`;
//! - every replica's parameters are replaced by the new outer parameters; the inner optimizer
//!   state is kept.
//!
//! The reported loss of a step is MaxText's `typed_reduce_mean`: the replicas' losses summed by
//! an all-reduce, then divided once by the replica count.
//!
//! # Order of operations (every computation, f32 and f64 alike)
//!
//! The JAX program is mirrored op by op. Every dot (forward and backward) is the backend's
//! matmul, so a numerics profile decides its input precision and accumulation (XLA applies a
//! precision to every f32 dot). Elementwise code rounds as the profile's execution mode
//! ([`XlaMode`], the profile part `xla`; default: the scenario's) says, measured with JAX
//! 0.10.2 on the CPU (`scripts/crosscheck_jax.py --contraction`):
//! - `eager` (op by op, as MaxText's test calls `diloco_train_step`): every elementwise
//!   operation of the inner step is its own XLA executable and rounds once, so
//!   `p + (−lr)·g` is `round(p + round(−lr·g))` (measured: 100 % of random inputs);
//! - `jit` (`jax.jit` of the whole step): XLA's CPU backend contracts a product that feeds an
//!   add into one FMA: the SGD update is `fma(g, −lr, p)` (100 %), and the per-replica loss of
//!   two examples of one output is `fma(r0, r0, r1·r1)·0.5` (100 % of 1000 random states of
//!   the real jitted step).
//!
//! The sync runs inside `jax.lax.cond`, which JAX compiles in both modes, so it is contracted
//! in both: the Nesterov trace `fma(0.9, t, g)`, the update and the outer step (100 %).
//! Per inner step and replica, with `N = batch·outputs`:
//! 1. forward, linear: `pred = x·W` (matmul), then `pred = pred + b` per row;
//!    mlp: `h = x·W1` (matmul), `h = h + b1`, `h = tanh(h)`, `pred = h·W2` (matmul),
//!    `pred = pred + b2`;
//! 2. residual `r = pred − y`; loss `(Σ r·r) / N`: eager, the squares rounded, summed from 0
//!    in element order, divided once; jit with 2 examples of one output (MaxText's test),
//!    `fma(r0, r0, r1·r1) / 2`. XLA's reduction order for more elements is not revealed
//!    (measured: neither a forward nor a backward FMA chain matches the jitted step for 3 to
//!    16 examples), so there jit sums as eager does and the loss check may differ from JAX's
//!    by the rounding of that sum (the gradients do not depend on it). For more than 2
//!    elements even the eager reduce's order is XLA's and not revealed;
//! 3. `dr = c·r` with `c = 2/N` rounded once (the gradient of the mean of squares; exact when N
//!    is a power of two, and 1 for the MaxText test);
//! 4. backward, linear: `dW = xᵀ·dr` (matmul), `db = Σ_rows dr` (column sums from the first row
//!    down); mlp: `dW2 = hᵀ·dr`, `db2 = Σ_rows dr`, `dh = dr·W2ᵀ` (matmuls), then JAX's tanh
//!    derivative `(g + g·y)·(1 − y)`: jit `fma(dh, h, dh)·(1 − h)` (the add contracted),
//!    eager every op rounded; `dW1 = xᵀ·dpre`, `db1 = Σ_rows dpre`;
//! 5. inner update: see [`InnerOpt`].
//!
//! # The three computations
//!
//! - `sharded`: the replicas' arithmetic in the profile, the loss sum and the pseudo-gradient
//!   sum through the backend's all-reduce (replicas = ranks: ring, tree or rank order, f32 or
//!   bf16 wire);
//! - `reference`: the same replicas computed on one device: both sums in rank order,
//!   `((x0 + x1) + x2) + …`, in f32;
//! - `f64`: the float64 ground truth, rank order.
//!
//! With 2 replicas every all-reduce order is `x0 + x1`, so `sharded` and `reference` agree bit
//! for bit unless the wire is bf16; orders differ from 3 replicas on.
//!
//! # The synthetic sweep (`scenario = "diloco"`)
//!
//! Per seed, from ChaCha streams keyed by (seed, name) (`rng::chacha`), whatever the config's
//! `rng` says (torch's generator plays no part in a JAX test):
//! - initial weights, flax's `nnx.Linear` defaults: every kernel `N(0, 1/fan_in)` (streams
//!   `init.w1`, `init.w2`), every bias 0;
//! - a linear teacher `T` (inputs × outputs) `~ N(0, 1/inputs)` (`data.teacher`) and teacher
//!   bias `~ N(0, 1)` (`data.teacher.bias`);
//! - replica r's fixed batch (reused at every inner step, as in the MaxText test):
//!   `x ~ N(0, 1)` (`data.replica{r}.x`, batch × inputs) and
//!   `y = x·T + tb + 0.1·ε` with `ε ~ N(0, 1)` (`data.replica{r}.noise`), computed in f64 (the
//!   dot summed in input order) and rounded once to f32.
//!
//! All three computations start from these f32 values (widened exactly for f64).
//!
//! Checks: `loss` (every inner step), `outer_unchanged` (every non-sync step: the outer
//! parameters equal their value before the step, exactly), `outer_params` (after every sync),
//! `inner_equals_outer` (after every sync: every replica's parameters equal the outer ones,
//! exactly). The two exact checks are self-consistency checks: each computation's own state is
//! compared with its own expectation, so a sync that forgot a replica or an outer step taken
//! between syncs fails them.

use std::fmt::Write as _;

use serde::Deserialize;

use crate::backend::{Backend, F32Backend, F64Backend, Kernels};
use crate::check::StepLabel;
use crate::config::{in_range, resolve_policies, section, CommonConfig, Policy};
use crate::error::InputError;
use crate::fp::matmul::MatmulScratch;
use crate::model::layers::{add_row_bias, column_sums_generic, tanh_inplace};
use crate::mutant::Mutant;
use crate::profile::{Profile, XlaMode};
use crate::real::Real;
use crate::rng::chacha::ChaChaStream;
use crate::scenario::{CheckSpec, Scenario, Traces, Workspace};
use crate::trace::{SlotRole, Trace};

/// Scenario kind name.
pub const KIND: &str = "diloco";

/// Every check a DiLoCo scenario records.
pub(crate) const CHECK_NAMES: &[&str] = &[
    "loss",
    "outer_unchanged",
    "outer_params",
    "inner_equals_outer",
];

/// The model one replica trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `pred = x·W + b` (flax `nnx.Linear`).
    Linear,
    /// `pred = tanh(x·W1 + b1)·W2 + b2`.
    Mlp,
}

impl ModelKind {
    fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::Mlp => "mlp",
        }
    }
}

/// The inner optimizer, as optax writes it. Constants are rounded once to the computation's
/// precision (f32: round to nearest, as JAX converts a weak-typed Python float).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InnerOpt {
    /// `optax.sgd(lr)`: `p + (−lr)·g`; jit `fma(g, −lr, p)` (contracted, one rounding),
    /// eager `round(p + round(−lr·g))`.
    Sgd {
        /// Learning rate.
        lr: f64,
    },
    /// `optax.adamw(lr, b1, b2, eps, eps_root=0, weight_decay)`, at step t (1-based):
    /// `m = (1−b1)·g + b1·m` and `v = (1−b2)·(g·g) + b2·v` (every operation rounded; the two
    /// products of each sum make it no single contraction); `m̂ = m / bc1`, `v̂ = v / bc2` with
    /// `bc = 1 − b^t` computed in f64 and rounded once; `u = m̂ / (sqrt(v̂) + eps)` (sqrt
    /// correctly rounded); jit `u = fma(wd, p, u)`, `p = fma(u, −lr, p)`; eager
    /// `u = round(u + round(wd·p))`, `p = round(p + round(−lr·u))`.
    AdamW {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        b1: f64,
        /// Second-moment decay.
        b2: f64,
        /// Denominator epsilon.
        eps: f64,
        /// Decoupled weight decay.
        weight_decay: f64,
    },
}

impl InnerOpt {
    fn name(&self) -> &'static str {
        match self {
            Self::Sgd { .. } => "sgd",
            Self::AdamW { .. } => "adamw",
        }
    }
}

/// A DiLoCo run: model shape, replicas, schedule and optimizers.
#[derive(Debug, Clone, PartialEq)]
pub struct DilocoSpec {
    /// Model kind.
    pub model: ModelKind,
    /// Input features.
    pub inputs: usize,
    /// Hidden units (mlp only; 0 for linear).
    pub hidden: usize,
    /// Outputs.
    pub outputs: usize,
    /// Examples per replica.
    pub batch: usize,
    /// Replicas (= all-reduce ranks).
    pub replicas: usize,
    /// Sync period H: sync after inner step k when `k % inner_steps == 0`.
    pub inner_steps: usize,
    /// Inner steps in total.
    pub steps: usize,
    /// Inner optimizer.
    pub inner: InnerOpt,
    /// Outer learning rate.
    pub outer_lr: f64,
    /// Outer momentum (trace decay).
    pub outer_momentum: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// The execution mode of a profile that leaves `xla` unset.
    pub default_mode: XlaMode,
}

/// Where each part of the flat parameter vector lives (row-major kernels, `fan_in × fan_out`):
/// linear `[W (in×out), b (out)]`; mlp `[W1 (in×hid), b1 (hid), W2 (hid×out), b2 (out)]`.
impl DilocoSpec {
    /// Number of parameters of one replica.
    pub fn n_params(&self) -> usize {
        match self.model {
            ModelKind::Linear => self.inputs * self.outputs + self.outputs,
            ModelKind::Mlp => {
                self.inputs * self.hidden + self.hidden + self.hidden * self.outputs + self.outputs
            }
        }
    }

    /// The checks and their indices: `loss`, `outer_unchanged` (only when some step does not
    /// sync), `outer_params` and `inner_equals_outer` (only when some step syncs), in the order
    /// of their first recorded slot.
    pub(crate) fn checks(&self) -> (Vec<CheckSpec>, CheckIdx) {
        let np = self.n_params();
        let mut checks = Vec::new();
        let mut add = |c: CheckSpec| {
            checks.push(c);
            checks.len() - 1
        };
        let loss = add(CheckSpec::new("loss", vec![]));
        let any_plain = (1..=self.steps).any(|k| k % self.inner_steps != 0);
        let any_sync = self.steps >= self.inner_steps;
        // Step 1 is a non-sync step whenever there is one at all (H > 1), so it comes first.
        let outer_unchanged = any_plain.then(|| {
            add(CheckSpec {
                name: "outer_unchanged",
                shape: vec![np],
                self_consistent: true,
                reduction: None,
            })
        });
        let (outer_params, inner_equals_outer) = if any_sync {
            let o = add(CheckSpec::new("outer_params", vec![np]));
            let i = add(CheckSpec {
                name: "inner_equals_outer",
                shape: vec![self.replicas, np],
                self_consistent: true,
                reduction: None,
            });
            (Some(o), Some(i))
        } else {
            (None, None)
        };
        (
            checks,
            CheckIdx {
                loss,
                outer_unchanged,
                outer_params,
                inner_equals_outer,
            },
        )
    }
}

/// Indices of the checks in a parametrization's check list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CheckIdx {
    pub loss: usize,
    pub outer_unchanged: Option<usize>,
    pub outer_params: Option<usize>,
    pub inner_equals_outer: Option<usize>,
}

/// The f32 inputs of one run: initial parameters (one replica's flat vector) and every
/// replica's batch, replica-major.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DilocoData {
    /// Initial parameters, flat (see [`DilocoSpec::n_params`] for the layout).
    pub init: Vec<f32>,
    /// Inputs, `replicas × batch × inputs`.
    pub x: Vec<f32>,
    /// Targets, `replicas × batch × outputs`.
    pub y: Vec<f32>,
}

/// Activations and gradients of one inner step.
#[derive(Debug, Default)]
struct Act<R> {
    h: Vec<R>,
    pred: Vec<R>,
    dr: Vec<R>,
    dh: Vec<R>,
    dpre: Vec<R>,
    grad: Vec<R>,
}

/// The state of one computation, reused across seeds.
#[derive(Debug, Default)]
pub(crate) struct EngineBufs<R> {
    x: Vec<R>,
    y: Vec<R>,
    outer: Vec<R>,
    prev_outer: Vec<R>,
    trace_m: Vec<R>,
    inner: Vec<R>,
    adam_m: Vec<R>,
    adam_v: Vec<R>,
    parts: Vec<R>,
    sum: Vec<R>,
    tiled: Vec<R>,
    loss_parts: Vec<R>,
    loss_sum: Vec<R>,
    act: Act<R>,
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    v.clear();
    v.resize(n, R::ZERO);
}

fn load<R: Real>(v: &mut Vec<R>, src: &[f32]) {
    v.clear();
    v.extend(src.iter().map(|&x| R::from_f32(x)));
}

/// Correctly rounded square root in either precision: the f64 square root of the exactly
/// widened value, rounded once to `R`. For f32 the double rounding is innocuous (f64 carries
/// more than 2·24 + 2 significant bits, Figueroa 1995).
fn sqrt<R: Real>(x: R) -> R {
    R::from_f64(x.to_f64().sqrt())
}

/// Sums `n` equal-length rank-major buffers into `out`: through the backend's all-reduce when
/// `collective` (the sharded run: ring, tree or rank order, f32 or bf16 wire, as the profile
/// says), else in rank order `((x0 + x1) + x2) + …` with one rounding per add (one device).
fn reduce<B: Backend>(be: &mut B, collective: bool, parts: &[B::R], n: usize, out: &mut [B::R]) {
    if collective {
        be.all_reduce(parts, n, out);
    } else {
        let len = out.len();
        out.copy_from_slice(&parts[..len]);
        for r in 1..n {
            for (o, &v) in out.iter_mut().zip(&parts[r * len..(r + 1) * len]) {
                *o = *o + v;
            }
        }
    }
}

/// One inner step of one replica: forward, loss, backward, optimizer update (module doc,
/// steps 1–5, and [`InnerOpt`]) in execution mode `mode`. `t` is the 1-based step (AdamW's
/// bias-correction count). Returns the replica's loss.
#[allow(clippy::too_many_arguments)]
fn inner_step<B: Backend>(
    spec: &DilocoSpec,
    be: &mut B,
    mode: XlaMode,
    t: usize,
    x: &[B::R],
    y: &[B::R],
    p: &mut [B::R],
    m: &mut [B::R],
    v: &mut [B::R],
    a: &mut Act<B::R>,
) -> B::R {
    let (ni, nh, no, nb) = (spec.inputs, spec.hidden, spec.outputs, spec.batch);
    let n = nb * no;
    match spec.model {
        ModelKind::Linear => {
            let (w, b) = p.split_at(ni * no);
            be.matmul(x, w, &mut a.pred, nb, ni, no);
            add_row_bias(&mut a.pred, b, no);
        }
        ModelKind::Mlp => {
            let (w1, rest) = p.split_at(ni * nh);
            let (b1, rest) = rest.split_at(nh);
            let (w2, b2) = rest.split_at(nh * no);
            be.matmul(x, w1, &mut a.h, nb, ni, nh);
            add_row_bias(&mut a.h, b1, nh);
            tanh_inplace(&mut a.h);
            be.matmul(&a.h, w2, &mut a.pred, nb, nh, no);
            add_row_bias(&mut a.pred, b2, no);
        }
    }
    let jit = mode == XlaMode::Jit;
    let c = B::R::from_f64(2.0 / n as f64);
    let mut s = B::R::ZERO;
    for ((d, &pv), &yv) in a.dr.iter_mut().zip(&a.pred).zip(y) {
        let r = pv - yv;
        s = s + r * r;
        *d = c * r;
    }
    if jit && nb == 2 && no == 1 {
        // The jitted step's loss fusion: fma(r0, r0, r1·r1) (module doc, step 2).
        let (r0, r1) = (a.pred[0] - y[0], a.pred[1] - y[1]);
        s = r0.fma(r0, r1 * r1);
    }
    let loss = s / B::R::from_f64(n as f64);
    match spec.model {
        ModelKind::Linear => {
            let (gw, gb) = a.grad.split_at_mut(ni * no);
            be.matmul_tn(x, &a.dr, gw, ni, nb, no);
            column_sums_generic(&a.dr, no, gb);
        }
        ModelKind::Mlp => {
            let w2 = &p[ni * nh + nh..ni * nh + nh + nh * no];
            let (gw1, rest) = a.grad.split_at_mut(ni * nh);
            let (gb1, rest) = rest.split_at_mut(nh);
            let (gw2, gb2) = rest.split_at_mut(nh * no);
            be.matmul_tn(&a.h, &a.dr, gw2, nh, nb, no);
            column_sums_generic(&a.dr, no, gb2);
            be.matmul_nt(&a.dr, w2, &mut a.dh, nb, no, nh);
            for ((d, &g), &hv) in a.dpre.iter_mut().zip(&a.dh).zip(&a.h) {
                let gy = if jit { g.fma(hv, g) } else { g + g * hv };
                *d = gy * (B::R::ONE - hv);
            }
            be.matmul_tn(x, &a.dpre, gw1, ni, nb, nh);
            column_sums_generic(&a.dpre, nh, gb1);
        }
    }
    match spec.inner {
        InnerOpt::Sgd { lr } => {
            let neg_lr = -B::R::from_f64(lr);
            if jit {
                B::R::fma_update(p, &a.grad, neg_lr);
            } else {
                for (w, &g) in p.iter_mut().zip(&a.grad) {
                    *w = *w + neg_lr * g;
                }
            }
        }
        InnerOpt::AdamW {
            lr,
            b1,
            b2,
            eps,
            weight_decay,
        } => {
            let c1 = B::R::from_f64(1.0 - b1);
            let c2 = B::R::from_f64(1.0 - b2);
            let (b1r, b2r) = (B::R::from_f64(b1), B::R::from_f64(b2));
            let bc1 = B::R::from_f64(1.0 - b1.powi(t as i32));
            let bc2 = B::R::from_f64(1.0 - b2.powi(t as i32));
            let (eps, wd, neg_lr) = (
                B::R::from_f64(eps),
                B::R::from_f64(weight_decay),
                -B::R::from_f64(lr),
            );
            for (((w, &g), mv), vv) in p
                .iter_mut()
                .zip(&a.grad)
                .zip(m.iter_mut())
                .zip(v.iter_mut())
            {
                *mv = c1 * g + b1r * *mv;
                *vv = c2 * (g * g) + b2r * *vv;
                let mh = *mv / bc1;
                let vh = *vv / bc2;
                let u = mh / (sqrt(vh) + eps);
                if jit {
                    let u = wd.fma(*w, u);
                    *w = u.fma(neg_lr, *w);
                } else {
                    let u = u + wd * *w;
                    *w = *w + neg_lr * u;
                }
            }
        }
    }
    loss
}

/// The execution modes both DiLoCo scenarios mirror ([`XlaMode`]), as profile modifiers.
pub(crate) const EXECUTION_MODIFIERS: &[&str] = &["xla-eager", "xla-jit"];

/// The bugs both DiLoCo scenarios can inject into their sync (see [`compute`]).
pub(crate) const MUTANTS: &[Mutant] = &[
    Mutant::NoReplicaMean,
    Mutant::PseudoGradSign,
    Mutant::NoNesterov,
    Mutant::StaleOuterParams,
];

/// One DiLoCo run in one computation, recording its checks (module doc), its inner steps in
/// execution mode `mode`. `collective` selects the backend's all-reduce for the two sums (the
/// sharded run) or the rank-order sum (the reference and the f64 run).
///
/// Per step k = 1..=steps: every replica takes an inner step (replica order); the loss sum is
/// reduced and divided by the replica count and recorded; then if `k % inner_steps == 0` the
/// sync (compiled under `jax.lax.cond` in either mode, so contracted): `d_r = outer − inner_r`
/// (one rounding), `s = reduce(d)`, `g = s / replicas`, `t = fma(momentum, t, g)`,
/// `u = fma(momentum, t, g)` (Nesterov) or `t`, `outer = fma(u, −outer_lr, outer)`, every
/// replica's parameters set to `outer`; `outer_params`
/// and `inner_equals_outer` are recorded. Otherwise `outer_unchanged` records the outer
/// parameters against their value before the step.
///
/// `mutant` (sharded run only) injects a bug into the sync: `no-replica-mean` (g = s),
/// `pseudo-grad-sign` (d_r = inner_r − outer), `no-nesterov` (u = t), `stale-outer-params`
/// (replicas keep their inner parameters).
#[allow(clippy::too_many_arguments)]
pub(crate) fn compute<B: Backend>(
    spec: &DilocoSpec,
    idx: &CheckIdx,
    be: &mut B,
    mode: XlaMode,
    data: &DilocoData,
    collective: bool,
    mutant: Option<Mutant>,
    b: &mut EngineBufs<B::R>,
    trace: &mut Trace,
) {
    let (nr, np) = (spec.replicas, spec.n_params());
    let (nx, ny) = (spec.batch * spec.inputs, spec.batch * spec.outputs);
    load(&mut b.x, &data.x);
    load(&mut b.y, &data.y);
    load(&mut b.outer, &data.init);
    b.inner.clear();
    for _ in 0..nr {
        b.inner.extend_from_slice(&b.outer);
    }
    for (buf, len) in [
        (&mut b.prev_outer, np),
        (&mut b.trace_m, np),
        (&mut b.sum, np),
        (&mut b.adam_m, nr * np),
        (&mut b.adam_v, nr * np),
        (&mut b.parts, nr * np),
        (&mut b.tiled, nr * np),
        (&mut b.loss_parts, nr),
        (&mut b.loss_sum, 1),
        (&mut b.act.h, spec.batch * spec.hidden),
        (&mut b.act.dh, spec.batch * spec.hidden),
        (&mut b.act.dpre, spec.batch * spec.hidden),
        (&mut b.act.pred, ny),
        (&mut b.act.dr, ny),
        (&mut b.act.grad, np),
    ] {
        sized(buf, len);
    }
    let nr_r = B::R::from_f64(nr as f64);
    let mu = B::R::from_f64(spec.outer_momentum);
    let neg_outer_lr = -B::R::from_f64(spec.outer_lr);
    for k in 1..=spec.steps {
        let label = StepLabel::step(k as u32);
        b.prev_outer.copy_from_slice(&b.outer);
        for r in 0..nr {
            let span = r * np..(r + 1) * np;
            b.loss_parts[r] = inner_step(
                spec,
                be,
                mode,
                k,
                &b.x[r * nx..(r + 1) * nx],
                &b.y[r * ny..(r + 1) * ny],
                &mut b.inner[span.clone()],
                &mut b.adam_m[span.clone()],
                &mut b.adam_v[span],
                &mut b.act,
            );
        }
        reduce(be, collective, &b.loss_parts, nr, &mut b.loss_sum);
        let loss = b.loss_sum[0] / nr_r;
        trace.record(idx.loss, label, &[loss]);
        if k % spec.inner_steps == 0 {
            for (r, part) in b.parts.chunks_exact_mut(np).enumerate() {
                let inner = &b.inner[r * np..(r + 1) * np];
                for ((d, &o), &w) in part.iter_mut().zip(&b.outer).zip(inner) {
                    *d = if mutant == Some(Mutant::PseudoGradSign) {
                        w - o
                    } else {
                        o - w
                    };
                }
            }
            reduce(be, collective, &b.parts, nr, &mut b.sum);
            for ((o, t), &s) in b.outer.iter_mut().zip(b.trace_m.iter_mut()).zip(&b.sum) {
                let g = if mutant == Some(Mutant::NoReplicaMean) {
                    s
                } else {
                    s / nr_r
                };
                *t = mu.fma(*t, g);
                let nesterov = spec.nesterov && mutant != Some(Mutant::NoNesterov);
                let u = if nesterov { mu.fma(*t, g) } else { *t };
                *o = u.fma(neg_outer_lr, *o);
            }
            for (inner, tiled) in b
                .inner
                .chunks_exact_mut(np)
                .zip(b.tiled.chunks_exact_mut(np))
            {
                if mutant != Some(Mutant::StaleOuterParams) {
                    inner.copy_from_slice(&b.outer);
                }
                tiled.copy_from_slice(&b.outer);
            }
            if let Some(c) = idx.outer_params {
                trace.record(c, label, &b.outer);
            }
            if let Some(c) = idx.inner_equals_outer {
                trace.record(c, label, &b.inner);
                trace.record_role(c, label, SlotRole::SelfExpectedF32, &b.tiled);
                trace.record_role(c, label, SlotRole::SelfExpectedF64, &b.tiled);
            }
        } else if let Some(c) = idx.outer_unchanged {
            trace.record(c, label, &b.outer);
            trace.record_role(c, label, SlotRole::SelfExpectedF32, &b.prev_outer);
            trace.record_role(c, label, SlotRole::SelfExpectedF64, &b.prev_outer);
        }
    }
}

/// The three computations' state, reused across seeds.
#[derive(Debug, Default)]
pub(crate) struct ThreeBufs {
    b32: EngineBufs<f32>,
    b64: EngineBufs<f64>,
    f64_backend: F64Backend,
}

#[cfg(test)]
impl ThreeBufs {
    /// Every replica's parameters at the end of the last run: the sharded f32 computation's
    /// (it runs after the reference in the same buffers) and the f64 ground truth's.
    pub(crate) fn final_inner(&self) -> (&[f32], &[f64]) {
        (&self.b32.inner, &self.b64.inner)
    }
}

/// Runs the f64 ground truth, the one-device reference and the sharded computation of
/// `data` in `profile` into `traces` (cleared first), all three in the profile's execution
/// mode (`spec.default_mode` when the profile leaves it unset).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_three(
    spec: &DilocoSpec,
    idx: &CheckIdx,
    data: &DilocoData,
    profile: &Profile,
    kernels: Kernels,
    mutant: Option<Mutant>,
    scratch: &mut MatmulScratch,
    bufs: &mut ThreeBufs,
    traces: &mut Traces,
) {
    traces.clear();
    let mode = profile.xla.unwrap_or(spec.default_mode);
    compute(
        spec,
        idx,
        &mut bufs.f64_backend,
        mode,
        data,
        false,
        None,
        &mut bufs.b64,
        &mut traces.f64,
    );
    let mut be = F32Backend::new(profile, scratch).with_kernels(kernels);
    compute(
        spec,
        idx,
        &mut be,
        mode,
        data,
        false,
        None,
        &mut bufs.b32,
        &mut traces.reference,
    );
    compute(
        spec,
        idx,
        &mut be,
        mode,
        data,
        true,
        mutant,
        &mut bufs.b32,
        &mut traces.sharded,
    );
}

// ---------------------------------------------------------------------------------------------
// The synthetic sweep scenario.

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelToml {
    model: String,
    inputs: usize,
    hidden: Option<usize>,
    outputs: usize,
    batch: usize,
    #[serde(default = "two")]
    replicas: usize,
    #[serde(default = "three")]
    inner_steps: usize,
    rounds: usize,
    inner_optimizer: String,
    inner_lr: f64,
    b1: Option<f64>,
    b2: Option<f64>,
    eps: Option<f64>,
    weight_decay: Option<f64>,
    #[serde(default = "one_f64")]
    outer_lr: f64,
    #[serde(default = "point_nine")]
    outer_momentum: f64,
    #[serde(default = "yes")]
    nesterov: bool,
}

fn two() -> usize {
    2
}
fn three() -> usize {
    3
}
fn one_f64() -> f64 {
    1.0
}
fn point_nine() -> f64 {
    0.9
}
fn yes() -> bool {
    true
}

/// `lo < v < hi` (or `<=` where `closed_lo`) for a float setting, else an error naming the key.
pub(crate) fn float_in(
    file: &str,
    key: &str,
    v: f64,
    lo: f64,
    closed_lo: bool,
    hi: f64,
) -> Result<(), InputError> {
    let ok = v.is_finite() && (v > lo || (closed_lo && v == lo)) && v < hi;
    if ok {
        return Ok(());
    }
    let lo_s = if closed_lo { "<=" } else { "<" };
    Err(InputError::config(
        file,
        key,
        format!("{v} is not allowed; allowed: {lo} {lo_s} {key} < {hi}"),
    ))
}

/// The synthetic DiLoCo sweep.
#[derive(Debug)]
pub struct Diloco {
    common: CommonConfig,
    spec: DilocoSpec,
    id: String,
    checks: Vec<CheckSpec>,
    idx: CheckIdx,
    policies: Vec<Policy>,
}

impl Diloco {
    /// Validates the config.
    pub fn new(common: CommonConfig) -> Result<Self, InputError> {
        let file = common.file.clone();
        let f = file.as_str();
        let m: ModelToml = section(f, "model", &common.model)?;
        let model = match m.model.as_str() {
            "linear" => ModelKind::Linear,
            "mlp" => ModelKind::Mlp,
            other => {
                return Err(InputError::config(
                    f,
                    "model.model",
                    format!("`{other}` is not a model; allowed: linear, mlp"),
                ))
            }
        };
        in_range(f, "model.inputs", m.inputs, 1, 4096)?;
        in_range(f, "model.outputs", m.outputs, 1, 4096)?;
        in_range(f, "model.batch", m.batch, 1, 65536)?;
        in_range(f, "model.replicas", m.replicas, 1, 64)?;
        in_range(f, "model.inner_steps", m.inner_steps, 1, 1000)?;
        in_range(f, "model.rounds", m.rounds, 1, 1000)?;
        let hidden = match (model, m.hidden) {
            (ModelKind::Mlp, Some(h)) => {
                in_range(f, "model.hidden", h, 1, 4096)?;
                h
            }
            (ModelKind::Mlp, None) => {
                return Err(InputError::config(
                    f,
                    "model.hidden",
                    "required for model = \"mlp\" (1..=4096)",
                ))
            }
            (ModelKind::Linear, Some(_)) => {
                return Err(InputError::config(
                    f,
                    "model.hidden",
                    "only allowed with model = \"mlp\"; a linear model has no hidden layer",
                ))
            }
            (ModelKind::Linear, None) => 0,
        };
        float_in(
            f,
            "model.inner_lr",
            m.inner_lr,
            0.0,
            false,
            crate::config::MAX_LR,
        )?;
        let adam_keys = [
            ("model.b1", m.b1),
            ("model.b2", m.b2),
            ("model.eps", m.eps),
            ("model.weight_decay", m.weight_decay),
        ];
        let inner = match m.inner_optimizer.as_str() {
            "sgd" => {
                if let Some((key, _)) = adam_keys.iter().find(|(_, v)| v.is_some()) {
                    return Err(InputError::config(
                        f,
                        *key,
                        "only allowed with inner_optimizer = \"adamw\"",
                    ));
                }
                InnerOpt::Sgd { lr: m.inner_lr }
            }
            "adamw" => {
                // optax.adamw's defaults.
                let (b1, b2) = (m.b1.unwrap_or(0.9), m.b2.unwrap_or(0.999));
                let (eps, wd) = (m.eps.unwrap_or(1e-8), m.weight_decay.unwrap_or(1e-4));
                float_in(f, "model.b1", b1, 0.0, true, 1.0)?;
                float_in(f, "model.b2", b2, 0.0, true, 1.0)?;
                float_in(f, "model.eps", eps, 0.0, false, f64::INFINITY)?;
                float_in(f, "model.weight_decay", wd, 0.0, true, f64::INFINITY)?;
                InnerOpt::AdamW {
                    lr: m.inner_lr,
                    b1,
                    b2,
                    eps,
                    weight_decay: wd,
                }
            }
            other => {
                return Err(InputError::config(
                    f,
                    "model.inner_optimizer",
                    format!("`{other}` is not an inner optimizer; allowed: sgd, adamw"),
                ))
            }
        };
        float_in(
            f,
            "model.outer_lr",
            m.outer_lr,
            0.0,
            false,
            crate::config::MAX_LR,
        )?;
        float_in(f, "model.outer_momentum", m.outer_momentum, 0.0, true, 1.0)?;
        if !common.params.is_empty() {
            return Err(InputError::config(
                f,
                "params",
                "not used by scenario `diloco`: its one parametrization is the [model] table",
            ));
        }
        let spec = DilocoSpec {
            model,
            inputs: m.inputs,
            hidden,
            outputs: m.outputs,
            batch: m.batch,
            replicas: m.replicas,
            inner_steps: m.inner_steps,
            steps: m.rounds * m.inner_steps,
            inner,
            outer_lr: m.outer_lr,
            outer_momentum: m.outer_momentum,
            nesterov: m.nesterov,
            default_mode: XlaMode::Jit,
        };
        let id = format!(
            "{}-r{}-h{}-{}",
            model.name(),
            spec.replicas,
            spec.inner_steps,
            inner.name()
        );
        let (checks, idx) = spec.checks();
        let policies = resolve_policies(&common, CHECK_NAMES)?;
        Ok(Self {
            common,
            spec,
            id,
            checks,
            idx,
            policies,
        })
    }

    /// The run's shape and schedule.
    pub fn spec(&self) -> &DilocoSpec {
        &self.spec
    }

    /// Draws seed `seed`'s data into `d` (module doc, "The synthetic sweep"). `name` is a
    /// reused buffer for stream names and `teacher` for the teacher weights, so nothing is
    /// allocated once they have grown.
    ///
    /// Order: the standard deviations `sqrt(1/fan_in)` are computed in f64 and rounded once
    /// to f32, then passed to [`ChaChaStream::fill_normal`] (values in index order, row-major).
    /// Streams: `init.w1` (then `init.w2` for mlp), `data.teacher`, `data.teacher.bias`, and
    /// per replica r in order `data.replica{r}.x` then `data.replica{r}.noise` (one normal per
    /// target, example-major). Target `y[e][o]`: `acc = 0; acc += x[e][i]·T[i][o]` for i
    /// ascending, in f64 (products of f32 values are exact there); then `acc + tb[o]`, then
    /// `+ 0.1·ε` (f64), rounded once to f32.
    pub fn draw(&self, seed: u64, d: &mut DilocoData, name: &mut String, teacher: &mut Vec<f32>) {
        let s = &self.spec;
        let (ni, nh, no, nb) = (s.inputs, s.hidden, s.outputs, s.batch);
        d.init.clear();
        d.init.resize(s.n_params(), 0.0);
        let std_in = (1.0 / ni as f64).sqrt() as f32;
        match s.model {
            ModelKind::Linear => {
                ChaChaStream::new(seed, "init.w1").fill_normal(&mut d.init[..ni * no], 0.0, std_in);
            }
            ModelKind::Mlp => {
                ChaChaStream::new(seed, "init.w1").fill_normal(&mut d.init[..ni * nh], 0.0, std_in);
                let w2 = ni * nh + nh;
                let std_h = (1.0 / nh as f64).sqrt() as f32;
                ChaChaStream::new(seed, "init.w2").fill_normal(
                    &mut d.init[w2..w2 + nh * no],
                    0.0,
                    std_h,
                );
            }
        }
        teacher.clear();
        teacher.resize(ni * no + no, 0.0);
        let (tw, tb) = teacher.split_at_mut(ni * no);
        ChaChaStream::new(seed, "data.teacher").fill_normal(tw, 0.0, std_in);
        ChaChaStream::new(seed, "data.teacher.bias").fill_normal(tb, 0.0, 1.0);
        d.x.clear();
        d.x.resize(s.replicas * nb * ni, 0.0);
        d.y.clear();
        d.y.resize(s.replicas * nb * no, 0.0);
        for r in 0..s.replicas {
            let x = &mut d.x[r * nb * ni..(r + 1) * nb * ni];
            name.clear();
            let _ = write!(name, "data.replica{r}.x");
            ChaChaStream::new(seed, name).fill_normal(x, 0.0, 1.0);
            name.clear();
            let _ = write!(name, "data.replica{r}.noise");
            let mut noise = ChaChaStream::new(seed, name);
            let y = &mut d.y[r * nb * no..(r + 1) * nb * no];
            for e in 0..nb {
                for o in 0..no {
                    let mut acc = 0.0f64;
                    for i in 0..ni {
                        acc += x[e * ni + i] as f64 * tw[i * no + o] as f64;
                    }
                    let eps = noise.normal_f32(0.0, 1.0) as f64;
                    y[e * no + o] = (acc + tb[o] as f64 + 0.1 * eps) as f32;
                }
            }
        }
    }
}

/// Per-thread buffers of the synthetic scenario.
#[derive(Debug, Default)]
pub struct DilocoBuffers {
    data: DilocoData,
    name: String,
    teacher: Vec<f32>,
    three: ThreeBufs,
}

impl Scenario for Diloco {
    fn common(&self) -> &CommonConfig {
        &self.common
    }
    fn param_ids(&self) -> Vec<&str> {
        vec![self.id.as_str()]
    }
    fn checks(&self, _param: usize) -> &[CheckSpec] {
        &self.checks
    }
    fn all_check_names(&self) -> &'static [&'static str] {
        CHECK_NAMES
    }
    fn execution_modifiers(&self) -> &'static [&'static str] {
        EXECUTION_MODIFIERS
    }
    fn mutants(&self) -> &'static [crate::mutant::Mutant] {
        MUTANTS
    }
    fn policies(&self) -> &[Policy] {
        &self.policies
    }
    fn summary(&self) -> String {
        let s = &self.spec;
        let shape = match s.model {
            ModelKind::Linear => format!("linear {}->{}", s.inputs, s.outputs),
            ModelKind::Mlp => format!("mlp {}->{}->{}", s.inputs, s.hidden, s.outputs),
        };
        format!(
            "{shape}, batch {} per replica, {} replicas, sync every {} inner steps ({} steps), \
             inner {}, outer sgd lr {} momentum {}{}",
            s.batch,
            s.replicas,
            s.inner_steps,
            s.steps,
            s.inner.name(),
            s.outer_lr,
            s.outer_momentum,
            if s.nesterov { " nesterov" } else { "" }
        )
    }
    fn run(&self, _param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        let mut traces = std::mem::take(&mut ws.traces);
        let kernels = ws.kernels;
        let ws_mutant = ws.mutant;
        let (bufs, scratch) = ws.buffers::<DilocoBuffers>();
        self.draw(seed, &mut bufs.data, &mut bufs.name, &mut bufs.teacher);
        run_three(
            &self.spec,
            &self.idx,
            &bufs.data,
            profile,
            kernels,
            ws_mutant,
            scratch,
            &mut bufs.three,
            &mut traces,
        );
        ws.traces = traces;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_scenario_config;
    use crate::profile::ProfileRegistry;

    const BUILTIN: &str = include_str!("../../configs/diloco.toml");

    fn scenario(text: &str) -> Result<Diloco, InputError> {
        Diloco::new(parse_scenario_config("test.toml", text)?)
    }

    fn values(t: &Trace, check: usize) -> Vec<f64> {
        t.slots
            .iter()
            .filter(|s| s.check == check && s.role == SlotRole::Value)
            .flat_map(|s| t.data(s).iter().copied())
            .collect()
    }

    #[test]
    fn default_config_trains_the_outer_model() {
        // The synthetic defaults must train stably: the f64 loss after the last round is below
        // half the first step's loss for every one of these seeds (a diverging or frozen outer
        // optimizer would not be).
        let s = scenario(BUILTIN).unwrap();
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("f32", "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        for seed in 0..20 {
            s.run(0, seed, &profile, &mut ws);
            let loss = values(&ws.traces.f64, s.idx.loss);
            assert_eq!(loss.len(), s.spec.steps);
            let (first, last) = (loss[0], *loss.last().unwrap());
            assert!(
                last.is_finite() && last < 0.5 * first,
                "seed {seed}: loss {first} -> {last}"
            );
        }
    }

    #[test]
    fn draws_depend_on_the_seed_only() {
        let s = scenario(BUILTIN).unwrap();
        let (mut a, mut b, mut c) = (
            DilocoData::default(),
            DilocoData::default(),
            DilocoData::default(),
        );
        let (mut name, mut teacher) = (String::new(), Vec::new());
        s.draw(7, &mut a, &mut name, &mut teacher);
        s.draw(8, &mut b, &mut name, &mut teacher);
        s.draw(7, &mut c, &mut name, &mut teacher);
        assert_eq!(a, c);
        assert_ne!(a.x, b.x);
        assert_ne!(a.init, b.init);
        // Replicas see different data.
        let n = s.spec.batch * s.spec.inputs;
        assert_ne!(a.x[..n], a.x[n..2 * n]);
    }

    #[test]
    fn sync_and_unchanged_checks_record_where_the_schedule_says() {
        let s = scenario(BUILTIN).unwrap();
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("f32", "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        s.run(0, 3, &profile, &mut ws);
        let h = s.spec.inner_steps as u32;
        for slot in &ws.traces.sharded.slots {
            let sync = slot.step.step % h == 0;
            if Some(slot.check) == s.idx.outer_unchanged {
                assert!(!sync, "outer_unchanged at sync step {}", slot.step);
            }
            if Some(slot.check) == s.idx.outer_params
                || Some(slot.check) == s.idx.inner_equals_outer
            {
                assert!(sync, "sync check at step {}", slot.step);
            }
        }
    }

    #[test]
    fn the_exact_checks_catch_a_broken_sync() {
        // Self-consistency must be able to fail: corrupt one replica's parameters after the
        // sync in a recorded trace and the expected slot no longer equals the value.
        let s = scenario(BUILTIN).unwrap();
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("f32", "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        s.run(0, 1, &profile, &mut ws);
        let c = s.idx.inner_equals_outer.unwrap();
        let mut checked = 0;
        crate::evaluate::for_each_pair(
            &ws.traces,
            c,
            &s.checks[c],
            crate::evaluate::Comparison::ShardedVsRef,
            |_, a, e| {
                assert_eq!(a, e, "inner == outer after every sync");
                checked += 1;
            },
        );
        assert_eq!(checked, s.spec.steps / s.spec.inner_steps);
        // The value slot really holds the replicas' state: a perturbed copy differs.
        let slot = ws
            .traces
            .sharded
            .slots
            .iter()
            .find(|sl| sl.check == c && sl.role == SlotRole::Value)
            .copied()
            .unwrap();
        ws.traces.sharded.values[slot.start + slot.len - 1] += 1.0;
        let mut differs = false;
        crate::evaluate::for_each_pair(
            &ws.traces,
            c,
            &s.checks[c],
            crate::evaluate::Comparison::ShardedVsRef,
            |_, a, e| differs |= a != e,
        );
        assert!(differs);
    }

    #[test]
    fn mlp_and_adamw_configs_run_and_train() {
        let text = BUILTIN
            .replace("model = \"linear\"", "model = \"mlp\"\nhidden = 8")
            .replace("inner_optimizer = \"sgd\"", "inner_optimizer = \"adamw\"")
            .replace("inner_lr = 0.1", "inner_lr = 0.02");
        let s = scenario(&text).unwrap();
        assert_eq!(s.id, format!("mlp-r{}-h3-adamw", s.spec.replicas));
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("tpu-bf16", "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        s.run(0, 5, &profile, &mut ws);
        let loss = values(&ws.traces.f64, s.idx.loss);
        assert!(loss.last().unwrap() < &loss[0], "{loss:?}");
        // bf16 matmul inputs move the sharded run away from f64.
        assert_ne!(
            values(&ws.traces.sharded, s.idx.loss),
            values(&ws.traces.f64, s.idx.loss)
        );
    }

    #[test]
    fn bad_values_name_the_file_key_and_what_is_allowed() {
        let cases = [
            (
                "model = \"linear\"",
                "model = \"cnn\"",
                "model.model",
                "linear, mlp",
            ),
            ("replicas = 4", "replicas = 65", "model.replicas", "1..=64"),
            (
                "inner_optimizer = \"sgd\"",
                "inner_optimizer = \"adam\"",
                "model.inner_optimizer",
                "sgd, adamw",
            ),
            ("inner_lr = 0.1", "inner_lr = -1.0", "model.inner_lr", "0 <"),
            (
                "outer_momentum = 0.9",
                "outer_momentum = 1.0",
                "model.outer_momentum",
                "< 1",
            ),
            (
                "model = \"linear\"",
                "model = \"linear\"\nhidden = 3",
                "model.hidden",
                "mlp",
            ),
            (
                "inner_lr = 0.1",
                "inner_lr = 0.1\nb1 = 0.8",
                "model.b1",
                "adamw",
            ),
            ("rounds = 4", "rounds = 4\nround = 3", "model", "round"),
        ];
        for (from, to, key, allowed) in cases {
            assert!(BUILTIN.contains(from), "config lacks {from}");
            let err = scenario(&BUILTIN.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(err.contains("test.toml"), "{err}");
            assert!(err.contains(key), "{err}");
            assert!(err.contains(allowed), "{err}");
        }
    }
}
