//! The verdict as Markdown (`--markdown FILE`, e.g. `$GITHUB_STEP_SUMMARY`): a one-line
//! verdict, a table of the checks in the asserted comparison (failing first), the failing
//! cases' torch messages and repro commands, and the mutants. Appends nothing: the file is
//! written whole (GitHub concatenates a step's summary file into the job page).

use std::fmt::Write as _;

use crate::report::verdict::{pct, Case, Verdict};

/// A table cell: `|` escaped, line breaks as spaces.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn status(c: &Case) -> &'static str {
    if !c.failures.is_empty() {
        "❌ fail"
    } else if c.exceeds() {
        "⚠️ exceeds"
    } else {
        "✅ pass"
    }
}

/// A probability with three significant digits (`3.75e-2`, `0`, `–` when unknown).
fn rate(p: f64) -> String {
    if p.is_nan() {
        "–".into()
    } else if p == 0.0 {
        "0".into()
    } else {
        format!("{p:.2e}")
    }
}

/// The Markdown of `v`.
pub fn to_markdown(v: &Verdict) -> String {
    let mut out = String::new();
    let asserted: Vec<&Case> = v.cases.iter().filter(|c| c.asserted).collect();
    let exceeding = asserted.iter().filter(|c| c.exceeds()).count();
    let _ = writeln!(
        out,
        "## seedsweep {}: {}\n",
        v.command,
        if v.failed() {
            "❌ FAILED"
        } else {
            "✅ passed"
        }
    );
    if let Some(l) = v.failure_line() {
        let _ = writeln!(out, "{}\n", cell(&l));
    }
    let _ = writeln!(
        out,
        "{} check × policy case(s) in the asserted comparison, {} exceeding their tolerance on some seed; gates: {}.\n",
        asserted.len(),
        exceeding,
        {
            let mut g = Vec::new();
            if v.gates.fail_on_exceed {
                g.push("`--fail-on-exceed`".to_string());
            }
            if v.gates.fail_on_missed_mutant {
                g.push("`--fail-on-missed-mutant`".to_string());
            }
            if let Some(p) = v.gates.max_flake_rate {
                g.push(format!("`--max-flake-rate {}`", crate::check::python_repr::py_repr(p)));
            }
            if g.is_empty() {
                "none".to_string()
            } else {
                g.join(", ")
            }
        }
    );
    let mut order: Vec<&Case> = asserted.clone();
    // Failing first, then exceeding, then the rest; stable, so output order within each.
    order.sort_by_key(|c| (c.failures.is_empty(), !c.exceeds()));
    out.push_str("| status | scenario | param | profile | check | policy | worst | seed@step | failing seeds | flake rate at tolerance |\n");
    out.push_str("|---|---|---|---|---|---|---:|---|---:|---:|\n");
    for c in &order {
        let _ = writeln!(
            out,
            "| {} | `{}` | `{}` | `{}` | `{}` | `{}` | {} | {}@{} | {}/{} | {} |",
            status(c),
            cell(&c.scenario),
            cell(&c.param),
            cell(&c.profile),
            cell(&c.check),
            cell(&c.policy),
            pct(c.worst_usage_pct),
            c.worst_seed,
            c.worst_step,
            c.failing_seeds,
            c.seeds,
            c.tail
                .as_ref()
                .map(|t| format!("{} ({})", rate(t.flake_rate), t.flake_rate_method))
                .unwrap_or_else(|| "–".into())
        );
    }
    let failing: Vec<&&Case> = order.iter().filter(|c| c.exceeds()).collect();
    if !failing.is_empty() {
        out.push_str("\n### Failing checks\n");
        for c in failing {
            let _ = writeln!(
                out,
                "\n**`{}` [`{}`] `{}` `{}`, policy `{}`**: {}\n\n```sh\n{}\n```",
                c.scenario,
                c.param,
                c.profile,
                c.check,
                c.policy,
                if c.failures.is_empty() {
                    format!("exceeds on {} of {} seeds", c.failing_seeds, c.seeds)
                } else {
                    cell(&c.failures.join("; "))
                },
                c.repro
            );
            if let Some(m) = &c.message {
                let _ = writeln!(out, "\n```text\n{}\n```", m.trim_end());
            }
        }
    }
    if !v.mutants.is_empty() {
        out.push_str("\n### Mutants\n\n| mutant | scenario | param | profile | policy | caught | checks that miss it |\n|---|---|---|---|---|---:|---|\n");
        for m in &v.mutants {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | `{}` | `{}` | `{}` | {}/{} | {} |",
                cell(&m.mutant),
                cell(&m.scenario),
                cell(&m.param),
                cell(&m.profile),
                cell(&m.policy),
                m.caught_seeds,
                m.seeds,
                if m.checks_missing.is_empty() {
                    "none".to_string()
                } else {
                    cell(&m.checks_missing.join(" "))
                }
            );
        }
    }
    out
}
