//! The terminal's view of a [`Sizing`]: per (scenario, param) a title line, the current
//! policies' usages, the recommendations, the seeds failing under each policy and the
//! mutants, as aligned tables; then the warnings.

use std::fmt::Write as _;

use crate::check::python_repr::py_repr;
use crate::report::table::render;

use super::{fmt_pct, fmt_tol, Caught, KeySizing, Sizing, Warning};

/// The whole text (warnings are lines starting `warning:`).
pub fn render_text(s: &Sizing) -> String {
    let mut text = String::new();
    for k in &s.keys {
        key(&mut text, s, k);
    }
    for k in &s.keys {
        for w in &k.warnings {
            let _ = writeln!(text, "{}", warning(s, k, w));
        }
    }
    text
}

/// A warning's sentence (the Markdown quotes it).
pub(super) fn warning(s: &Sizing, k: &KeySizing, w: &Warning) -> String {
    let (scenario, param) = (&k.scenario, &k.param);
    let (need_gpd, need_df) = (s.seeds_needed_gpd, s.seeds_needed_empirical);
    match w {
        Warning::TooFewSeeds { profile, seeds } => format!(
            "warning: {scenario} [{param}] {profile}: {seeds} seeds are too few for a flake rate of {}: a GPD extrapolation needs at least {need_gpd} seeds and a distribution-free bound {need_df}; the recommendation is conservative (a GPD tail with its shape fixed at ξ = 0.5, or at a rejected fit's when heavier; valid if the true tail is no heavier)",
            py_repr(s.flake)
        ),
        Warning::NoGpdFit { profile, checks } => format!(
            "warning: {scenario} [{param}] {profile}: no GPD fit was accepted for {} at any threshold; the recommendation is conservative (a GPD with its shape fixed at ξ = 0.5, or at the rejected fit's when heavier)",
            checks.join(", ")
        ),
        Warning::NotEstimable { profile, seeds } => format!(
            "warning: {scenario} [{param}] {profile}: some usages are not estimable with {seeds} seeds; no recommendation for them"
        ),
    }
}

/// The line naming the seeds failing under `policy` (at most ten, then how many more).
pub(super) fn failing_line(policy: &str, failing: &[u64]) -> String {
    let shown: Vec<String> = failing.iter().take(10).map(|s| s.to_string()).collect();
    let more = if failing.len() > 10 {
        format!(" and {} more", failing.len() - 10)
    } else {
        String::new()
    };
    format!(
        "seeds failing under `{policy}`: {}{}",
        if failing.is_empty() {
            "none".to_string()
        } else {
            shown.join(", ")
        },
        more
    )
}

/// One (scenario, param).
fn key(text: &mut String, s: &Sizing, k: &KeySizing) {
    let profiles = k.profile_names();
    let (first, last, count) = k.seeds;
    let _ = writeln!(
        text,
        "{} [{}]: seeds {first}..{last} ({count}) per profile ({}), {} as the test asserts; flake rate {}, target {} % on the upper bound",
        k.scenario,
        k.param,
        profiles.join(", "),
        k.asserted.name(),
        py_repr(s.flake),
        py_repr(s.target)
    );
    // Current policies, per profile.
    let mut header: Vec<String> = vec!["check".into(), "profile".into()];
    for p in &k.policies {
        header.push(format!("{p}: worst"));
        header.push(format!("@p={} [upper]", py_repr(s.flake)));
    }
    let mut rows = Vec::new();
    for (check, per_profile) in k.checks.iter().zip(&k.current) {
        for (profile, per_policy) in profiles.iter().zip(per_profile) {
            let mut r = vec![check.clone(), profile.to_string()];
            for u in per_policy {
                r.push(fmt_pct(u.worst));
                r.push(format!("{} [{}]", fmt_pct(u.at_p), fmt_pct(u.upper)));
            }
            rows.push(r);
        }
    }
    text.push_str(&render(&header, &rows, 1));
    // Recommendations (all profiles).
    let header: Vec<String> = [
        "check",
        "atol @rtol 1.3e-6",
        "rtol @atol 0",
        "balanced (atol, rtol)",
        "predicted [upper]",
        "tail",
        "binding profile",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows: Vec<Vec<String>> = k
        .combined
        .iter()
        .enumerate()
        .map(|(c, cm)| {
            let bal = &cm[2];
            vec![
                k.checks
                    .get(c)
                    .cloned()
                    .unwrap_or_else(|| "all (one pair)".into()),
                fmt_tol(cm[0].rec.tol.atol),
                if cm[1].rec.tol.rtol.is_nan() {
                    "n/a".to_string()
                } else {
                    fmt_tol(cm[1].rec.tol.rtol)
                },
                format!(
                    "({}, {})",
                    fmt_tol(bal.rec.tol.atol),
                    fmt_tol(bal.rec.tol.rtol)
                ),
                format!(
                    "{} [{}]",
                    fmt_pct(bal.rec.predicted),
                    fmt_pct(bal.rec.upper)
                ),
                bal.rec.method.name().to_string(),
                profiles[bal.profile].to_string(),
            ]
        })
        .collect();
    text.push_str(&render(&header, &rows, 1));
    // Failing seeds under each current policy.
    for (policy, failing) in k.policies.iter().zip(&k.failing) {
        let _ = writeln!(text, "{}", failing_line(policy, failing));
    }
    // Mutants under the per-check balanced recommendation.
    if !k.mutants.is_empty() {
        let rows: Vec<Vec<String>> = k
            .mutants
            .iter()
            .map(|m| {
                vec![
                    m.mutant.clone(),
                    m.profile.clone(),
                    match m.caught {
                        Caught::NoRecommendation => "no recommendation".into(),
                        Caught::OnEverySeed(n) => format!("{n}/{n}"),
                        Caught::NotShown => "not shown".into(),
                    },
                ]
            })
            .collect();
        text.push_str(&render(
            &[
                "mutant".to_string(),
                "profile".to_string(),
                "caught under the balanced recommendation".to_string(),
            ],
            &rows,
            1,
        ));
    }
    text.push('\n');
}
