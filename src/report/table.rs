//! Plain-text tables for the terminal.

use crate::check::comparison::Comparison;
use crate::check::python_repr::py_repr;
use crate::engine::aggregate::{GroupAgg, SummaryEntry};
use crate::engine::plan::GroupMeta;

/// Left-aligns the first `left` columns and right-aligns the rest, two spaces apart.
pub fn render(header: &[String], rows: &[Vec<String>], left: usize) -> String {
    let ncol = header.len();
    let mut width = vec![0usize; ncol];
    for r in std::iter::once(header).chain(rows.iter().map(|r| r.as_slice())) {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |r: &[String], out: &mut String| {
        // Padded by hand: a format width beyond u16::MAX (a 10 MB name) would panic.
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let pad = " ".repeat(width[i].saturating_sub(c.chars().count()));
                if i < left {
                    format!("{c}{pad}")
                } else {
                    format!("{pad}{c}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    };
    line(header, &mut out);
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    line(&rule, &mut out);
    for r in rows {
        line(r, &mut out);
    }
    out
}

/// A usage ratio as a percentage with 3 significant-ish digits (`118%`, `23.4%`, `0.52%`).
pub fn pct(ratio: f64) -> String {
    if ratio.is_infinite() {
        return "inf".into();
    }
    let p = ratio * 100.0;
    if p >= 100.0 {
        format!("{p:.0}%")
    } else if p >= 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.2}%")
    }
}

/// A magnitude in short scientific form (`1.25e-06`).
pub fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !x.is_finite() {
        py_repr(x)
    } else {
        format!("{x:.3e}")
    }
}

/// The sweep summary: one row per (scenario, param, profile, check), the comparison the test
/// asserts (`sharded-vs-ref`, or `sharded-vs-f64` for tests against float64 constants) under
/// each policy (worst usage, its seed and step, failing seeds), then the largest |expected|
/// and the `ref-vs-f64` largest difference. Mutant groups are left to [`mutant_summary`];
/// groups without seeds (another shard's) are skipped.
pub fn sweep_summary(
    metas: &[GroupMeta],
    aggs: &[GroupAgg],
    summaries: &[Vec<SummaryEntry>],
) -> String {
    let mut out = String::new();
    for (start, end) in scenario_blocks(metas) {
        let name = &metas[start].scenario;
        let clean: Vec<usize> = (start..end)
            .filter(|&gi| metas[gi].mutant.is_empty() && aggs[gi].seeds > 0)
            .collect();
        let Some(&first) = clean.first() else {
            continue;
        };
        let m0 = &metas[first];
        let a0 = &aggs[first];
        let seed_text = if m0.seed_dependent {
            format!(
                "seeds {}..{} ({})",
                a0.first_seed.unwrap_or(0),
                a0.last_seed.unwrap_or(0),
                a0.seeds
            )
        } else {
            "fixed data: the seed does not change this scenario, evaluated once".to_string()
        };
        out.push_str(&format!(
            "{}  [{}; {} as the test asserts]\n",
            name,
            seed_text,
            m0.asserted.name()
        ));
        let mut header: Vec<String> = vec!["param".into(), "profile".into(), "check".into()];
        for p in &m0.policies {
            header.push(format!("{p}: worst"));
            header.push("at seed@step".into());
            header.push("failing".into());
        }
        header.push("max|expected|".into());
        header.push("ref-vs-f64 max|diff|".into());
        let mut rows = Vec::new();
        for &gi in &clean {
            let m = &metas[gi];
            for check in &m.checks {
                let mut row = vec![m.param.clone(), m.profile.clone(), check.clone()];
                let find = |cmp: Comparison, policy: &str| {
                    summaries[gi]
                        .iter()
                        .find(|e| &e.check == check && e.comparison == cmp && e.policy == policy)
                        .expect("every check x comparison x policy is summarized")
                };
                for p in &m.policies {
                    let e = find(m.asserted, p);
                    row.push(pct(e.worst_usage / 100.0));
                    row.push(format!("{}@{}", e.worst_seed, e.worst_step));
                    row.push(format!("{}/{}", e.failing_seeds, e.seeds));
                }
                let e = find(m.asserted, &m.policies[0]);
                row.push(format!("{:.4}", e.max_abs_expected));
                row.push(sci(find(Comparison::RefVsF64, &m.policies[0]).max_abs_diff));
                rows.push(row);
            }
        }
        out.push_str(&render(&header, &rows, 3));
        out.push('\n');
    }
    out
}

/// The contiguous runs of groups of one scenario: `(start, end)` index pairs.
fn scenario_blocks(metas: &[GroupMeta]) -> Vec<(usize, usize)> {
    let mut blocks = Vec::new();
    let mut start = 0;
    while start < metas.len() {
        let name = &metas[start].scenario;
        let end = start
            + metas[start..]
                .iter()
                .take_while(|m| &m.scenario == name)
                .count();
        blocks.push((start, end));
        start = end;
    }
    blocks
}

/// The mutant summary: one table per scenario, one row per (param, profile, mutant). For each
/// policy, in the comparison the test asserts: on how many seeds at least one check catches
/// the bug, and which checks miss it on some seed.
pub fn mutant_summary(
    metas: &[GroupMeta],
    aggs: &[GroupAgg],
    summaries: &[Vec<SummaryEntry>],
) -> String {
    let mut out = String::new();
    for (start, end) in scenario_blocks(metas) {
        let name = &metas[start].scenario;
        let groups: Vec<usize> = (start..end)
            .filter(|&gi| !metas[gi].mutant.is_empty() && aggs[gi].seeds > 0)
            .collect();
        let Some(&first) = groups.first() else {
            continue;
        };
        let mut header: Vec<String> = vec!["param".into(), "profile".into(), "mutant".into()];
        for p in &metas[first].policies {
            header.push(format!("{p}: caught"));
            header.push("checks that miss some seed".into());
        }
        let mut rows = Vec::new();
        for &gi in &groups {
            let m = &metas[gi];
            let mut row = vec![m.param.clone(), m.profile.clone(), m.mutant.clone()];
            for (p, policy) in m.policies.iter().enumerate() {
                row.push(format!("{}/{}", aggs[gi].caught[p], aggs[gi].seeds));
                let misses: Vec<&str> = summaries[gi]
                    .iter()
                    .filter(|e| {
                        e.comparison == m.asserted
                            && &e.policy == policy
                            && e.failing_seeds < e.seeds
                    })
                    .map(|e| e.check.as_str())
                    .collect();
                row.push(if misses.is_empty() {
                    "none".to_string()
                } else {
                    misses.join(" ")
                });
            }
            rows.push(row);
        }
        out.push_str(&format!(
            "{name}: mutants (bugs injected into the sharded computation; {} as the test asserts)\n{}\n",
            metas[first].asserted.name(),
            render(&header, &rows, 3)
        ));
    }
    out
}
