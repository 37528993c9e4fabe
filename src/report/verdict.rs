//! The verdict of a `sweep` or `repro` for CI: per (scenario, param, profile, check,
//! comparison, policy) of the clean run, the worst usage with its seed and step, the failing
//! seeds, the tail estimate and the predicted flake rate at the tolerance, the mutants the
//! check catches and misses, and a ready `seedsweep repro ...` command; and whether the
//! gates the user asked for (`--fail-on-exceed`, `--fail-on-missed-mutant`,
//! `--max-flake-rate`) pass. One value, written by three exporters: JSON
//! ([`crate::report::json`]), JUnit XML ([`crate::report::junit`]) and Markdown
//! ([`crate::report::markdown`]).
//!
//! Built once per run from the aggregates, after the sweep: nothing here runs per seed.

use crate::check::comparison::Comparison;
use crate::check::{StepLabel, Tolerance};
use crate::engine::aggregate::{GroupAgg, SummaryEntry};
use crate::engine::plan::GroupMeta;
use crate::stats::tail::{TailMethod, TailPoint};

/// The version of the JSON document ([`crate::report::json`]); raised on any change that
/// removes or retypes a field (adding a field keeps it).
pub const SCHEMA_VERSION: u32 = 1;

/// The gates of a run: what makes it exit with code 3.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gates {
    /// `--fail-on-exceed`: a check of the asserted comparison exceeds its tolerance on some
    /// seed of the clean run.
    pub fail_on_exceed: bool,
    /// `--fail-on-missed-mutant`: some injected bug escapes the test (no check of the
    /// asserted comparison exceeds) on some seed.
    pub fail_on_missed_mutant: bool,
    /// `--max-flake-rate P`: the predicted per-seed probability that a check of the asserted
    /// comparison exceeds its tolerance is above P.
    pub max_flake_rate: Option<f64>,
}

/// How to rerun a seed: the flags every `seedsweep repro` command carries.
#[derive(Debug, Clone, Default)]
pub struct ReproContext {
    /// `--config FILE` flags of the run.
    pub configs: Vec<String>,
    /// `--rng NAME` of the run, if given.
    pub rng: Option<String>,
}

impl ReproContext {
    /// The `--config` and `--rng` flags of a run's selection.
    pub fn new(
        configs: &[std::path::PathBuf],
        rng: Option<crate::scenario::config::RngKind>,
    ) -> Self {
        Self {
            configs: configs.iter().map(|p| p.display().to_string()).collect(),
            rng: rng.map(|r| r.name().to_string()),
        }
    }
}

/// The tail of one case's per-seed usage.
#[derive(Debug, Clone)]
pub struct Tail {
    /// `gpd` or `empirical`.
    pub method: &'static str,
    /// Usage exceeded with probability p per seed, with its 95 % interval (percent; NaN:
    /// not estimable with these seeds).
    pub points: Vec<TailPoint>,
    /// Predicted per-seed probability that the usage exceeds 100 % (the check fails): from
    /// the accepted GPD when 100 % lies beyond its threshold, else the observed fraction of
    /// failing seeds.
    pub flake_rate: f64,
    /// `gpd` or `observed`: where [`Tail::flake_rate`] comes from.
    pub flake_rate_method: &'static str,
}

/// One check × comparison × policy of a clean group.
#[derive(Debug, Clone)]
pub struct Case {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// Check name.
    pub check: String,
    /// Comparison.
    pub comparison: Comparison,
    /// Whether this is the comparison the test asserts (only those decide the verdict).
    pub asserted: bool,
    /// Policy name.
    pub policy: String,
    /// The tolerance.
    pub tolerance: Tolerance,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Largest usage over seeds, percent.
    pub worst_usage_pct: f64,
    /// The first seed reaching it.
    pub worst_seed: u64,
    /// Its step.
    pub worst_step: StepLabel,
    /// Seeds whose usage exceeds 100 %.
    pub failing_seeds: usize,
    /// The first of them, in seed order (at most
    /// [`crate::engine::aggregate::FAILING_LISTED`]).
    pub failing_seed_list: Vec<u64>,
    /// Tail estimate (`None` for `repro`'s single seed).
    pub tail: Option<Tail>,
    /// Mutants of this group on which this check exceeds on every seed.
    pub mutants_caught: Vec<String>,
    /// Mutants of this group that escape this check on some seed.
    pub mutants_missed: Vec<String>,
    /// `seedsweep repro ...` for the worst seed.
    pub repro: String,
    /// torch's mismatch message at the worst seed and step, when it exceeds there.
    pub message: Option<String>,
    /// Why this case fails a gate the run asked for (empty: it passes).
    pub failures: Vec<String>,
}

impl Case {
    /// Whether the check exceeds its tolerance on some seed.
    pub fn exceeds(&self) -> bool {
        self.failing_seeds > 0
    }
}

/// One mutant group × policy: whether the test catches the bug on every seed.
#[derive(Debug, Clone)]
pub struct MutantCase {
    /// Scenario, param, profile, mutant.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// The injected bug.
    pub mutant: String,
    /// Policy.
    pub policy: String,
    /// Seeds on which some check of the asserted comparison exceeds (the bug is caught).
    pub caught_seeds: usize,
    /// Seeds evaluated.
    pub seeds: usize,
    /// Checks of the asserted comparison that miss the bug on some seed.
    pub checks_missing: Vec<String>,
    /// Whether `--fail-on-missed-mutant` fails on it.
    pub fails_gate: bool,
}

impl MutantCase {
    /// Whether the bug escapes the test on some seed.
    pub fn missed(&self) -> bool {
        self.caught_seeds < self.seeds
    }
}

/// The verdict of one run.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// `sweep` or `repro`.
    pub command: &'static str,
    /// The gates asked for.
    pub gates: Gates,
    /// Every clean case, in output order (group, check, comparison, policy).
    pub cases: Vec<Case>,
    /// Every mutant group × policy.
    pub mutants: Vec<MutantCase>,
}

impl Verdict {
    /// Whether some gate fails (the run exits with code 3).
    pub fn failed(&self) -> bool {
        self.cases.iter().any(|c| !c.failures.is_empty())
            || self.mutants.iter().any(|m| m.fails_gate)
    }

    /// One line saying what failed (for stderr with exit code 3), or `None`.
    pub fn failure_line(&self) -> Option<String> {
        let failing: Vec<&Case> = self
            .cases
            .iter()
            .filter(|c| !c.failures.is_empty())
            .collect();
        let missed: Vec<&MutantCase> = self.mutants.iter().filter(|m| m.fails_gate).collect();
        if failing.is_empty() && missed.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if let Some(c) = failing.first() {
            parts.push(format!(
                "{} case(s) failed, first {} [{}] {} {} policy {}: {} (repro: {})",
                failing.len(),
                c.scenario,
                c.param,
                c.profile,
                c.check,
                c.policy,
                c.failures.join("; "),
                c.repro
            ));
        }
        if let Some(m) = missed.first() {
            parts.push(format!(
                "{} mutant(s) missed, first {} [{}] {} {} policy {}: caught on {}/{} seeds",
                missed.len(),
                m.scenario,
                m.param,
                m.profile,
                m.mutant,
                m.policy,
                m.caught_seeds,
                m.seeds
            ));
        }
        Some(format!(
            "seedsweep {}: FAILED: {}",
            self.command,
            parts.join("; ")
        ))
    }
}

/// Percent as the verdict prints it (`137%`, `inf%`).
pub fn pct(x: f64) -> String {
    crate::report::table::pct(x / 100.0)
}

/// The predicted per-seed probability that `e`'s usage exceeds 100 %, and its source.
pub fn flake_rate(e: &SummaryEntry) -> (f64, &'static str) {
    let observed = || {
        if e.seeds == 0 {
            f64::NAN
        } else {
            e.failing_seeds as f64 / e.seeds as f64
        }
    };
    match &e.tail {
        Some(t) if t.method == TailMethod::Gpd && t.threshold < 100.0 && t.n > 0 => {
            match &t.gpd {
                // P(X > 100) = P(X > u)·P(X − u > 100 − u | X > u) = (k/n)·sf(100 − u).
                Some(g) => (
                    t.exceedances as f64 / t.n as f64 * g.sf(100.0 - t.threshold),
                    "gpd",
                ),
                None => (observed(), "observed"),
            }
        }
        _ => (observed(), "observed"),
    }
}

/// `seedsweep repro ...` for `seed` of a group.
pub fn repro_command(
    ctx: &ReproContext,
    m: &GroupMeta,
    policy: &str,
    comparison: Comparison,
    seed: u64,
) -> String {
    let mut parts = vec!["seedsweep".to_string(), "repro".into()];
    for c in &ctx.configs {
        parts.push("--config".into());
        parts.push(shell_word(c));
    }
    if let Some(r) = &ctx.rng {
        parts.push("--rng".into());
        parts.push(shell_word(r));
    }
    for (flag, v) in [
        ("--scenario", &m.scenario),
        ("--param", &m.param),
        ("--profile", &m.profile),
    ] {
        parts.push(flag.into());
        parts.push(shell_word(v));
    }
    parts.push("--policy".into());
    parts.push(shell_word(policy));
    if comparison != m.asserted {
        parts.push("--comparison".into());
        parts.push(comparison.name().into());
    }
    parts.push("--seed".into());
    parts.push(seed.to_string());
    parts.join(" ")
}

/// (check, comparison, policy) of result index `k` (the inverse of [`GroupMeta::index`]).
fn split(m: &GroupMeta, k: usize) -> (usize, usize, usize) {
    let np = m.policies.len();
    (
        k / (Comparison::ALL.len() * np),
        (k / np) % Comparison::ALL.len(),
        k % np,
    )
}

/// `s` quoted for a POSIX shell when it holds anything but `[A-Za-z0-9_./:+=,-]`.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./:+=,-".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The verdict of a `repro`: its cases and mutants (one seed each), without gates yet
/// (see [`Verdict::apply_gates`]).
pub fn of_repro(cases: Vec<Case>, mutants: Vec<MutantCase>) -> Verdict {
    Verdict {
        command: "repro",
        gates: Gates::default(),
        cases,
        mutants,
    }
}

impl Verdict {
    /// Applies `gates` to a verdict whose cases carry no failures yet (repro's): a clean
    /// case of the asserted comparison that exceeds fails `--fail-on-exceed`, a missed
    /// mutant fails `--fail-on-missed-mutant`. `--max-flake-rate` needs a tail, which one
    /// seed has not: it is judged by sweeps only.
    pub fn apply_gates(&mut self, gates: Gates) {
        self.gates = gates;
        for c in &mut self.cases {
            if c.asserted && gates.fail_on_exceed && c.exceeds() {
                c.failures.push(format!(
                    "exceeds its tolerance at seed {}: {} at step {}",
                    c.worst_seed,
                    pct(c.worst_usage_pct),
                    c.worst_step
                ));
            }
        }
        for m in &mut self.mutants {
            m.fails_gate = gates.fail_on_missed_mutant && m.missed();
        }
    }
}

/// The verdict of a sweep (or a merge): `summaries` and `aggs` per group of `metas`.
/// `message(group, entry index)` gives torch's message at the worst seed of a failing case
/// (the caller reruns that seed).
pub fn of_sweep(
    metas: &[GroupMeta],
    aggs: &[GroupAgg],
    summaries: &[Vec<SummaryEntry>],
    gates: Gates,
    ctx: &ReproContext,
    mut message: impl FnMut(usize, usize) -> Option<String>,
) -> Verdict {
    let mut cases = Vec::new();
    let mut mutants = Vec::new();
    for (gi, m) in metas.iter().enumerate() {
        if !m.mutant.is_empty() {
            for (p, policy) in m.policies.iter().enumerate() {
                let checks_missing = summaries[gi]
                    .iter()
                    .filter(|e| {
                        e.comparison == m.asserted
                            && &e.policy == policy
                            && e.failing_seeds < e.seeds
                    })
                    .map(|e| e.check.clone())
                    .collect();
                let caught_seeds = aggs[gi].caught[p];
                let seeds = aggs[gi].seeds;
                mutants.push(MutantCase {
                    scenario: m.scenario.clone(),
                    param: m.param.clone(),
                    profile: m.profile.clone(),
                    mutant: m.mutant.clone(),
                    policy: policy.clone(),
                    caught_seeds,
                    seeds,
                    checks_missing,
                    fails_gate: gates.fail_on_missed_mutant && caught_seeds < seeds,
                });
            }
            continue;
        }
        // The mutant groups of this clean group.
        let siblings: Vec<usize> = (0..metas.len())
            .filter(|&j| {
                let o = &metas[j];
                !o.mutant.is_empty()
                    && (&o.scenario, &o.param, &o.profile) == (&m.scenario, &m.param, &m.profile)
            })
            .collect();
        for (k, e) in summaries[gi].iter().enumerate() {
            let asserted = e.comparison == m.asserted;
            let (c, ci, p) = split(m, k);
            let (caught, missed): (Vec<usize>, Vec<usize>) = siblings.iter().partition(|&&j| {
                let se = &summaries[j][metas[j].index(c, ci, p)];
                se.seeds > 0 && se.failing_seeds == se.seeds
            });
            let name = |v: Vec<usize>| v.into_iter().map(|j| metas[j].mutant.clone()).collect();
            let tail = e.tail.as_ref().map(|t| {
                let (rate, how) = flake_rate(e);
                Tail {
                    method: match t.method {
                        TailMethod::Gpd => "gpd",
                        TailMethod::Empirical => "empirical",
                    },
                    points: t.points.clone(),
                    flake_rate: rate,
                    flake_rate_method: how,
                }
            });
            let mut failures = Vec::new();
            if asserted && gates.fail_on_exceed && e.failing_seeds > 0 {
                failures.push(format!(
                    "exceeds its tolerance on {} of {} seeds, worst {} at seed {} step {}",
                    e.failing_seeds,
                    e.seeds,
                    pct(e.worst_usage),
                    e.worst_seed,
                    e.worst_step
                ));
            }
            if let (true, Some(limit), Some(t)) = (asserted, gates.max_flake_rate, &tail) {
                if t.flake_rate > limit {
                    failures.push(format!(
                        "predicted flake rate {} ({}) is above --max-flake-rate {}",
                        crate::check::python_repr::py_repr(t.flake_rate),
                        t.flake_rate_method,
                        crate::check::python_repr::py_repr(limit)
                    ));
                }
            }
            let msg = if asserted && e.failing_seeds > 0 {
                message(gi, k)
            } else {
                None
            };
            cases.push(Case {
                scenario: m.scenario.clone(),
                param: m.param.clone(),
                profile: m.profile.clone(),
                check: e.check.clone(),
                comparison: e.comparison,
                asserted,
                policy: e.policy.clone(),
                tolerance: e.tolerance,
                seeds: e.seeds,
                worst_usage_pct: e.worst_usage,
                worst_seed: e.worst_seed,
                worst_step: e.worst_step,
                failing_seeds: e.failing_seeds,
                failing_seed_list: aggs[gi].entries[k].failing_first.clone(),
                tail,
                mutants_caught: name(caught),
                mutants_missed: name(missed),
                repro: repro_command(ctx, m, &e.policy, e.comparison, e.worst_seed),
                message: msg,
                failures,
            });
        }
    }
    Verdict {
        command: "sweep",
        gates,
        cases,
        mutants,
    }
}
