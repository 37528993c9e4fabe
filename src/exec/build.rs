//! A validated scenario file as a runnable [`Scenario`]: its lowered graphs run by the graph
//! executor ([`crate::exec::GraphScenario`]), with the comparison the file says the test
//! asserts.

use crate::check::comparison::Comparison;
use crate::exec::scenario::{CheckSpec, Parts, Scenario, Workspace};
use crate::exec::GraphScenario;
use crate::scenario::config::{CommonConfig, Policy};
use crate::scenario::mutant::Mutant;
use crate::scenario::profile::Profile;
use crate::sys::error::InputError;

use crate::scenario::file::ScenarioFile;

/// The one line `list` prints for a file's scenario.
pub fn summary(file: &ScenarioFile) -> String {
    let s = &file.graphs[0].spec;
    let opt = &s.train.optimizer;
    let mut out = format!("graph of {} layers", s.layers.len());
    if s.parallel.tp > 1 {
        out.push_str(&format!(", TP {}", s.parallel.tp));
    }
    if s.parallel.dp > 1 {
        out.push_str(&format!(", DP {}", s.parallel.dp));
    }
    out.push_str(&format!(", {} steps", s.train.steps));
    if s.train.micro_steps > 1 {
        out.push_str(&format!(" x {} micro-steps", s.train.micro_steps));
    }
    out.push_str(&format!(", {} lr {}", opt.name(), opt.lr()));
    out
}

/// A graph scenario whose test asserts another comparison than sharded-vs-ref.
struct Asserting {
    inner: GraphScenario,
    compare: Comparison,
}

impl Scenario for Asserting {
    fn common(&self) -> &CommonConfig {
        self.inner.common()
    }
    fn param_ids(&self) -> Vec<&str> {
        self.inner.param_ids()
    }
    fn checks(&self, param: usize) -> &[CheckSpec] {
        self.inner.checks(param)
    }
    fn all_check_names(&self) -> &'static [&'static str] {
        self.inner.all_check_names()
    }
    fn policies(&self) -> &[Policy] {
        self.inner.policies()
    }
    fn seed_dependent(&self) -> bool {
        self.inner.seed_dependent()
    }
    fn execution_modifiers(&self) -> &'static [&'static str] {
        self.inner.execution_modifiers()
    }
    fn mutants(&self) -> &'static [Mutant] {
        self.inner.mutants()
    }
    fn asserted_comparison(&self) -> Comparison {
        self.compare
    }
    fn run(&self, param: usize, seed: u64, profile: &Profile, ws: &mut Workspace) {
        self.inner.run(param, seed, profile, ws)
    }
    fn run_parts(
        &self,
        param: usize,
        seed: u64,
        profile: &Profile,
        parts: Parts,
        ws: &mut Workspace,
    ) {
        self.inner.run_parts(param, seed, profile, parts, ws)
    }
    fn same_computation(&self, a: usize, b: usize) -> bool {
        self.inner.same_computation(a, b)
    }
    fn summary(&self) -> String {
        self.inner.summary()
    }
}

/// Builds the runnable scenario of a validated file. The executor refuses, naming the key,
/// what it does not run yet (see [`GraphScenario::new`]).
pub fn build(file: ScenarioFile) -> Result<Box<dyn Scenario>, InputError> {
    let summary = summary(&file);
    let compare = file.compare;
    let inner = GraphScenario::new(file.common, file.lowered, file.check_names, summary)?;
    Ok(if compare == Comparison::ShardedVsRef {
        Box::new(inner)
    } else {
        Box::new(Asserting { inner, compare })
    })
}
