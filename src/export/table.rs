//! Plain-text tables for the terminal.

use crate::catalog::{Catalog, Group};
use crate::check::py_repr;
use crate::evaluate::Comparison;
use crate::sweep::{GroupResult, SummaryEntry};

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
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i < left {
                    format!("{c:<w$}", w = width[i])
                } else {
                    format!("{c:>w$}", w = width[i])
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
/// and the `ref-vs-f64` largest difference.
pub fn sweep_summary(
    catalog: &Catalog,
    groups: &[Group],
    results: &[GroupResult],
    summaries: &[Vec<SummaryEntry>],
) -> String {
    let mut out = String::new();
    let mut start = 0;
    while start < groups.len() {
        let si = groups[start].scenario;
        let end = start
            + groups[start..]
                .iter()
                .take_while(|g| g.scenario == si)
                .count();
        let s = &catalog.scenarios[si];
        let seeds = &results[start].seeds;
        let seed_text = if s.seed_dependent() {
            format!(
                "seeds {}..{} ({})",
                seeds[0],
                seeds[seeds.len() - 1],
                seeds.len()
            )
        } else {
            "fixed data: the seed does not change this scenario, evaluated once".to_string()
        };
        let asserted = s.asserted_comparison();
        out.push_str(&format!(
            "{}  [{}; {} as the test asserts]\n",
            s.common().name,
            seed_text,
            asserted.name()
        ));
        let policies = &groups[start].policy_names;
        let mut header: Vec<String> = vec!["param".into(), "profile".into(), "check".into()];
        for p in policies {
            header.push(format!("{p}: worst"));
            header.push("at seed@step".into());
            header.push("failing".into());
        }
        header.push("max|expected|".into());
        header.push("ref-vs-f64 max|diff|".into());
        let mut rows = Vec::new();
        for gi in start..end {
            let g = &groups[gi];
            if g.mutant.is_some() {
                continue;
            }
            let param = s.param_ids()[g.param];
            for check in s.checks(g.param) {
                let mut row = vec![
                    param.to_string(),
                    g.profile.name.clone(),
                    check.name.to_string(),
                ];
                let find = |cmp: Comparison, policy: &str| {
                    summaries[gi]
                        .iter()
                        .find(|e| {
                            e.check == check.name && e.comparison == cmp && e.policy == policy
                        })
                        .expect("every check x comparison x policy is summarized")
                };
                for p in policies {
                    let e = find(asserted, p);
                    row.push(pct(e.worst_usage));
                    row.push(format!("{}@{}", e.worst_seed, e.worst_step));
                    row.push(format!("{}/{}", e.failing_seeds, e.seeds));
                }
                let e = find(asserted, &policies[0]);
                row.push(format!("{:.4}", e.max_abs_expected));
                row.push(sci(find(Comparison::RefVsF64, &policies[0]).max_abs_diff));
                rows.push(row);
            }
        }
        out.push_str(&render(&header, &rows, 3));
        out.push('\n');
        start = end;
    }
    out
}

/// The mutant summary: one row per (scenario, param, profile, mutant). For each policy, in the
/// comparison the test asserts: on how many seeds at least one check catches the bug, and
/// which checks miss it on some seed.
pub fn mutant_summary(
    catalog: &Catalog,
    groups: &[Group],
    results: &[GroupResult],
    summaries: &[Vec<SummaryEntry>],
) -> String {
    let Some(first) = groups.iter().find(|g| g.mutant.is_some()) else {
        return String::new();
    };
    let policies = &first.policy_names;
    let mut header: Vec<String> = vec![
        "scenario".into(),
        "param".into(),
        "profile".into(),
        "mutant".into(),
    ];
    for p in policies {
        header.push(format!("{p}: caught"));
        header.push("checks that miss some seed".into());
    }
    let mut rows = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        let Some(m) = g.mutant else { continue };
        let s = &catalog.scenarios[g.scenario];
        let asserted = s.asserted_comparison();
        let checks = s.checks(g.param);
        let np = g.policy_names.len();
        let ci = Comparison::ALL
            .iter()
            .position(|c| *c == asserted)
            .expect("asserted comparison is one of ALL");
        let mut row = vec![
            s.common().name.clone(),
            s.param_ids()[g.param].to_string(),
            g.profile.name.clone(),
            m.name().to_string(),
        ];
        for (p, policy) in g.policy_names.iter().enumerate() {
            let caught = results[gi]
                .per_seed
                .iter()
                .filter(|res| {
                    (0..checks.len())
                        .any(|c| res[(c * Comparison::ALL.len() + ci) * np + p].usage > 1.0)
                })
                .count();
            row.push(format!("{}/{}", caught, results[gi].seeds.len()));
            let misses: Vec<&str> = summaries[gi]
                .iter()
                .filter(|e| {
                    e.comparison == asserted && &e.policy == policy && e.failing_seeds < e.seeds
                })
                .map(|e| e.check)
                .collect();
            row.push(if misses.is_empty() {
                "none".to_string()
            } else {
                misses.join(" ")
            });
        }
        rows.push(row);
    }
    format!(
        "mutants (injected bugs in the sharded computation)\n{}\n",
        render(&header, &rows, 4)
    )
}
