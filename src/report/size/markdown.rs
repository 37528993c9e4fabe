//! The Markdown view of a [`Sizing`]: the evidence for a pull request. How usage and its
//! tail are estimated, then per (scenario, param) the current policies, the
//! recommendations, the failing seeds with a `repro` command, the mutants and the
//! assertions to paste into the test; then the warnings, quoted.

use std::fmt::Write as _;

use crate::check::python_repr::py_repr;

use super::text::{failing_line, warning};
use super::{fmt_pct, fmt_tol, Caught, KeySizing, Sizing};

/// The whole Markdown document.
pub fn render_markdown(s: &Sizing) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## Evidence: tolerance sizing (seedsweep)\n");
    let _ = writeln!(
        md,
        "Usage = |actual − expected| / (atol + rtol·|expected|), worst element, in the comparison the test asserts; \
         above 100 % the check fails. The usage at a per-seed failure probability p is an empirical quantile when \
         there are enough seeds for a distribution-free bound ({} at p = {}), otherwise a peaks-over-threshold \
         generalized Pareto extrapolation (at least {} seeds) with a 95 % profile-likelihood interval. \
         Recommendations keep the **upper end** of that interval at or below {} %, for every profile.\n",
        s.seeds_needed_empirical,
        py_repr(s.flake),
        s.seeds_needed_gpd,
        py_repr(s.target)
    );
    for k in &s.keys {
        key(&mut md, k);
    }
    for k in &s.keys {
        for w in &k.warnings {
            let _ = writeln!(md, "> {}\n", warning(s, k, w));
        }
    }
    md
}

/// One (scenario, param).
fn key(md: &mut String, k: &KeySizing) {
    let profiles = k.profile_names();
    let (first, last, count) = k.seeds;
    let _ = writeln!(
        md,
        "### {} `[{}]`, profiles {}\n\nSeeds {first}..{last} ({count}) per profile.\n",
        k.scenario,
        k.param,
        profiles
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    // Current policies, per profile.
    let _ = writeln!(
        md,
        "Current policies (worst seed; usage at p with its 95 % upper end):\n\n| check | profile |{}\n|---|---|{}",
        k.policies
            .iter()
            .map(|p| format!(" worst `{p}` | `{p}` at p |"))
            .collect::<String>(),
        "---|---|".repeat(k.policies.len())
    );
    for (check, per_profile) in k.checks.iter().zip(&k.current) {
        for (profile, per_policy) in profiles.iter().zip(per_profile) {
            let _ = write!(md, "| `{check}` | `{profile}` |");
            for u in per_policy {
                let _ = write!(
                    md,
                    " {} | {} [{}] |",
                    fmt_pct(u.worst),
                    fmt_pct(u.at_p),
                    fmt_pct(u.upper)
                );
            }
            md.push('\n');
        }
    }
    // Recommendations (all profiles).
    let _ = writeln!(
        md,
        "\nRecommendations (hold for every profile above):\n\n| check | atol at rtol=1.3e-6 | rtol at atol=0 | balanced | predicted usage at p [upper] | tail | binding profile |\n|---|---|---|---|---|---|---|"
    );
    for (c, cm) in k.combined.iter().enumerate() {
        let bal = &cm[2];
        let rtol = if cm[1].rec.tol.rtol.is_nan() {
            "n/a".to_string()
        } else {
            fmt_tol(cm[1].rec.tol.rtol)
        };
        let _ = writeln!(
            md,
            "| `{}` | {} | {rtol} | atol={}, rtol={} | {} [{}] | {} | `{}` |",
            k.checks.get(c).map_or("all (one pair)", |s| s.as_str()),
            fmt_tol(cm[0].rec.tol.atol),
            fmt_tol(bal.rec.tol.atol),
            fmt_tol(bal.rec.tol.rtol),
            fmt_pct(bal.rec.predicted),
            fmt_pct(bal.rec.upper),
            bal.rec.method.name(),
            profiles[bal.profile]
        );
    }
    // Failing seeds under each current policy, with a command that reproduces one.
    for (policy, failing) in k.policies.iter().zip(&k.failing) {
        let line = failing_line(policy, failing);
        match failing.first() {
            None => {
                let _ = writeln!(md, "\n{line}.");
            }
            Some(seed) => {
                let _ = writeln!(
                    md,
                    "\n{line} (reproduce one with `seedsweep repro --seed {seed} --param {} --policy {policy}`).",
                    k.param
                );
            }
        }
    }
    // Mutants under the per-check balanced recommendation.
    let _ = writeln!(
        md,
        "\n| injected bug | profile | seeds caught under the recommendation |\n|---|---|---|"
    );
    for m in &k.mutants {
        let cell = match m.caught {
            Caught::NoRecommendation => "no recommendation".to_string(),
            Caught::OnEverySeed(n) => format!("{n}/{n}"),
            Caught::NotShown => {
                "not shown on every seed (no check's smallest usage bounds it above 100 %)".into()
            }
        };
        let _ = writeln!(md, "| `{}` | `{}` | {cell} |", m.mutant, m.profile);
    }
    // The assertions to paste into the test.
    let _ = writeln!(md, "\nAssertions (per check):\n\n```python");
    let call = if k.jax {
        "chex.assert_trees_all_close"
    } else {
        "torch.testing.assert_close"
    };
    for (c, check) in k.checks.iter().enumerate() {
        let t = k.balanced(c).tol;
        let _ = writeln!(
            md,
            "{call}(actual_{check}, expected_{check}, atol={}, rtol={})",
            fmt_tol(t.atol),
            fmt_tol(t.rtol)
        );
    }
    let one = k.balanced(k.checks.len()).tol;
    let _ = writeln!(
        md,
        "# or one pair for every check: atol={}, rtol={}\n```\n",
        fmt_tol(one.atol),
        fmt_tol(one.rtol)
    );
}
