//! DiLoCo (Distributed Low-Communication training) as a seed sweep: the synthetic scenario
//! `diloco`, run on the outer-loop engine of [`crate::graph::outer`] (the algorithm, the order of
//! operations and the three computations are documented there).
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

use std::fmt::Write as _;

use serde::Deserialize;

use crate::config::{in_range, resolve_policies, section, CommonConfig, Policy};
use crate::error::InputError;
use crate::graph::outer::{
    run_three, CheckIdx, DilocoData, DilocoSpec, InnerOpt, ModelKind, ThreeBufs, CHECK_NAMES,
    EXECUTION_MODIFIERS, MUTANTS,
};
use crate::profile::{Profile, XlaMode};
use crate::rng::chacha::ChaChaStream;
use crate::scenario::{CheckSpec, Scenario, Workspace};

/// Scenario kind name.
pub const KIND: &str = "diloco";

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
    use crate::trace::{SlotRole, Trace};

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
