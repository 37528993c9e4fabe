//! Scenarios: the [`Scenario`] trait every mirrored test implements, and the hand-written
//! scenario kinds that are not yet graphs (DiLoCo). Tests described in the scenario language
//! run through [`crate::exec::GraphScenario`].
//!
//! A scenario runs one (parametrization, profile, seed) as three computations of the same
//! model code, and records what its checks compare into three [`Trace`]s:
//! - `f64`: the float64 ground truth (unsharded);
//! - `reference`: the unsharded fp32 computation in the profile;
//! - `sharded`: the sharded fp32 computation in the profile (what the test runs).

use std::any::{Any, TypeId};
use std::collections::HashMap;

use crate::check::comparison::Comparison;
use crate::exec::trace::Trace;
use crate::kernels::matmul::MatmulScratch;
use crate::scenario::config::{CommonConfig, Policy};
pub use crate::scenario::ir::Reduction;
use crate::scenario::profile::Profile;

/// One check of a parametrization.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckSpec {
    /// Name (`logits`, `tied_grad`, ...).
    pub name: &'static str,
    /// Shape of the compared tensor, for torch-style indices.
    pub shape: Vec<usize>,
    /// A self-consistency check: the computation's value is compared against the test's
    /// formula evaluated on the same computation's inputs (the SGD-update check).
    pub self_consistent: bool,
    /// For matmul-like checks: the reduction behind each element, for the error-bound
    /// (theory) columns. The float64 computation then records `Σ|a_k·b_k|` per element.
    pub reduction: Option<Reduction>,
}

impl CheckSpec {
    /// A plain check.
    pub fn new(name: &'static str, shape: Vec<usize>) -> Self {
        Self {
            name,
            shape,
            self_consistent: false,
            reduction: None,
        }
    }
}

/// The three recorded computations of one seed.
#[derive(Debug, Default, Clone)]
pub struct Traces {
    /// Float64 ground truth.
    pub f64: Trace,
    /// Unsharded fp32 reference.
    pub reference: Trace,
    /// Sharded fp32 computation.
    pub sharded: Trace,
}

impl Traces {
    /// The (actual, expected) traces of comparison `c`.
    pub fn sides(&self, c: Comparison) -> (&Trace, &Trace) {
        let t = self;
        match c {
            Comparison::ShardedVsRef => (&t.sharded, &t.reference),
            Comparison::RefVsF64 => (&t.reference, &t.f64),
            Comparison::ShardedVsF64 => (&t.sharded, &t.f64),
        }
    }

    /// Clears all three, keeping capacity.
    pub fn clear(&mut self) {
        self.f64.clear();
        self.reference.clear();
        self.sharded.clear();
    }
}

/// Which of a seed-run's first two computations [`Scenario::run_parts`] runs besides the
/// sharded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The float64 ground truth.
    pub f64: bool,
    /// The unsharded fp32 reference.
    pub reference: bool,
}

impl Parts {
    /// All three computations.
    pub const ALL: Parts = Parts {
        f64: true,
        reference: true,
    };
}

/// Per-thread reusable state: matmul scratch and each scenario's own buffers.
#[derive(Default)]
pub struct Workspace {
    /// Matmul scratch buffers.
    pub scratch: MatmulScratch,
    /// The three traces of the current seed.
    pub traces: Traces,
    /// Which fp32 matmul kernels the scenarios use (the benchmark baseline and the
    /// kernel cross-check switch this to the scalar reference).
    pub kernels: crate::ops::backend::Kernels,
    /// The bug injected into the sharded computation, if any (one the scenario lists in
    /// [`Scenario::mutants`]).
    pub mutant: Option<crate::scenario::mutant::Mutant>,
    buffers: HashMap<TypeId, Box<dyn Any + Send>>,
}

impl Workspace {
    /// A workspace whose fp32 matmuls use `kernels`.
    pub fn with_kernels(kernels: crate::ops::backend::Kernels) -> Self {
        Self {
            kernels,
            ..Default::default()
        }
    }

    /// The buffers of type `T`, created on first use and then reused, with the matmul
    /// scratch borrowed beside them.
    pub fn buffers<T: Default + Send + 'static>(&mut self) -> (&mut T, &mut MatmulScratch) {
        let entry = self
            .buffers
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        let buffers = entry
            .downcast_mut::<T>()
            .expect("workspace entries are keyed by their own TypeId");
        (buffers, &mut self.scratch)
    }
}

/// A mirrored test.
pub trait Scenario: Send + Sync {
    /// The validated common config.
    fn common(&self) -> &CommonConfig;
    /// Parametrization ids, in config order.
    fn param_ids(&self) -> Vec<&str>;
    /// The checks of parametrization `param`, in recording order of their first slot.
    fn checks(&self, param: usize) -> &[CheckSpec];
    /// Every check name the scenario knows, for `list` and for policy overrides.
    fn all_check_names(&self) -> &'static [&'static str];
    /// The resolved policies (built-ins plus the config's own).
    fn policies(&self) -> &[Policy];
    /// Whether the seed changes the computation (false for fixed-data tests).
    fn seed_dependent(&self) -> bool {
        true
    }
    /// Profile modifiers that select how the mirrored framework executes the program
    /// (`xla-eager`, `xla-jit` for a JAX test); `explain` tries every profile with each. Empty
    /// for scenarios whose framework has one execution mode.
    fn execution_modifiers(&self) -> &'static [&'static str] {
        &[]
    }
    /// The mutants this scenario can inject into its sharded computation.
    fn mutants(&self) -> &'static [crate::scenario::mutant::Mutant] {
        &[]
    }
    /// The comparison the real test asserts: `sharded-vs-ref` for tests that compare a sharded
    /// run with an unsharded one, `sharded-vs-f64` for tests that compare against hand-computed
    /// float64 constants.
    fn asserted_comparison(&self) -> crate::check::comparison::Comparison {
        crate::check::comparison::Comparison::ShardedVsRef
    }
    /// Runs one seed of one parametrization in `profile`, leaving the three computations in
    /// `ws.traces`.
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace);
    /// Runs the sharded computation (with `ws.mutant`) of one seed, and of the other two only
    /// those `parts` asks for; a trace not asked for is left in `ws.traces` as it is. The
    /// caller asks for less only when `ws.traces` already holds that trace for this seed and
    /// a parametrization that [`Scenario::same_computation`] proves equal to `param` (the
    /// float64 trace depends on neither the profile nor the mutant, the reference trace not
    /// on the mutant). The default runs all three ([`Scenario::run`]), which is always right.
    fn run_parts(
        &self,
        param: usize,
        seed: u64,
        profile: &Profile,
        parts: Parts,
        ws: &mut Workspace,
    ) {
        let _ = parts;
        self.run(param, seed, profile, ws)
    }
    /// The resolved graph of `param`, for a scenario run by the graph executor (None for
    /// one that is not).
    fn graph(&self, param: usize) -> Option<&crate::scenario::ir::ResolvedGraph> {
        let _ = param;
        None
    }
    /// Whether [`Scenario::run_stepwise`] computes `param` one training step at a time
    /// (its traces over all steps would be large), so that a sweep evaluates each step as it
    /// comes and keeps memory O(model), not O(steps × model). The default: never.
    fn streams(&self, param: usize) -> bool {
        let _ = param;
        false
    }
    /// An upper bound on the bytes one seed-run of `param` holds under `profile` with
    /// `mutant`, where the scenario can give one from its model (parameters, gradients,
    /// activations, scratch and traces); `None` (the default): the memory check estimates it
    /// from the check tensors (`crate::engine::budget::per_run`).
    fn run_bytes(
        &self,
        param: usize,
        profile: &Profile,
        mutant: Option<crate::scenario::mutant::Mutant>,
    ) -> Option<u128> {
        let _ = (param, profile, mutant);
        None
    }
    /// Runs the three computations of one seed (the sharded one with `ws.mutant`) and hands
    /// `each_step` their traces: for a parametrization that [`Scenario::streams`], once per
    /// training step, in step order, the three traces holding only that step's slots (the
    /// computations advanced in lockstep); otherwise once, with every step (the default,
    /// through [`Scenario::run`]). Folding the calls' evaluations in order gives what
    /// evaluating all steps at once gives.
    fn run_stepwise(
        &self,
        param: usize,
        seed: u64,
        profile: &Profile,
        ws: &mut Workspace,
        each_step: &mut dyn FnMut(&Traces),
    ) {
        self.run(param, seed, profile, ws);
        each_step(&ws.traces);
    }
    /// Whether parametrizations `a` and `b` compute the same three traces for every seed,
    /// profile and mutant, proved from their structure (never from their ids). The default
    /// knows only that a parametrization equals itself.
    fn same_computation(&self, a: usize, b: usize) -> bool {
        a == b
    }
    /// One line on what one seed-run computes, for `list`.
    fn summary(&self) -> String;
}
