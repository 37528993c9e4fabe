//! A self-contained HTML report of a sweep directory: inline `<style>` and inline `<svg>`
//! only (no scripts, no network), so the file opens offline in any browser.
//!
//! For every (scenario, param, profile, check) of the clean runs, in the comparison the test
//! asserts: a histogram of per-seed usage on a log axis, one series per policy (or, for a
//! `--summary-only` sweep without `seeds.csv`, the worst / p95 / p50 per policy), the 100 %
//! limit, each policy's worst seed, the predicted tail usages, the summary rows, and the
//! mutants' margins. The output depends only on the input files: same files, same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;

use crate::results::schema::{
    RecRow, ANY_CHECK, MUTANT_COLUMNS, RECOMMENDATION_COLUMNS, SUMMARY_COLUMNS,
};

use super::svg::{self, escape, num, pct, Bar, LogAxis};
use crate::check::comparison::Comparison;
use crate::check::python_repr::py_repr;
use crate::engine::plan::GroupMeta;

/// What [`write_report`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportStats {
    /// SVG charts: one per (scenario, param, profile, check) of the clean runs.
    pub charts: usize,
    /// Distinct check names shown.
    pub checks: usize,
}

/// Per-seed exceedance probabilities of the tail markers.
pub const TAIL_PROBS: [f64; 3] = [1e-2, 1e-3, 1e-4];

/// Fewest seeds for which tail markers are drawn (below, a "prediction" at p = 1e-4 is just
/// the sample maximum with an unbounded interval).
pub const MIN_TAIL_SEEDS: usize = 10;

/// Histogram bins per decade of usage.
const PER_DECADE: u32 = 5;
/// Widest x-axis, in decades (smaller usages are drawn in the first bin).
const MAX_DECADES: i32 = 14;

/// Okabe–Ito colours (colour-blind safe), one per policy in order of first appearance.
const COLOURS: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// Reads `DIR/plan.csv`, `DIR/summary.csv`, and when present `DIR/seeds.csv` and
/// `DIR/mutants.csv`, and writes one self-contained HTML report to `out` (atomically, via
/// [`crate::sys::atomic_write::write_atomic`]). Errors name the file (and row) that cannot be read.
pub fn write_report(dir: &Path, out: &Path) -> anyhow::Result<ReportStats> {
    // A bad output path (a folder, an unwritable place) fails before the work.
    crate::sys::atomic_write::check(out, "--out")?;
    let (html, stats) = render_report(dir)?;
    crate::sys::atomic_write::write_atomic(out, html.as_bytes())?;
    Ok(stats)
}

/// The report of `dir` as a string, with its statistics (what [`write_report`] writes).
pub fn render_report(dir: &Path) -> anyhow::Result<(String, ReportStats)> {
    let data = Data::read(dir)?;
    Ok(render(&data))
}

// ---------------------------------------------------------------------------------------
// Input

// One row of `summary.csv` and of `mutants.csv` as read back: the rows their declarations
// read ([`crate::results::schema`]).
use crate::results::schema::MutantRow as MutantIn;
use crate::results::schema::SummaryRow as SummaryIn;

/// (scenario, param, profile, check, comparison): the rows of one chart.
type ChartKey = (String, String, String, String, String);

fn chart_key(s: &str, pa: &str, pr: &str, c: &str, cmp: &str) -> ChartKey {
    (s.into(), pa.into(), pr.into(), c.into(), cmp.into())
}

/// Per-seed usages of one (group, check, policy) in the asserted comparison.
#[derive(Debug, Clone, Default)]
struct Series {
    /// Usages in percent, in file (seed) order; NaN read as +∞.
    usages: Vec<f64>,
    /// Largest usage, its first seed and step.
    worst: Option<(f64, u64, String)>,
}

struct Data {
    plan: Vec<(GroupMeta, Range<u64>)>,
    /// Clean summary rows by chart key, then policy.
    summary: BTreeMap<ChartKey, BTreeMap<String, SummaryIn>>,
    /// Mutant rows by chart key, in file order.
    mutants: Option<BTreeMap<ChartKey, Vec<MutantIn>>>,
    /// `series[group][check][policy]` for clean groups, when `seeds.csv` exists.
    series: Option<Vec<Vec<Vec<Series>>>>,
    /// The per-seed file the series come from (`seeds.csv` or `seeds.parquet`).
    seeds_name: Option<String>,
    /// `recommendations.csv` rows (written by `size DIR`), when present.
    recommendations: Vec<RecRow>,
}

/// Every row of a table whose rows own their strings, as its declaration reads them
/// ([`crate::results::csv::read_rows`]; errors name the file and row).
fn read_csv<F>(
    cols: &[crate::results::schema::Col<F>],
    path: &Path,
) -> anyhow::Result<Vec<F::Row<'static>>>
where
    F: crate::results::schema::RowFamily,
    for<'a> F::Row<'a>: Into<F::Row<'static>>,
{
    let mut out = Vec::new();
    crate::results::csv::read_rows(cols, path, false, |row, _, _| {
        // A row that owns its strings: the same type for every lifetime.
        #[allow(clippy::useless_conversion)]
        out.push(row.into());
        Ok(true)
    })?;
    Ok(out)
}

impl Data {
    fn read(dir: &Path) -> anyhow::Result<Self> {
        let plan_path = dir.join("plan.csv");
        let plan = crate::results::csv::read_plan(&plan_path)?;

        let mut summary: BTreeMap<ChartKey, BTreeMap<String, SummaryIn>> = BTreeMap::new();
        for r in read_csv(SUMMARY_COLUMNS, &dir.join("summary.csv"))? {
            if r.mutant.as_deref().is_some_and(|m| !m.is_empty()) {
                continue;
            }
            let key = chart_key(&r.scenario, &r.param, &r.profile, &r.check, &r.comparison);
            // First row wins on (unexpected) duplicates, as in file order.
            summary
                .entry(key)
                .or_default()
                .entry(r.policy.clone())
                .or_insert(r);
        }

        let mpath = dir.join("mutants.csv");
        let mutants = if mpath.exists() {
            let mut m: BTreeMap<ChartKey, Vec<MutantIn>> = BTreeMap::new();
            for r in read_csv(MUTANT_COLUMNS, &mpath)? {
                if r.check == ANY_CHECK {
                    // The test as a whole; the report shows each check's margins.
                    continue;
                }
                let key = chart_key(&r.scenario, &r.param, &r.profile, &r.check, &r.comparison);
                m.entry(key).or_default().push(r);
            }
            Some(m)
        } else {
            None
        };

        let metas: Vec<GroupMeta> = plan.iter().map(|(m, _)| m.clone()).collect();
        let seeds_file = crate::results::seeds_file::read_finished(dir, &metas)?;
        let seeds_name = seeds_file.as_ref().map(|(p, _)| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        });
        let series = if let Some((_, units)) = seeds_file {
            let mut series: Vec<Vec<Vec<Series>>> = metas
                .iter()
                .map(|m| {
                    if m.mutant.is_empty() {
                        vec![vec![Series::default(); m.policies.len()]; m.checks.len()]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            for u in &units {
                let m = &metas[u.group];
                if !m.mutant.is_empty() {
                    continue;
                }
                let ai = Comparison::ALL
                    .iter()
                    .position(|&c| c == m.asserted)
                    .unwrap_or(0);
                for (c, per_check) in series[u.group].iter_mut().enumerate() {
                    for (p, s) in per_check.iter_mut().enumerate() {
                        let v = &u.values[m.index(c, ai, p)];
                        let x = if v.usage_pct.is_nan() {
                            f64::INFINITY
                        } else {
                            v.usage_pct
                        };
                        s.usages.push(x);
                        if s.worst.as_ref().is_none_or(|w| x > w.0) {
                            s.worst = Some((x, u.seed, v.worst_step.to_string()));
                        }
                    }
                }
            }
            Some(series)
        } else {
            None
        };

        let rpath = dir.join("recommendations.csv");
        let recommendations = if rpath.exists() {
            read_csv(RECOMMENDATION_COLUMNS, &rpath)?
        } else {
            Vec::new()
        };
        Ok(Self {
            plan,
            summary,
            mutants,
            series,
            seeds_name,
            recommendations,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Tail hook

/// One predicted tail usage: exceeded with probability `p` per seed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TailMarker {
    /// Per-seed exceedance probability.
    p: f64,
    /// Predicted usage, percent.
    value: f64,
    /// 95 % confidence interval, percent (`hi` may be +∞).
    lo: f64,
    hi: f64,
    /// How it was estimated (`GPD` or `empirical`).
    method: &'static str,
}

/// The tail markers of one series of per-seed usages (percent): the usage exceeded with
/// probability 1e-2, 1e-3, 1e-4 per seed, with 95 % intervals, from
/// [`crate::stats::tail::tail_estimate`]. This is the one place the report depends on the
/// tail estimator: to change or disable it, change (or empty) this function; the report
/// draws whatever it returns. Empty below [`MIN_TAIL_SEEDS`] seeds, and points whose value
/// is NaN are dropped.
fn tail_markers(samples: &[f64]) -> Vec<TailMarker> {
    if samples.len() < MIN_TAIL_SEEDS {
        return Vec::new();
    }
    let est = crate::stats::tail::tail_estimate(samples, &TAIL_PROBS);
    let method = match est.method {
        crate::stats::tail::TailMethod::Gpd => "GPD",
        crate::stats::tail::TailMethod::Empirical => "empirical",
    };
    est.points
        .iter()
        .filter(|pt| !pt.value.is_nan())
        .map(|pt| TailMarker {
            p: pt.p,
            value: pt.value,
            lo: pt.lo,
            hi: pt.hi,
            method,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Rendering

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 48px;color:#222;background:#fff}
h1{margin:16px 0 4px}h2{margin:32px 0 8px;border-bottom:2px solid #ccc}h3{margin:20px 0 6px}h4{margin:14px 0 4px;font-family:ui-monospace,Menlo,Consolas,monospace}
table{border-collapse:collapse;margin:6px 0;font-size:12px}th,td{border:1px solid #ddd;padding:2px 6px;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace}
.chart{margin:0 0 18px;padding:4px 0 8px;border-bottom:1px dashed #ddd}svg{display:block;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .limit{stroke:#c00;stroke-width:1.5;stroke-dasharray:5 3}svg text.limit-label{fill:#c00}
svg .grid{stroke:#eee}svg .axis{stroke:#888}svg text.tail-label{font-size:9px}.note{color:#555;font-size:12px;margin:2px 0}
.bad{color:#b00;font-weight:600}.swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;vertical-align:baseline}
td.caught{background:#dff0d8}td.partial{background:#fcf1d0}td.missed{background:#f6d5d5}
nav ul{margin:4px 0;padding-left:20px}nav li{margin:2px 0}.legend{background:#fafafa;border:1px solid #eee;padding:6px 10px;margin:8px 0}
table.grid{font-size:11px;margin:4px 0 8px}table.grid td{padding:1px 6px}table.grid a{color:inherit;text-decoration:none;display:block}
td.fail{background:#f6d5d5;color:#900;font-weight:600}td.pass{background:#dff0d8}td.none{color:#aaa}
.verdict-line{font-size:16px;margin:4px 0 6px}.verdict-line.fail{color:#b00}.verdict-line.pass{color:#1a7f37}
.st-fail{color:#b00;font-weight:600}.st-pass{color:#1a7f37}
.failbox{border-left:4px solid #c00;background:#fdf3f3;padding:4px 10px;margin:6px 0}.failbox p{margin:3px 0}
";

/// Appends formatted text to a `String` (writing to a `String` cannot fail).
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

#[path = "html_verdict.rs"]
mod verdict;

/// Ordered, de-duplicated list.
fn push_unique(v: &mut Vec<String>, s: &str) {
    if !v.iter().any(|x| x == s) {
        v.push(s.to_string());
    }
}

struct Ctx<'a> {
    data: &'a Data,
    /// Policy -> colour, by first appearance in the plan.
    colour: BTreeMap<String, &'static str>,
}

impl Ctx<'_> {
    fn colour(&self, policy: &str) -> &'static str {
        self.colour.get(policy).copied().unwrap_or("#444")
    }
}

fn render(data: &Data) -> (String, ReportStats) {
    let plan = &data.plan;
    let mut policies: Vec<String> = Vec::new();
    for (m, _) in plan {
        for p in &m.policies {
            push_unique(&mut policies, p);
        }
    }
    let colour: BTreeMap<String, &'static str> = policies
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), COLOURS[i % COLOURS.len()]))
        .collect();
    let ctx = Ctx { data, colour };

    // Scenario sections: consecutive runs of one scenario name, clean groups only.
    let mut sections: Vec<(String, Vec<usize>)> = Vec::new();
    for (gi, (m, _)) in plan.iter().enumerate() {
        if !m.mutant.is_empty() {
            continue;
        }
        match sections.last_mut() {
            Some((name, gs)) if name == &m.scenario => gs.push(gi),
            _ => sections.push((m.scenario.clone(), vec![gi])),
        }
    }

    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<title>seedsweep report</title>\n<style>\n");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n");

    // Chart ids in render order, so the verdict grid can link to the charts.
    let mut chart_ids: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (_, groups) in &sections {
        for &gi in groups {
            for c in 0..plan[gi].0.checks.len() {
                let id = chart_ids.len();
                chart_ids.insert((gi, c), id);
            }
        }
    }
    out.push_str("<header>\n<h1>seedsweep report</h1>\n");
    verdict::grid(&mut out, &ctx, &sections, &policies, &chart_ids);
    header(&mut out, &ctx, &sections, &policies);

    let mut charts = 0usize;
    let mut check_names: BTreeSet<String> = BTreeSet::new();
    out.push_str("<main>\n");
    for (si, (name, groups)) in sections.iter().enumerate() {
        let m0 = &plan[groups[0]].0;
        w!(
            out,
            "<section id=\"s{si}\">\n<h2>{}</h2>\n<p class=\"note\">The test asserts <code>{}</code>; charts show that comparison.</p>\n",
            escape(name),
            escape(m0.asserted.name())
        );
        for &gi in groups {
            let (m, range) = &plan[gi];
            w!(
                out,
                "<h3 id=\"g{gi}\"><span class=\"mono\">{}</span> · <span class=\"mono\">{}</span></h3>\n",
                escape(&m.param),
                escape(&m.profile)
            );
            w!(
                out,
                "<p class=\"note\">{}</p>\n",
                escape(&seed_text(m, range))
            );
            verdict::failing_box(&mut out, &ctx, m);
            for (c, check) in m.checks.iter().enumerate() {
                check_names.insert(check.clone());
                chart_block(&mut out, &ctx, gi, c, charts);
                charts += 1;
            }
        }
        out.push_str("</section>\n");
    }
    out.push_str("</main>\n</body>\n</html>\n");
    (
        out,
        ReportStats {
            charts,
            checks: check_names.len(),
        },
    )
}

fn seed_text(m: &GroupMeta, r: &Range<u64>) -> String {
    let n = r.end.saturating_sub(r.start);
    if !m.seed_dependent {
        format!(
            "fixed data: the seed does not change this scenario ({})",
            if n == 1 {
                "evaluated once".to_string()
            } else {
                format!("{n} evaluations")
            }
        )
    } else if n == 0 {
        "no seeds in this run (another shard's slice)".into()
    } else {
        format!("seeds {}..{} ({n})", r.start, r.end - 1)
    }
}

fn header(out: &mut String, ctx: &Ctx, sections: &[(String, Vec<usize>)], policies: &[String]) {
    let data = ctx.data;
    let plan = &data.plan;
    let files: Vec<&str> = [
        Some("plan.csv"),
        Some("summary.csv"),
        data.seeds_name.as_deref(),
        data.mutants.as_ref().map(|_| "mutants.csv"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let nclean = plan.iter().filter(|(m, _)| m.mutant.is_empty()).count();
    let nmut = plan.len() - nclean;
    w!(
        out,
        "<p>{} scenario(s), {} clean group(s) (scenario × param × profile){}; read from {}. {}</p>\n",
        sections.len(),
        nclean,
        if nmut > 0 {
            format!(", {nmut} mutant group(s)")
        } else {
            String::new()
        },
        files.join(", "),
        if data.series.is_some() {
            "Charts are histograms of per-seed usage."
        } else {
            "No per-seed file (a --summary-only sweep): charts show worst, p95 and p50 per policy."
        }
    );

    out.push_str("<table class=\"swept\">\n<tr><th class=\"l\">scenario</th><th class=\"l\">asserted comparison</th><th class=\"l\">params</th><th class=\"l\">profiles</th><th class=\"l\">seeds</th><th class=\"l\">policies</th><th class=\"l\">mutants</th></tr>\n");
    for (name, groups) in sections {
        let (mut params, mut profiles, mut pols, mut seeds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &gi in groups {
            let (m, r) = &plan[gi];
            push_unique(&mut params, &m.param);
            push_unique(&mut profiles, &m.profile);
            for p in &m.policies {
                push_unique(&mut pols, p);
            }
            push_unique(&mut seeds, &seed_text(m, r));
        }
        let mut mutants = Vec::new();
        for (m, _) in plan {
            if &m.scenario == name && !m.mutant.is_empty() {
                push_unique(&mut mutants, &m.mutant);
            }
        }
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("<code>{}</code>", escape(s)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        w!(
            out,
            "<tr><td class=\"l\"><code>{}</code></td><td class=\"l\"><code>{}</code></td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>\n",
            escape(name),
            escape(plan[groups[0]].0.asserted.name()),
            list(&params),
            list(&profiles),
            seeds
                .iter()
                .map(|s| escape(s))
                .collect::<Vec<_>>()
                .join("<br>"),
            list(&pols),
            if mutants.is_empty() {
                "—".to_string()
            } else {
                list(&mutants)
            }
        );
    }
    out.push_str("</table>\n");

    out.push_str("<div class=\"legend\">\n<p><b>Usage</b> of an element is |actual − expected| / (atol + rtol·|expected|), in percent; a tensor's usage is the largest over its elements and steps. Above 100 % (the red dashed <b>limit</b> line) the check fails. The x-axes are logarithmic.</p>\n<p><b>Policies:</b>");
    for p in policies {
        w!(
            out,
            "<span class=\"swatch\" style=\"background:{}\"></span><code>{}</code>",
            ctx.colour(p),
            escape(p)
        );
    }
    out.push_str("</p>\n");
    if data.series.is_some() {
        out.push_str("<p><b>Histograms:</b> seeds per log bin (5 per decade), one translucent series per policy; zero usages are counted in the <b>0</b> bar on the left, infinite ones (NaN or infinity mismatches) in the <b>inf</b> bar on the right. Above the plot, one row per policy: ▼ marks the worst seed (hover for seed and step); dashed lines labelled <code>p=1e-2</code>, <code>p=1e-3</code>, <code>p=1e-4</code> with a whisker mark the predicted usage exceeded with that probability per seed and its 95 % confidence interval (tail estimate; hover for details).</p>\n");
    } else {
        out.push_str("<p><b>Quantile charts:</b> one row per policy: ● p50, ■ p95, ▼ worst (hover for the worst seed). p50/p95 of a --summary-only sweep are located in 0.23 % log bins.</p>\n");
    }
    if data.mutants.is_some() {
        out.push_str("<p><b>Mutant margins:</b> for each injected bug, the smallest usage over seeds (above 100 %: caught on every seed, by that factor) and the seeds on which it is detected; <span class=\"swatch\" style=\"background:#dff0d8\"></span>caught on every seed <span class=\"swatch\" style=\"background:#fcf1d0\"></span>missed on some seeds <span class=\"swatch\" style=\"background:#f6d5d5\"></span>missed on every seed.</p>\n");
    }
    out.push_str("</div>\n");

    out.push_str("<nav>\n<h2>Contents</h2>\n<ul>\n");
    for (si, (name, groups)) in verdict::failing_first(ctx, sections) {
        w!(
            out,
            "<li><a href=\"#s{si}\"><code>{}</code></a><ul>\n",
            escape(name)
        );
        for &gi in groups {
            let m = &plan[gi].0;
            w!(
                out,
                "<li>{} <a href=\"#g{gi}\"><code>{}</code> · <code>{}</code></a></li>\n",
                verdict::group_status(ctx, m),
                escape(&m.param),
                escape(&m.profile)
            );
        }
        out.push_str("</ul></li>\n");
    }
    out.push_str("</ul>\n</nav>\n</header>\n");
}

/// One (group, check): heading, chart, notes, summary table, mutant margins.
fn chart_block(out: &mut String, ctx: &Ctx, gi: usize, c: usize, id: usize) {
    let data = ctx.data;
    let m = &data.plan[gi].0;
    let check = &m.checks[c];
    let cmp = m.asserted.name();
    let key = chart_key(&m.scenario, &m.param, &m.profile, check, cmp);
    let summary = data.summary.get(&key);
    w!(
        out,
        "<div class=\"chart\" id=\"c{id}\">\n<h4>{}</h4>\n",
        escape(check)
    );
    match &data.series {
        Some(series) => {
            let s = &series[gi][c];
            histogram(out, ctx, m, c, s);
        }
        None => quantile_chart(out, ctx, m, c, summary),
    }
    summary_table(out, ctx, m, summary);
    if let Some(mutants) = &data.mutants {
        mutant_table(
            out,
            m,
            mutants.get(&key).map(|v| v.as_slice()).unwrap_or(&[]),
        );
    }
    out.push_str("</div>\n");
}

/// Horizontal layout shared by both chart kinds.
struct Frame {
    axis: LogAxis,
    /// The `0` slot `(x0, x1)`, when some value is zero.
    zero: Option<(f64, f64)>,
    /// The `inf` slot, when some value is infinite.
    inf: Option<(f64, f64)>,
}

const W: f64 = 760.0;
const ML: f64 = 44.0;
const MR: f64 = 30.0;
const SLOT: f64 = 30.0;
const GAP: f64 = 16.0;

impl Frame {
    fn new(values: &[f64]) -> Self {
        let has_zero = values.contains(&0.0);
        let has_inf = values.iter().any(|&v| v == f64::INFINITY || v.is_nan());
        let zero = has_zero.then_some((ML, ML + SLOT));
        let inf = has_inf.then_some((W - MR - SLOT, W - MR));
        let x0 = if has_zero { ML + SLOT + GAP } else { ML };
        let x1 = if has_inf { W - MR - SLOT - GAP } else { W - MR };
        Self {
            axis: LogAxis::spanning(values, MAX_DECADES, x0, x1),
            zero,
            inf,
        }
    }

    /// The pixel of any usage: its slot's centre for 0 and +∞, the axis otherwise.
    fn x(&self, v: f64) -> f64 {
        if v == 0.0 {
            if let Some((a, b)) = self.zero {
                return (a + b) / 2.0;
            }
        }
        if v == f64::INFINITY || v.is_nan() {
            if let Some((a, b)) = self.inf {
                return (a + b) / 2.0;
            }
        }
        self.axis.x(v)
    }

    /// x-axis: decade ticks and labels, slot labels, gridlines from `top` to `bottom`, and
    /// the 100 % limit line from `limit_top`, labelled at height `label_y`.
    fn draw_x(&self, out: &mut String, top: f64, bottom: f64, limit_top: f64, label_y: f64) {
        for (x, _, label) in self.axis.ticks() {
            out.push_str(&svg::line(x, top, x, bottom, "class=\"grid\""));
            out.push_str(&svg::line(x, bottom, x, bottom + 4.0, "class=\"axis\""));
            if !label.is_empty() {
                out.push_str(&svg::text(
                    x,
                    bottom + 15.0,
                    &label,
                    "text-anchor=\"middle\"",
                ));
            }
        }
        out.push_str(&svg::line(
            self.axis.x0,
            bottom,
            self.axis.x1,
            bottom,
            "class=\"axis\"",
        ));
        for (slot, label) in [(self.zero, "0"), (self.inf, "inf")] {
            if let Some((a, b)) = slot {
                out.push_str(&svg::line(a, bottom, b, bottom, "class=\"axis\""));
                out.push_str(&svg::text(
                    (a + b) / 2.0,
                    bottom + 15.0,
                    label,
                    "text-anchor=\"middle\"",
                ));
            }
        }
        out.push_str(&svg::text(
            (self.axis.x0 + self.axis.x1) / 2.0,
            bottom + 30.0,
            "usage (log scale)",
            "text-anchor=\"middle\"",
        ));
        let xl = self.axis.x(100.0);
        out.push_str(&format!(
            "<g>{}{}{}</g>",
            svg::title("limit: usage 100 %, above which the check fails"),
            svg::line(xl, limit_top, xl, bottom, "class=\"limit\""),
            svg::text(xl + 3.0, label_y, "limit", "class=\"limit-label\"")
        ));
    }
}

/// The policy legend along the top of a chart.
fn legend(out: &mut String, ctx: &Ctx, policies: &[String], extra: &str) {
    let mut x = ML;
    for p in policies {
        w!(
            out,
            "<rect x=\"{}\" y=\"6\" width=\"10\" height=\"10\" fill=\"{}\"/>",
            num(x),
            ctx.colour(p)
        );
        out.push_str(&svg::text(x + 14.0, 15.0, p, ""));
        x += 14.0 + 7.0 * p.chars().count() as f64 + 16.0;
    }
    if !extra.is_empty() {
        out.push_str(&svg::text(W - 4.0, 15.0, extra, "text-anchor=\"end\""));
    }
}

fn fmt_p(p: f64) -> String {
    let e = p.log10().round() as i32;
    if (10f64.powi(e) - p).abs() <= 1e-12 * p {
        format!("1e{e}")
    } else {
        py_repr(p)
    }
}

/// The per-seed histogram of one (group, check).
fn histogram(out: &mut String, ctx: &Ctx, m: &GroupMeta, c: usize, series: &[Series]) {
    let policies = &m.policies;
    let np = policies.len();
    let tails: Vec<Vec<TailMarker>> = series.iter().map(|s| tail_markers(&s.usages)).collect();
    let mut values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.usages.iter().copied())
        .collect();
    values.extend(
        tails
            .iter()
            .flatten()
            .map(|t| t.value)
            .filter(|v| v.is_finite()),
    );
    let f = Frame::new(&values);
    let n_seeds = series.iter().map(|s| s.usages.len()).max().unwrap_or(0);

    let row_h = 12.0;
    let band_top = 24.0;
    let plot_top = band_top + row_h * np as f64 + 6.0;
    let plot_h = 150.0;
    let bottom = plot_top + plot_h;
    let h = bottom + 38.0;

    // Counts.
    let nb = f.axis.bins(PER_DECADE);
    let mut counts: Vec<(Vec<u64>, u64, u64)> = Vec::with_capacity(np);
    for s in series {
        let mut bins = vec![0u64; nb];
        let (mut zeros, mut infs) = (0u64, 0u64);
        for &v in &s.usages {
            if v == 0.0 {
                zeros += 1;
            } else if v == f64::INFINITY || v.is_nan() {
                infs += 1;
            } else if let Some(b) = f.axis.bin(v, PER_DECADE) {
                bins[b] += 1;
            }
        }
        counts.push((bins, zeros, infs));
    }
    let max = counts
        .iter()
        .flat_map(|(b, z, i)| b.iter().copied().chain([*z, *i]))
        .max()
        .unwrap_or(0);
    let top = svg::nice_ceil(max) as f64;
    let y = |k: u64| bottom - k as f64 / top * plot_h;

    out.push_str(&svg::open(
        W,
        h,
        &format!(
            "class=\"hist\" data-chart=\"hist\" role=\"img\" aria-label=\"{}\"",
            escape(&format!("histogram of per-seed usage of {}", m.checks[c]))
        ),
    ));
    let tail_key = if tails.iter().any(|t| !t.is_empty()) {
        " · dashed: tail p = 1e-2, 1e-3, 1e-4"
    } else {
        ""
    };
    legend(
        out,
        ctx,
        policies,
        &format!("{n_seeds} seed(s) · ▼ worst{tail_key}"),
    );

    // y axis: 0, half, top.
    for k in [0.0, 0.5, 1.0] {
        let v = top * k;
        if v.fract() != 0.0 {
            continue;
        }
        let yy = bottom - k * plot_h;
        out.push_str(&svg::line(ML - 3.0, yy, W - MR, yy, "class=\"grid\""));
        out.push_str(&svg::text(
            ML - 5.0,
            yy + 4.0,
            &format!("{}", v as u64),
            "text-anchor=\"end\"",
        ));
    }
    out.push_str(&svg::text(
        12.0,
        plot_top + plot_h / 2.0,
        "seeds",
        &format!(
            "text-anchor=\"middle\" transform=\"rotate(-90 12 {})\"",
            num(plot_top + plot_h / 2.0)
        ),
    ));
    out.push_str(&svg::line(
        ML - 3.0,
        plot_top,
        ML - 3.0,
        bottom,
        "class=\"axis\"",
    ));
    f.draw_x(out, plot_top, bottom, band_top - 4.0, plot_top + 11.0);

    // Bars.
    for (p, (bins, zeros, infs)) in counts.iter().enumerate() {
        let col = ctx.colour(&policies[p]);
        let mut bars: Vec<Bar> = bins
            .iter()
            .enumerate()
            .filter(|(_, &k)| k > 0)
            .map(|(i, &k)| {
                let (lo, hi) = f.axis.bin_edges(i, PER_DECADE);
                Bar {
                    x0: f.axis.x(lo),
                    x1: f.axis.x(hi),
                    y: y(k),
                }
            })
            .collect();
        // Slots are split between the policies so that each stays visible.
        for (slot, k) in [(f.zero, *zeros), (f.inf, *infs)] {
            if let (Some((a, b)), true) = (slot, k > 0) {
                let wdt = (b - a) / np as f64;
                bars.push(Bar {
                    x0: a + wdt * p as f64,
                    x1: a + wdt * (p + 1) as f64,
                    y: y(k),
                });
            }
        }
        let s = &series[p];
        let above = s.usages.iter().filter(|&&v| v > 100.0).count();
        w!(
            out,
            "<path d=\"{}\" fill=\"{col}\" fill-opacity=\"0.3\" stroke=\"{col}\" stroke-width=\"1\">{}</path>",
            svg::bars_path(&bars, bottom),
            svg::title(&format!(
                "{}: {} seed(s), {} above the limit, {} zero, {} infinite",
                policies[p],
                s.usages.len(),
                above,
                zeros,
                infs
            ))
        );
    }

    // Marker rows: worst seed and tail predictions.
    for (p, s) in series.iter().enumerate() {
        let col = ctx.colour(&policies[p]);
        let yr = band_top + row_h * p as f64 + row_h / 2.0;
        out.push_str(&svg::line(
            f.axis.x0,
            yr,
            f.axis.x1,
            yr,
            "stroke=\"#f3f3f3\"",
        ));
        // Each marker is labelled with its p (`1e-3`) in the row, right of its line; a
        // label that would overlap the one before it is left to the hover text.
        let mut label_end = f64::NEG_INFINITY;
        for t in &tails[p] {
            let x = f.x(t.value);
            let (xl, xh) = (f.x(t.lo.max(0.0)), f.x(t.hi));
            let label = format!("p={}", fmt_p(t.p));
            let lw = 5.0 * label.len() as f64;
            let text = if x + 2.0 >= label_end + 2.0 && x + 2.0 + lw <= W {
                label_end = x + 2.0 + lw;
                svg::text(
                    x + 2.0,
                    yr + 3.0,
                    &label,
                    &format!("class=\"tail-label\" style=\"fill:{col}\""),
                )
            } else {
                String::new()
            };
            w!(
                out,
                "<g>{}{}{}{text}</g>",
                svg::title(&format!(
                    "{}: usage exceeded with probability {} per seed: {} (95 % CI {} – {}), {} tail estimate from {} seeds",
                    policies[p],
                    fmt_p(t.p),
                    pct(t.value),
                    pct(t.lo),
                    pct(t.hi),
                    t.method,
                    s.usages.len()
                )),
                svg::line(xl, yr, xh, yr, &format!("stroke=\"{col}\" stroke-width=\"1\"")),
                svg::line(
                    x,
                    yr - 5.0,
                    x,
                    bottom,
                    &format!("stroke=\"{col}\" stroke-width=\"1.2\" stroke-dasharray=\"3 2\" stroke-opacity=\"0.7\"")
                )
            );
        }
        if let Some((v, seed, step)) = &s.worst {
            let x = f.x(*v);
            w!(
                out,
                "<path d=\"{}\" fill=\"{col}\">{}</path>",
                svg::down_triangle(x, yr + 4.0, 4.0),
                svg::title(&format!(
                    "{}: worst usage {} at seed {seed}, step {step}",
                    policies[p],
                    pct(*v)
                ))
            );
        }
    }
    if n_seeds == 0 {
        out.push_str(&svg::text(
            (f.axis.x0 + f.axis.x1) / 2.0,
            plot_top + plot_h / 2.0,
            "no seeds in this run",
            "text-anchor=\"middle\"",
        ));
    }
    out.push_str("</svg>\n");

    // Notes: counts and tail numbers per policy.
    let mut notes = Vec::new();
    for (p, s) in series.iter().enumerate() {
        let (_, zeros, infs) = &counts[p];
        let above = s.usages.iter().filter(|&&v| v > 100.0).count();
        let mut t = format!(
            "<code>{}</code>: {} seed(s), <span class=\"{}\">{} above the limit</span>",
            escape(&policies[p]),
            s.usages.len(),
            if above > 0 { "bad" } else { "ok" },
            above
        );
        if *zeros > 0 {
            w!(t, ", {zeros} with zero usage");
        }
        if *infs > 0 {
            w!(t, ", <span class=\"bad\">{infs} infinite</span>");
        }
        if let Some((v, seed, step)) = &s.worst {
            w!(
                t,
                "; worst {} at seed {seed} step {}",
                escape(&pct(*v)),
                escape(step)
            );
        }
        notes.push(t);
    }
    w!(out, "<p class=\"note\">{}.</p>\n", notes.join("; "));
    if values.iter().any(|&v| v > 0.0 && v < 10f64.powi(f.axis.lo)) {
        w!(
            out,
            "<p class=\"note\">Usages below {} are drawn in the first bin.</p>\n",
            escape(&svg::decade_label(f.axis.lo))
        );
    }
    let mut tail_notes = Vec::new();
    for (p, ts) in tails.iter().enumerate() {
        if ts.is_empty() {
            continue;
        }
        let pts: Vec<String> = ts
            .iter()
            .map(|t| {
                format!(
                    "p = {}: {} [{}, {}]",
                    fmt_p(t.p),
                    escape(&pct(t.value)),
                    escape(&pct(t.lo)),
                    escape(&pct(t.hi))
                )
            })
            .collect();
        tail_notes.push(format!(
            "<code>{}</code> ({}): {}",
            escape(&policies[p]),
            ts[0].method,
            pts.join(", ")
        ));
    }
    if !tail_notes.is_empty() {
        w!(
            out,
            "<p class=\"note\">Tail: usage exceeded with probability p per seed [95 % CI] — {}.</p>\n",
            tail_notes.join("; ")
        );
    } else if n_seeds > 0 && n_seeds < MIN_TAIL_SEEDS {
        w!(
            out,
            "<p class=\"note\">Tail: not estimated (fewer than {MIN_TAIL_SEEDS} seeds).</p>\n"
        );
    }
}

/// The worst / p95 / p50 chart of one (group, check), from the summary (no seeds.csv).
fn quantile_chart(
    out: &mut String,
    ctx: &Ctx,
    m: &GroupMeta,
    c: usize,
    summary: Option<&BTreeMap<String, SummaryIn>>,
) {
    let policies = &m.policies;
    let rows: Vec<Option<&SummaryIn>> = policies
        .iter()
        .map(|p| summary.and_then(|s| s.get(p)))
        .collect();
    let values: Vec<f64> = rows
        .iter()
        .flatten()
        .filter(|r| r.seeds > 0)
        .flat_map(|r| [r.worst_usage_pct, r.p95_usage_pct, r.p50_usage_pct])
        .collect();
    let f = Frame::new(&values);
    let row_h = 18.0;
    let top = 26.0;
    let bottom = top + row_h * policies.len().max(1) as f64 + 4.0;
    let h = bottom + 38.0;
    out.push_str(&svg::open(
        W,
        h,
        &format!(
            "class=\"quantiles\" data-chart=\"quantiles\" role=\"img\" aria-label=\"{}\"",
            escape(&format!("worst, p95 and p50 usage of {}", m.checks[c]))
        ),
    ));
    legend(out, ctx, policies, "● p50  ■ p95  ▼ worst");
    f.draw_x(out, top, bottom, top - 4.0, top + 5.0);
    for (p, row) in rows.iter().enumerate() {
        let col = ctx.colour(&policies[p]);
        let yr = top + row_h * p as f64 + row_h / 2.0 + 2.0;
        let Some(r) = row.filter(|r| r.seeds > 0) else {
            out.push_str(&svg::text(
                f.axis.x0 + 4.0,
                yr + 4.0,
                &format!("{}: no summary", policies[p]),
                "",
            ));
            continue;
        };
        let (x50, x95, xw) = (
            f.x(r.p50_usage_pct),
            f.x(r.p95_usage_pct),
            f.x(r.worst_usage_pct),
        );
        out.push_str(&svg::line(
            x50,
            yr,
            xw,
            yr,
            &format!("stroke=\"{col}\" stroke-width=\"2\""),
        ));
        w!(
            out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{col}\">{}</circle>",
            num(x50),
            num(yr),
            svg::title(&format!("{}: p50 {}", policies[p], pct(r.p50_usage_pct)))
        );
        w!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"8\" height=\"8\" fill=\"{col}\">{}</rect>",
            num(x95 - 4.0),
            num(yr - 4.0),
            svg::title(&format!("{}: p95 {}", policies[p], pct(r.p95_usage_pct)))
        );
        w!(
            out,
            "<path d=\"{}\" fill=\"{col}\" stroke=\"#fff\" stroke-width=\"0.5\">{}</path>",
            svg::down_triangle(xw, yr + 5.0, 5.0),
            svg::title(&format!(
                "{}: worst usage {} at seed {}, step {} ({} of {} seeds above the limit)",
                policies[p],
                pct(r.worst_usage_pct),
                r.worst_seed,
                r.worst_step,
                r.failing_seeds,
                r.seeds
            ))
        );
    }
    out.push_str("</svg>\n");
}

fn cell(x: f64) -> String {
    format!(
        "<td title=\"{}\">{}</td>",
        escape(&py_repr(x)),
        escape(&pct(x))
    )
}

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !x.is_finite() {
        py_repr(x)
    } else {
        format!("{x:.3e}")
    }
}

/// A magnitude with four decimals (`13.2901`), as the terminal table shows it.
fn fixed4(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        py_repr(x)
    }
}

/// The summary rows of the asserted comparison.
fn summary_table(
    out: &mut String,
    ctx: &Ctx,
    m: &GroupMeta,
    summary: Option<&BTreeMap<String, SummaryIn>>,
) {
    out.push_str("<table class=\"summary\">\n<tr><th class=\"l\">policy</th><th>atol</th><th>rtol</th><th>seeds</th><th>failing</th><th>worst</th><th>at seed@step</th><th>p50</th><th>p95</th><th>max |diff|</th><th>max |expected|</th><th>nonfinite</th><th class=\"l\">quantiles</th></tr>\n");
    for p in &m.policies {
        let Some(r) = summary.and_then(|s| s.get(p)) else {
            w!(
                out,
                "<tr><td class=\"l\"><code>{}</code></td><td colspan=\"12\" class=\"l\">no row in summary.csv</td></tr>\n",
                escape(p)
            );
            continue;
        };
        w!(
            out,
            "<tr><td class=\"l\"><span class=\"swatch\" style=\"background:{}\"></span><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td>{}<td>{}@{}</td>{}{}<td>{}</td><td>{}</td><td{}>{}</td><td class=\"l\">{}</td></tr>\n",
            ctx.colour(p),
            escape(p),
            escape(&py_repr(r.atol)),
            escape(&py_repr(r.rtol)),
            r.seeds,
            if r.failing_seeds > 0 { " class=\"bad\"" } else { "" },
            r.failing_seeds,
            cell(r.worst_usage_pct),
            r.worst_seed,
            escape(&r.worst_step.to_string()),
            cell(r.p50_usage_pct),
            cell(r.p95_usage_pct),
            escape(&sci(r.max_abs_diff)),
            escape(&fixed4(r.max_abs_expected)),
            if r.nonfinite_seeds > 0 { " class=\"bad\"" } else { "" },
            r.nonfinite_seeds,
            escape(&r.quantile_method)
        );
    }
    out.push_str("</table>\n");
}

/// The mutants' margins of one (group, check): rows = mutants, columns = policies.
fn mutant_table(out: &mut String, m: &GroupMeta, rows: &[MutantIn]) {
    if rows.is_empty() {
        return;
    }
    let mut mutants: Vec<String> = Vec::new();
    let mut cells: BTreeMap<(String, String), &MutantIn> = BTreeMap::new();
    for r in rows {
        push_unique(&mut mutants, &r.mutant);
        cells
            .entry((r.mutant.clone(), r.policy.clone()))
            .or_insert(r);
    }
    out.push_str(
        "<table class=\"mutants\">\n<tr><th class=\"l\">mutant: min usage · seeds detected</th>",
    );
    for p in &m.policies {
        w!(out, "<th><code>{}</code></th>", escape(p));
    }
    out.push_str("</tr>\n");
    for mu in &mutants {
        w!(out, "<tr><td class=\"l\"><code>{}</code></td>", escape(mu));
        for p in &m.policies {
            match cells.get(&(mu.clone(), p.clone())) {
                None => out.push_str("<td>—</td>"),
                Some(r) => {
                    let (class, word) = if r.seeds > 0 && r.detected_seeds >= r.seeds {
                        ("caught", "caught on every seed")
                    } else if r.detected_seeds > 0 {
                        ("partial", "missed on some seeds")
                    } else {
                        ("missed", "missed on every seed")
                    };
                    w!(
                        out,
                        "<td class=\"{class}\" title=\"{}\">{} · {}/{}</td>",
                        escape(&format!(
                            "{word}: smallest usage over seeds {} %",
                            py_repr(r.min_usage_pct)
                        )),
                        escape(&pct(r.min_usage_pct)),
                        r.detected_seeds,
                        r.seeds
                    );
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}
