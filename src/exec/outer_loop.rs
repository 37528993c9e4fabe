//! DiLoCo's outer loop ([`crate::scenario::ir::OuterLoop`]) as a wrapper around the executor's
//! own inner step ([`Plan::micro_step`]): replicas, sync every H inner steps, the
//! pseudo-gradient all-reduce, outer (Nesterov) SGD, replica reset, the loss mean over
//! replicas and the two exact self-consistency checks.
//!
//! # The algorithm (MaxText's `diloco.py`)
//!
//! `replicas` copies of the model train independently with the inner optimizer. After every
//! inner step k (1-based) with `k % sync_period == 0` they synchronize:
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
//! Per step k = 1..=steps: every replica takes one inner step in replica order — the
//! executor's micro-step on replica r's batch (block r of every input's leading axis): forward
//! through the graph's linear layers (flax kernels, [`crate::scenario::ir::WeightLayout::InOut`])
//! and tanh, the mean-squared-error loss, backward, the inner optimizer, all in the JAX
//! execution mode `xla` ([`crate::ops::xla`]: the profile's `xla`, else the graph's
//! default). The loss sum is reduced and divided by the replica count and recorded. Then if
//! `k % sync_period == 0` the sync, which JAX compiles inside `jax.lax.cond` in either mode, so
//! it is contracted in both: `d_r = outer − inner_r` (one rounding), `s = reduce(d)`,
//! `g = s / replicas`, `t = fma(momentum, t, g)`, `u = fma(momentum, t, g)` (Nesterov) or `t`,
//! `outer = fma(u, −outer_lr, outer)`, every replica's parameters set to `outer`;
//! `outer_params` and `inner_equals_outer` are recorded. Otherwise `outer_unchanged` records
//! the outer parameters against their value before the step.
//!
//! The parameters of one replica are seen as one flat vector, every parameter in table order
//! (each layer's kernel `[in, out]`, then its bias): the all-reduce runs on that vector (a ring
//! splits it into chunks by rank, so the flat order decides each element's summation order).
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
//! Checks: `loss` (every inner step), `outer_unchanged` (every non-sync step: the outer
//! parameters equal their value before the step, exactly), `outer_params` (after every sync),
//! `inner_equals_outer` (after every sync: every replica's parameters equal the outer ones,
//! exactly). The two exact checks are self-consistency checks: each computation's own state is
//! compared with its own expectation, so a sync that forgot a replica or an outer step taken
//! between syncs fails them.
//!
//! Mutants (sharded computation only) act on the sync: `no-replica-mean` (g = s),
//! `pseudo-grad-sign` (d_r = inner_r − outer), `no-nesterov` (u = t), `stale-outer-params`
//! (replicas keep their inner parameters).

use crate::check::StepLabel;
use crate::exec::graph::{Bufs, Plan};
use crate::exec::graph_scenario::intern;
use crate::exec::init::InputValue;
use crate::exec::scenario::CheckSpec;
use crate::exec::trace::{SlotRole, Trace};
use crate::ops::activations::ActReal;
use crate::ops::backend::Backend;
use crate::ops::real::Real;
use crate::scenario::ir::{Optimizer, OuterCheckKind, OuterData, OuterLoop, ResolvedGraph};
use crate::scenario::mutant::Mutant;
use crate::scenario::profile::XlaMode;
use crate::sys::error::InputError;

/// The execution modes an outer-loop graph mirrors ([`XlaMode`]), as profile modifiers.
pub(crate) const EXECUTION_MODIFIERS: &[&str] = &["xla-eager", "xla-jit"];

/// Indices of the outer loop's checks in the plan's check list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OuterIdx {
    pub loss: usize,
    pub outer_unchanged: Option<usize>,
    pub outer_params: Option<usize>,
    pub inner_equals_outer: Option<usize>,
}

/// What a plan of an outer-loop graph adds: its check indices, the flat parameter count of
/// one replica, and its data when the file writes it ([`OuterData::Fixed`]).
#[derive(Debug, Clone)]
pub(crate) struct OuterPlan {
    pub idx: OuterIdx,
    pub np: usize,
    pub fixed: Option<OuterInputs>,
}

/// One run's data: initial parameters (indexed by parameter) and every replica's inputs
/// (indexed by replica, then by input).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OuterInputs {
    /// Initial parameters, per parameter (a kernel `[in, out]`, row-major).
    pub init: Vec<Vec<f32>>,
    /// Per replica, per input: that replica's block of the input.
    pub inputs: Vec<Vec<InputValue>>,
}

impl OuterInputs {
    /// Splits global inputs (`values[input]`, replica-major rows) into the replicas' blocks.
    pub(crate) fn split(&mut self, replicas: usize, values: &[&[f32]]) {
        self.inputs.resize_with(replicas, Vec::new);
        for (r, per) in self.inputs.iter_mut().enumerate() {
            per.resize_with(values.len(), InputValue::default);
            for (v, all) in per.iter_mut().zip(values) {
                let n = all.len() / replicas;
                v.f.clear();
                v.f.extend_from_slice(&all[r * n..(r + 1) * n]);
            }
        }
    }
}

/// The state of one computation's outer loop, reused across seeds.
#[derive(Debug, Default)]
pub struct OuterBufs<R> {
    reps: Vec<Bufs<R>>,
    outer: Vec<R>,
    prev_outer: Vec<R>,
    trace_m: Vec<R>,
    inner: Vec<R>,
    parts: Vec<R>,
    sum: Vec<R>,
    tiled: Vec<R>,
    loss_parts: Vec<R>,
    loss_sum: Vec<R>,
}

#[cfg(test)]
impl<R> OuterBufs<R> {
    /// Every replica's parameters after the last step, flat and replica-major.
    pub(crate) fn final_inner(&self) -> &[R] {
        &self.inner
    }
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    v.clear();
    v.resize(n, R::ZERO);
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

/// `dst = concat(params)`.
fn gather<R: Real>(params: &[Vec<R>], dst: &mut [R]) {
    let mut off = 0;
    for p in params {
        dst[off..off + p.len()].copy_from_slice(p);
        off += p.len();
    }
}

impl Plan {
    /// One outer-loop run of this graph in one computation (module doc), its inner steps in
    /// execution mode `mode`. `collective` selects the backend's all-reduce for the two sums
    /// (the sharded run) or the rank-order sum (the reference and the f64 run); `mutant`
    /// (sharded run only) injects a bug into the sync.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn compute_outer<B: Backend>(
        &self,
        be: &mut B,
        mode: XlaMode,
        data: &OuterInputs,
        collective: bool,
        mutant: Option<Mutant>,
        ob: &mut OuterBufs<B::R>,
        trace: &mut Trace,
    ) where
        B::R: ActReal,
    {
        let (Some(o), Some(op)) = (self.graph.train.outer.as_ref(), self.outer.as_ref()) else {
            return;
        };
        let (nr, np, idx) = (o.replicas, op.np, op.idx);
        let cx = self.step_ctx::<B::R>(false, None, false, Some(mode));
        ob.reps.resize_with(nr, Bufs::default);
        for b in &mut ob.reps {
            self.load_state(&cx, &data.init, b);
        }
        ob.outer.clear();
        for p in &data.init {
            ob.outer.extend(p.iter().map(|&v| B::R::from_f32(v)));
        }
        for (buf, len) in [
            (&mut ob.prev_outer, np),
            (&mut ob.trace_m, np),
            (&mut ob.sum, np),
            (&mut ob.inner, nr * np),
            (&mut ob.parts, nr * np),
            (&mut ob.tiled, nr * np),
            (&mut ob.loss_parts, nr),
            (&mut ob.loss_sum, 1),
        ] {
            sized(buf, len);
        }
        let (mu, neg_outer_lr, nesterov) = match o.optimizer {
            Optimizer::Sgd {
                lr,
                momentum,
                nesterov,
                ..
            } => (
                B::R::from_f64(momentum),
                -B::R::from_f64(lr),
                nesterov && mutant != Some(Mutant::NoNesterov),
            ),
            // Refused by validation.
            Optimizer::Adam { .. } => return,
        };
        let nr_r = B::R::from_f64(nr as f64);
        for k in 1..=o.steps {
            let label = StepLabel::step(k as u32);
            ob.prev_outer.copy_from_slice(&ob.outer);
            for (r, b) in ob.reps.iter_mut().enumerate() {
                ob.loss_parts[r] = self.micro_step(be, &cx, k - 1, 0, &data.inputs[r], b, trace);
            }
            reduce(be, collective, &ob.loss_parts, nr, &mut ob.loss_sum);
            let loss = ob.loss_sum[0] / nr_r;
            trace.record(idx.loss, label, &[loss]);
            if k % o.sync_period == 0 {
                for (r, b) in ob.reps.iter().enumerate() {
                    gather(b.params(), &mut ob.inner[r * np..(r + 1) * np]);
                }
                for (part, inner) in ob.parts.chunks_exact_mut(np).zip(ob.inner.chunks_exact(np)) {
                    for ((d, &o), &w) in part.iter_mut().zip(&ob.outer).zip(inner) {
                        *d = if mutant == Some(Mutant::PseudoGradSign) {
                            w - o
                        } else {
                            o - w
                        };
                    }
                }
                reduce(be, collective, &ob.parts, nr, &mut ob.sum);
                for ((o, t), &s) in ob.outer.iter_mut().zip(ob.trace_m.iter_mut()).zip(&ob.sum) {
                    let g = if mutant == Some(Mutant::NoReplicaMean) {
                        s
                    } else {
                        s / nr_r
                    };
                    *t = mu.fma(*t, g);
                    let u = if nesterov { mu.fma(*t, g) } else { *t };
                    *o = u.fma(neg_outer_lr, *o);
                }
                for ((b, inner), tiled) in ob
                    .reps
                    .iter_mut()
                    .zip(ob.inner.chunks_exact_mut(np))
                    .zip(ob.tiled.chunks_exact_mut(np))
                {
                    if mutant != Some(Mutant::StaleOuterParams) {
                        let mut off = 0;
                        for p in b.params_mut() {
                            let n = p.len();
                            p.copy_from_slice(&ob.outer[off..off + n]);
                            off += n;
                        }
                        inner.copy_from_slice(&ob.outer);
                    }
                    tiled.copy_from_slice(&ob.outer);
                }
                if let Some(c) = idx.outer_params {
                    trace.record(c, label, &ob.outer);
                }
                if let Some(c) = idx.inner_equals_outer {
                    trace.record(c, label, &ob.inner);
                    trace.record_role(c, label, SlotRole::SelfExpectedF32, &ob.tiled);
                    trace.record_role(c, label, SlotRole::SelfExpectedF64, &ob.tiled);
                }
            } else if let Some(c) = idx.outer_unchanged {
                trace.record(c, label, &ob.outer);
                trace.record_role(c, label, SlotRole::SelfExpectedF32, &ob.prev_outer);
                trace.record_role(c, label, SlotRole::SelfExpectedF64, &ob.prev_outer);
            }
        }
        // Every replica's final parameters, for inspection.
        for (r, b) in ob.reps.iter().enumerate() {
            gather(b.params(), &mut ob.inner[r * np..(r + 1) * np]);
        }
    }
}

fn oerr(file: &str, key: &str, msg: impl Into<String>) -> InputError {
    InputError::config(file, key, msg)
}

/// The outer loop's checks with their indices, and every check name (policies may refer to
/// any). Kinds appear at most once, in recording order (loss, outer_unchanged, outer_params,
/// inner_equals_outer); a check the schedule never records (outer_unchanged when every step
/// syncs, the sync checks when none does) is left out.
pub(crate) fn checks_of(
    file: &str,
    o: &OuterLoop,
    np: usize,
) -> Result<(Vec<CheckSpec>, OuterIdx, Vec<String>), InputError> {
    let order = [
        OuterCheckKind::Loss,
        OuterCheckKind::OuterUnchanged,
        OuterCheckKind::OuterParams,
        OuterCheckKind::InnerEqualsOuter,
    ];
    let mut last = None;
    for (i, c) in o.checks.iter().enumerate() {
        let pos = order.iter().position(|k| *k == c.kind);
        if pos <= last {
            return Err(oerr(
                file,
                &format!("checks[{i}]"),
                "outer-loop checks are listed once each, in recording order: loss, outer unchanged, \
                 outer params, inner equals outer",
            ));
        }
        last = pos;
    }
    let names: Vec<String> = o.checks.iter().map(|c| c.name.clone()).collect();
    let any_plain = (1..=o.steps).any(|k| k % o.sync_period != 0);
    let any_sync = o.steps >= o.sync_period;
    let mut checks = Vec::new();
    let mut idx = OuterIdx {
        loss: usize::MAX,
        outer_unchanged: None,
        outer_params: None,
        inner_equals_outer: None,
    };
    for c in &o.checks {
        let (shape, self_consistent, records) = match c.kind {
            OuterCheckKind::Loss => (vec![], false, true),
            OuterCheckKind::OuterUnchanged => (vec![np], true, any_plain),
            OuterCheckKind::OuterParams => (vec![np], false, any_sync),
            OuterCheckKind::InnerEqualsOuter => (vec![o.replicas, np], true, any_sync),
        };
        if !records {
            continue;
        }
        let i = checks.len();
        checks.push(CheckSpec {
            name: intern(&c.name),
            shape,
            self_consistent,
            reduction: None,
        });
        match c.kind {
            OuterCheckKind::Loss => idx.loss = i,
            OuterCheckKind::OuterUnchanged => idx.outer_unchanged = Some(i),
            OuterCheckKind::OuterParams => idx.outer_params = Some(i),
            OuterCheckKind::InnerEqualsOuter => idx.inner_equals_outer = Some(i),
        }
    }
    if idx.loss == usize::MAX {
        return Err(oerr(
            file,
            "checks",
            "an outer loop records the loss: add a check with tensor = \"loss\"",
        ));
    }
    Ok((checks, idx, names))
}

/// The fixed data of a graph whose file writes it, split per parameter and per replica.
pub(crate) fn fixed_inputs(g: &ResolvedGraph) -> Option<OuterInputs> {
    let o = g.train.outer.as_ref()?;
    let OuterData::Fixed { init, x, y } = &o.data else {
        return None;
    };
    let mut out = OuterInputs::default();
    let mut off = 0;
    for p in &g.params {
        let n: usize = p.shape.iter().product();
        out.init.push(init[off..off + n].to_vec());
        off += n;
    }
    let values = input_values(g, x, y);
    out.split(o.replicas, &values);
    Some(out)
}

/// The global values of every input in table order: `x` for the model input, `y` for the
/// loss target.
pub(crate) fn input_values<'a>(g: &ResolvedGraph, x: &'a [f32], y: &'a [f32]) -> Vec<&'a [f32]> {
    let target = match g.loss.kind {
        crate::scenario::ir::LossKind::Mse { target } => Some(target.0),
        _ => None,
    };
    (0..g.inputs.draws.len())
        .map(|i| if Some(i) == target { y } else { x })
        .collect()
}

#[cfg(test)]
mod tests {
    //! T3 (MaxText's DiLoCo test, `configs/maxtext_diloco.toml`) through the executor's outer
    //! loop, against the JAX fixture.

    use super::*;
    use crate::check::comparison::Comparison;
    use crate::exec::scenario::{Scenario, Workspace};
    use crate::exec::GraphScenario;
    use crate::scenario::profile::ProfileRegistry;
    use crate::sys::error::InputError;

    const T3: &str = include_str!("../../configs/maxtext_diloco.toml");

    fn scenario(file: &str, text: &str) -> Result<GraphScenario, InputError> {
        crate::exec::build::build(crate::scenario::load(file, text)?)
    }

    fn t3() -> GraphScenario {
        scenario("built-in configs/maxtext_diloco.toml", T3).unwrap()
    }

    fn run(profile: &str) -> Workspace {
        let p = ProfileRegistry::builtin()
            .unwrap()
            .resolve(profile, "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        t3().run(0, 0, &p, &mut ws);
        ws
    }

    fn losses(t: &Trace) -> Vec<f64> {
        let s = t3();
        t.slots
            .iter()
            .filter(|sl| sl.check == s.outer_idx().loss && sl.role == SlotRole::Value)
            .map(|sl| t.data(sl)[0])
            .collect()
    }

    /// `tests/data/jax_maxtext_diloco.json`, written by `scripts/crosscheck_jax.py --fixture`
    /// from real JAX 0.10.2 / optax 0.2.8 on the CPU: per precision (f64, f32, bf16 = every
    /// dot's inputs rounded to bf16 with f32 accumulation) and mode (eager: the test's
    /// `diloco_train_step` called directly; jit: `jax.jit` of it), at every step, the reported
    /// loss, the outer parameters and every replica's parameters, as exact bit patterns.
    #[derive(serde::Deserialize)]
    struct Fixture {
        meta: FixtureMeta,
        runs: Vec<FixtureRun>,
    }
    #[derive(serde::Deserialize)]
    struct FixtureMeta {
        jax: String,
        optax: String,
        backend: String,
    }
    #[derive(serde::Deserialize)]
    struct FixtureRun {
        precision: String,
        mode: String,
        steps: Vec<FixtureStep>,
    }
    #[derive(serde::Deserialize)]
    struct FixtureStep {
        step: u32,
        loss_bits: u64,
        outer_bits: Vec<u64>,
        inner_bits: Vec<Vec<u64>>,
    }

    fn fixture() -> Fixture {
        let f: Fixture =
            serde_json::from_str(include_str!("../../tests/data/jax_maxtext_diloco.json"))
                .expect("fixture parses");
        assert_eq!(
            (
                f.meta.jax.as_str(),
                f.meta.optax.as_str(),
                f.meta.backend.as_str()
            ),
            ("0.10.2", "0.2.8", "cpu")
        );
        f
    }

    /// The fixture run of `precision` in `mode`.
    fn jax_run<'a>(f: &'a Fixture, precision: &str, mode: &str) -> &'a FixtureRun {
        f.runs
            .iter()
            .find(|r| r.precision == precision && r.mode == mode)
            .unwrap_or_else(|| panic!("fixture lacks {precision} {mode}"))
    }

    /// The fixture's losses of one run, as f64 values.
    fn jax_losses(f: &Fixture, precision: &str, mode: &str) -> Vec<f64> {
        let run = jax_run(f, precision, mode);
        let widen = |b: u64| {
            if precision == "f64" {
                f64::from_bits(b)
            } else {
                f32::from_bits(u32::try_from(b).expect("an f32 bit pattern")) as f64
            }
        };
        run.steps.iter().map(|s| widen(s.loss_bits)).collect()
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Runs the test's first `steps` steps in `profile`; returns the workspace and the
    /// scenario (the program of `steps < 4` is a prefix of the 4-step one).
    fn run_steps(profile: &str, steps: usize) -> (Workspace, GraphScenario) {
        let text = T3.replacen("steps = 4", &format!("steps = {steps}"), 1);
        let s = scenario("t3.toml", &text).unwrap();
        let p = ProfileRegistry::builtin()
            .unwrap()
            .resolve(profile, "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        s.run(0, 0, &p, &mut ws);
        (ws, s)
    }

    /// The recorded outer parameters after the last step: `outer_params` at a sync step,
    /// `outer_unchanged`'s value otherwise.
    fn last_outer(t: &Trace, s: &GraphScenario) -> Vec<f64> {
        let sl = t
            .slots
            .iter()
            .rev()
            .find(|sl| {
                sl.role == SlotRole::Value
                    && (Some(sl.check) == s.outer_idx().outer_params
                        || Some(sl.check) == s.outer_idx().outer_unchanged)
            })
            .unwrap();
        t.data(sl).to_vec()
    }

    #[test]
    fn every_step_equals_real_jax_in_both_modes() {
        // Every fixture run, every step: loss, outer parameters and both replicas' parameters
        // bit for bit. f32 and bf16 are read from the sharded computation (with 2 replicas the
        // all-reduce is x0 + x1, so the reference agrees; checked for the loss), f64 from the
        // ground truth. Both modes are checked in every precision, also where their values
        // coincide (f64, bf16).
        let f = fixture();
        assert_eq!(f.runs.len(), 6, "3 precisions x 2 modes");
        for run in &f.runs {
            let profile = match run.precision.as_str() {
                "f64" | "f32" => "f32",
                "bf16" => "tpu-bf16",
                p => panic!("unknown precision {p}"),
            };
            let spec = format!("{profile}+xla-{}", run.mode);
            assert_eq!(run.steps.len(), 4);
            for st in &run.steps {
                let (mut ws, s) = run_steps(&spec, st.step as usize);
                let what = format!("{} {} step {}", run.precision, run.mode, st.step);
                let t = if run.precision == "f64" {
                    &ws.traces.f64
                } else {
                    &ws.traces.sharded
                };
                let (loss, outer) = (*losses(t).last().unwrap(), last_outer(t, &s));
                let inner: Vec<u64> = {
                    let (b, _) = ws.buffers::<crate::exec::graph_scenario::GraphBuffers>();
                    let (i32s, i64s) = b.final_inner();
                    if run.precision == "f64" {
                        i64s.iter().map(|v| v.to_bits()).collect()
                    } else {
                        i32s.iter().map(|v| v.to_bits() as u64).collect()
                    }
                };
                let want_inner: Vec<u64> = st.inner_bits.concat();
                if run.precision == "f64" {
                    assert_eq!(loss.to_bits(), st.loss_bits, "{what}: loss");
                    assert_eq!(bits(&outer), st.outer_bits, "{what}: outer");
                } else {
                    let to32 = |v: f64| (v as f32).to_bits() as u64;
                    assert_eq!(to32(loss), st.loss_bits, "{what}: loss");
                    let outer32: Vec<u64> = outer.iter().map(|&v| to32(v)).collect();
                    assert_eq!(outer32, st.outer_bits, "{what}: outer");
                    let r = *losses(&ws.traces.reference).last().unwrap();
                    assert_eq!(to32(r), st.loss_bits, "{what}: reference loss");
                }
                assert_eq!(inner, want_inner, "{what}: inner parameters");
            }
        }
    }

    #[test]
    fn eager_and_jit_differ_where_jax_says() {
        // Real JAX: f32 eager and jit part at step 3 (the step-2 bias update rounds twice
        // eagerly, once under jit), bf16 and f64 never do for this data. The default mode of
        // this scenario is eager: plain `f32` is `f32+xla-eager`.
        let f = fixture();
        for (precision, profile) in [("f32", "f32"), ("bf16", "tpu-bf16"), ("f64", "f32")] {
            let (e, j) = (
                jax_losses(&f, precision, "eager"),
                jax_losses(&f, precision, "jit"),
            );
            let differ: Vec<usize> = (0..4).filter(|&i| e[i] != j[i]).map(|i| i + 1).collect();
            let ours = |spec: &str| {
                let ws = run(spec);
                let t = if precision == "f64" {
                    &ws.traces.f64
                } else {
                    &ws.traces.sharded
                };
                bits(&losses(t))
            };
            assert_eq!(
                ours(&format!("{profile}+xla-eager")),
                bits(&e),
                "{precision}"
            );
            assert_eq!(ours(&format!("{profile}+xla-jit")), bits(&j), "{precision}");
            assert_eq!(ours(profile), bits(&e), "{precision}: the default is eager");
            let expect: &[usize] = if precision == "f32" { &[3, 4] } else { &[] };
            assert_eq!(differ, expect, "{precision}");
        }
    }

    #[test]
    fn step_two_anchors_are_exact() {
        // mission.md, "Figures": f64 0.65, f32 0.6500000953674316, one-pass bf16
        // 0.6475024223327637, in both execution modes (they part only from step 3 on).
        for mode in ["", "+xla-eager", "+xla-jit"] {
            let f32_run = run(&format!("f32{mode}"));
            let bf16_run = run(&format!("tpu-bf16{mode}"));
            assert_eq!(losses(&f32_run.traces.f64)[1], 0.65);
            let f32_loss = losses(&f32_run.traces.sharded)[1];
            let bf16_loss = losses(&bf16_run.traces.sharded)[1];
            assert_eq!(
                f32_loss.to_bits(),
                0.6500000953674316f64.to_bits(),
                "{mode}"
            );
            assert_eq!(
                bf16_loss.to_bits(),
                0.6475024223327637f64.to_bits(),
                "{mode}"
            );
            // Both are f32 values (the figures are f32 results printed as f64).
            assert_eq!(f32_loss as f32 as f64, f32_loss);
            assert_eq!(bf16_loss as f32 as f64, bf16_loss);
        }
    }

    #[test]
    fn f64_reproduces_the_hand_computed_constants() {
        // The test's constants are decimal; the f64 run reaches them up to the f64 rounding of
        // the 20-odd operations in between (measured: step 3 gives 0.4480999999999996, 4e-16
        // below 0.4481). The bound 4·2^-52 ≈ 8.9e-16 covers that, while f32 (1e-7) and bf16
        // (2.5e-3) errors exceed it by orders of magnitude.
        let got = losses(&run("f32").traces.f64);
        for (g, want) in got.iter().zip([1.0, 0.65, 0.4481, 0.574243725]) {
            assert!((g - want).abs() <= 4.0 * f64::EPSILON, "{g} vs {want}");
        }
        assert_eq!(got[0], 1.0, "step 1 is exact");
    }

    #[test]
    fn step_one_is_exact_in_every_profile() {
        // The test asserts `loss == 1.0` exactly at step 1: every operation before it is exact.
        for p in [
            "f32",
            "tpu-bf16",
            "tpu-bf16x3",
            "tpu-bf16x6",
            "gpu-tf32",
            "cpu-nofma",
        ] {
            assert_eq!(losses(&run(p).traces.sharded)[0], 1.0, "{p}");
        }
    }

    #[test]
    fn bad_values_name_the_file_key_and_what_is_allowed() {
        for (from, to, key, allowed) in [
            (
                "sync_period = 3",
                "sync_period = 0",
                "train.outer.sync_period",
                "1..=1000",
            ),
            ("lr = 0.1", "lr = nan", "train.lr", "0 < lr"),
            ("steps = 4", "steps = 4\nstep = 4", "train.step", "steps"),
            ("dp = 2", "dp = 3", "inputs", "replicas"),
            (
                "\"dense.bias\" = [1]",
                "\"dense.bias\" = [1, 2]",
                "init.values.dense.bias",
                "needs 1",
            ),
            (
                "kind = \"equals-outer\"",
                "kind = \"unchanged\"",
                "checks[3].kind",
                "allowed: loss",
            ),
        ] {
            assert!(T3.contains(from), "config lacks {from}");
            let err = scenario("t3.toml", &T3.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            for part in ["t3.toml", key, allowed] {
                assert!(err.contains(part), "{err} lacks {part}");
            }
        }
    }

    #[test]
    fn schedule_is_the_tests() {
        // Sync at step 3 only; outer_unchanged at steps 1, 2 and 4.
        let s = t3();
        let ws = run("f32");
        let steps = |c: usize| -> Vec<u32> {
            ws.traces
                .sharded
                .slots
                .iter()
                .filter(|sl| sl.check == c && sl.role == SlotRole::Value)
                .map(|sl| sl.step.step)
                .collect()
        };
        assert_eq!(steps(s.outer_idx().loss), [1, 2, 3, 4]);
        assert_eq!(steps(s.outer_idx().outer_unchanged.unwrap()), [1, 2, 4]);
        assert_eq!(steps(s.outer_idx().outer_params.unwrap()), [3]);
        assert_eq!(steps(s.outer_idx().inner_equals_outer.unwrap()), [3]);
        assert!(!s.seed_dependent());
        assert_eq!(s.asserted_comparison(), Comparison::ShardedVsF64);
    }
}

#[cfg(test)]
mod diloco_tests {
    //! The synthetic sweep (`configs/diloco.toml`) through the executor's outer loop.

    use crate::exec::scenario::{Scenario, Workspace};
    use crate::exec::trace::{SlotRole, Trace};
    use crate::exec::GraphScenario;
    use crate::scenario::profile::ProfileRegistry;
    use crate::sys::error::InputError;

    const BUILTIN: &str = include_str!("../../configs/diloco.toml");

    fn scenario(text: &str) -> Result<GraphScenario, InputError> {
        crate::exec::build::build(crate::scenario::load("test.toml", text)?)
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
            let loss = values(&ws.traces.f64, s.outer_idx().loss);
            assert_eq!(loss.len(), s.outer_loop().steps);
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
        let g = s.graph0();
        let draw = |seed: u64| {
            let (mut init, mut x, mut y) = (Vec::new(), Vec::new(), Vec::new());
            let (mut name, mut teacher) = (String::new(), Vec::new());
            crate::exec::init::draw_teacher(
                g,
                4,
                0.1,
                seed,
                &mut init,
                &mut x,
                &mut y,
                &mut name,
                &mut teacher,
            );
            (init, x, y)
        };
        let (a, b, c) = (draw(7), draw(8), draw(7));
        assert_eq!(a, c);
        assert_ne!(a.1, b.1);
        assert_ne!(a.0, b.0);
        // Replicas see different data: 8 examples of 4 inputs each.
        let n = 8 * 4;
        assert_eq!(a.1.len(), 4 * n);
        assert_ne!(a.1[..n], a.1[n..2 * n]);
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
        let h = s.outer_loop().sync_period as u32;
        for slot in &ws.traces.sharded.slots {
            let sync = slot.step.step % h == 0;
            if Some(slot.check) == s.outer_idx().outer_unchanged {
                assert!(!sync, "outer_unchanged at sync step {}", slot.step);
            }
            if Some(slot.check) == s.outer_idx().outer_params
                || Some(slot.check) == s.outer_idx().inner_equals_outer
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
        let c = s.outer_idx().inner_equals_outer.unwrap();
        let mut checked = 0;
        crate::engine::evaluate::for_each_pair(
            &ws.traces,
            c,
            &s.checks(0)[c],
            crate::check::comparison::Comparison::ShardedVsRef,
            |_, a, e| {
                assert_eq!(a, e, "inner == outer after every sync");
                checked += 1;
            },
        );
        assert_eq!(checked, s.outer_loop().steps / s.outer_loop().sync_period);
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
        crate::engine::evaluate::for_each_pair(
            &ws.traces,
            c,
            &s.checks(0)[c],
            crate::check::comparison::Comparison::ShardedVsRef,
            |_, a, e| differs |= a != e,
        );
        assert!(differs);
    }

    #[test]
    fn mlp_and_adamw_configs_run_and_train() {
        let text = include_str!("../../tests/data/diloco_variants/mlp_adamw.toml");
        let s = scenario(text).unwrap();
        let g = s.graph0();
        assert_eq!(g.id, "mlp-r3-h3-adamw");
        // linear -> tanh -> linear with 8 hidden units.
        assert_eq!(g.layers.len(), 3);
        assert_eq!(g.width(g.layers[0].op.output()), 8);
        let profile = ProfileRegistry::builtin()
            .unwrap()
            .resolve("tpu-bf16", "--profile")
            .unwrap();
        let mut ws = Workspace::default();
        s.run(0, 5, &profile, &mut ws);
        let loss = values(&ws.traces.f64, s.outer_idx().loss);
        assert!(loss.last().unwrap() < &loss[0], "{loss:?}");
        // bf16 matmul inputs move the sharded run away from f64.
        assert_ne!(
            values(&ws.traces.sharded, s.outer_idx().loss),
            values(&ws.traces.f64, s.outer_idx().loss)
        );
    }

    #[test]
    fn bad_values_name_the_file_key_and_what_is_allowed() {
        let cases = [
            (
                "op = \"linear\"",
                "op = \"cnn\"",
                "layers[0].op",
                "linear, tanh",
            ),
            ("dp = 4", "dp = 65", "parallel.dp", "1..=64"),
            (
                "optimizer = \"sgd\"",
                "optimizer = \"adam\"",
                "train.optimizer",
                "sgd, adamw",
            ),
            ("lr = 0.1", "lr = -1.0", "train.lr", "0 < lr"),
            (
                "momentum = 0.9",
                "momentum = 1.0",
                "train.outer.momentum",
                "< 1",
            ),
            (
                "lr = 0.1",
                "lr = 0.1\nbetas = [0.8, 0.9]",
                "train.betas",
                "adamw",
            ),
            (
                "steps = 12",
                "steps = 12\nrounds = 3",
                "train.rounds",
                "steps",
            ),
            (
                "draw = \"teacher\"",
                "draw = \"randn\"",
                "inputs",
                "teacher",
            ),
            ("rng = \"chacha\"", "rng = \"torch\"", "rng", "chacha"),
            ("dp = 4", "dp = 3", "inputs", "replicas"),
        ];
        for (from, to, key, allowed) in cases {
            assert!(BUILTIN.contains(from), "config lacks {from}");
            let err = scenario(&BUILTIN.replacen(from, to, 1))
                .unwrap_err()
                .to_string();
            assert!(err.contains("test.toml"), "{err}");
            assert!(err.contains(key), "{key}: {err}");
            assert!(err.contains(allowed), "{allowed}: {err}");
        }
    }
}
