//! The report's answer first: the verdict grid at the top of the page (scenario × check ×
//! policy, red where the check exceeds its tolerance on some seed in the comparison the test
//! asserts, with the worst usage; failing rows first, each cell a link to its chart), the
//! status of each group in the contents, and in each failing group a box with the repro
//! command of the worst seed and, when `size DIR` has written `recommendations.csv`, the
//! recommended tolerance next to the current one.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{chart_key, escape, py_repr, Ctx, GroupMeta, RecRow, SummaryIn};

/// The summary row of a clean group's check under a policy, in the asserted comparison.
fn row<'a>(ctx: &'a Ctx, m: &GroupMeta, check: &str, policy: &str) -> Option<&'a SummaryIn> {
    let key = chart_key(&m.scenario, &m.param, &m.profile, check, m.asserted.name());
    ctx.data.summary.get(&key)?.get(policy)
}

/// Failing (check, policy) pairs of a group.
fn failing(ctx: &Ctx, m: &GroupMeta) -> usize {
    let mut n = 0;
    for c in &m.checks {
        for p in &m.policies {
            if row(ctx, m, c, p).is_some_and(|r| r.failing_seeds > 0) {
                n += 1;
            }
        }
    }
    n
}

/// The status badge of a group in the contents list.
pub(super) fn group_status(ctx: &Ctx, m: &GroupMeta) -> String {
    match failing(ctx, m) {
        0 => "<span class=\"st-pass\">✓</span>".into(),
        n => format!("<span class=\"st-fail\">✗ {n} failing</span>"),
    }
}

/// The sections with a failing group first (stable), with their original index (anchor).
pub(super) fn failing_first<'a>(
    ctx: &Ctx,
    sections: &'a [(String, Vec<usize>)],
) -> Vec<(usize, &'a (String, Vec<usize>))> {
    let mut v: Vec<(usize, &(String, Vec<usize>))> = sections.iter().enumerate().collect();
    v.sort_by_key(|(_, (_, groups))| {
        !groups
            .iter()
            .any(|&gi| failing(ctx, &ctx.data.plan[gi].0) > 0)
    });
    v
}

/// One grid cell: the worst over a scenario's groups of one check under one policy.
#[derive(Default)]
struct Cell {
    worst: Option<f64>,
    /// Chart id of the group with the worst usage.
    chart: usize,
    failing_groups: usize,
    groups: usize,
}

/// The verdict line and the grid.
pub(super) fn grid(
    out: &mut String,
    ctx: &Ctx,
    sections: &[(String, Vec<usize>)],
    policies: &[String],
    chart_ids: &BTreeMap<(usize, usize), usize>,
) {
    let plan = &ctx.data.plan;
    // Rows: (scenario, check) in plan order.
    let mut rows: Vec<(String, String, Vec<Cell>)> = Vec::new();
    let (mut cases, mut failing_cases) = (0usize, 0usize);
    for (name, groups) in sections {
        for &gi in groups {
            let m = &plan[gi].0;
            for (c, check) in m.checks.iter().enumerate() {
                let ri = match rows.iter().position(|r| &r.0 == name && &r.1 == check) {
                    Some(i) => i,
                    None => {
                        rows.push((
                            name.clone(),
                            check.clone(),
                            policies.iter().map(|_| Cell::default()).collect(),
                        ));
                        rows.len() - 1
                    }
                };
                for (pi, p) in policies.iter().enumerate() {
                    let Some(r) = row(ctx, m, check, p) else {
                        continue;
                    };
                    cases += 1;
                    let cell = &mut rows[ri].2[pi];
                    cell.groups += 1;
                    if r.failing_seeds > 0 {
                        cell.failing_groups += 1;
                        failing_cases += 1;
                    }
                    let w = if r.worst_usage_pct.is_nan() {
                        f64::INFINITY
                    } else {
                        r.worst_usage_pct
                    };
                    if cell.worst.is_none_or(|x| w > x) {
                        cell.worst = Some(w);
                        cell.chart = chart_ids.get(&(gi, c)).copied().unwrap_or(0);
                    }
                }
            }
        }
    }
    rows.sort_by_key(|r| !r.2.iter().any(|c| c.failing_groups > 0));
    let fail = failing_cases > 0;
    w!(
        out,
        "<p class=\"verdict-line {}\">{}</p>\n",
        if fail { "fail" } else { "pass" },
        if fail {
            format!(
                "✗ {failing_cases} of {cases} check × policy cases exceed their tolerance on some seed (the comparison each test asserts; one case per scenario, param, profile, check and policy)"
            )
        } else {
            format!("✓ all {cases} check × policy cases stay within their tolerance on every seed")
        }
    );
    out.push_str("<table class=\"grid\" id=\"verdict\">\n<tr><th class=\"l\">scenario</th><th class=\"l\">check</th>");
    for p in policies {
        w!(out, "<th><code>{}</code></th>", escape(p));
    }
    out.push_str("</tr>\n");
    for (scenario, check, cells) in &rows {
        w!(
            out,
            "<tr><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td>",
            escape(scenario),
            escape(check)
        );
        for c in cells {
            match c.worst {
                None => out.push_str("<td class=\"none\">—</td>"),
                Some(wv) => {
                    let fails = c.failing_groups > 0;
                    w!(
                        out,
                        "<td class=\"{}\" title=\"{}\"><a href=\"#c{}\">{}{}</a></td>",
                        if fails { "fail" } else { "pass" },
                        escape(&format!(
                            "worst usage over {} group(s); {} fail on some seed",
                            c.groups, c.failing_groups
                        )),
                        c.chart,
                        if fails { "✗ " } else { "" },
                        escape(&super::pct(wv))
                    );
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

/// The box of a failing group: per failing check and policy, the worst seed's repro command,
/// and the recommended tolerance (from `recommendations.csv`) next to the current one.
pub(super) fn failing_box(out: &mut String, ctx: &Ctx, m: &GroupMeta) {
    let mut lines = Vec::new();
    for (c, check) in m.checks.iter().enumerate() {
        for (pi, p) in m.policies.iter().enumerate() {
            let Some(r) = row(ctx, m, check, p) else {
                continue;
            };
            if r.failing_seeds == 0 {
                continue;
            }
            let cmd = crate::report::verdict::repro_command(
                &crate::report::verdict::ReproContext::default(),
                m,
                p,
                m.asserted,
                r.worst_seed,
            );
            let tol = m.tolerances.get(pi).and_then(|t| t.get(c));
            let mut line = format!(
                "<p><b><code>{}</code></b> · <code>{}</code>: <span class=\"bad\">{} of {} seeds fail</span>, worst {} at seed {} step {}. Repro: <code>{}</code></p>",
                escape(check),
                escape(p),
                r.failing_seeds,
                r.seeds,
                escape(&super::pct(r.worst_usage_pct)),
                r.worst_seed,
                escape(&r.worst_step.to_string()),
                escape(&cmd)
            );
            let recs = recommended(ctx, m, check);
            if let Some(t) = tol {
                w!(
                    line,
                    "<p class=\"note\">Tolerance now: atol={}, rtol={}{}</p>",
                    escape(&py_repr(t.atol)),
                    escape(&py_repr(t.rtol)),
                    if recs.is_empty() {
                        "; run <code>seedsweep size DIR</code> for a recommendation.".to_string()
                    } else {
                        format!("; recommended by <code>size</code>: {}.", recs.join("; "))
                    }
                );
            }
            lines.push(line);
        }
    }
    if !lines.is_empty() {
        w!(out, "<div class=\"failbox\">{}</div>\n", lines.join(""));
    }
}

/// The recommendations for a group's check: its own profile's rows, else `all`'s.
fn recommended(ctx: &Ctx, m: &GroupMeta, check: &str) -> Vec<String> {
    let rows: Vec<&RecRow> = ctx
        .data
        .recommendations
        .iter()
        .filter(|r| r.scenario == m.scenario && r.param == m.param && r.check == check)
        .collect();
    let own: Vec<&&RecRow> = rows.iter().filter(|r| r.profile == m.profile).collect();
    let pick: Vec<&&RecRow> = if own.is_empty() {
        rows.iter().filter(|r| r.profile == "all").collect()
    } else {
        own
    };
    pick.iter()
        .filter_map(|r| {
            Some(format!(
                "{} atol={}, rtol={}",
                escape(&r.shape),
                escape(&py_repr(r.atol?)),
                escape(&py_repr(r.rtol?))
            ))
        })
        .collect()
}
