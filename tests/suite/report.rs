//! The HTML report, checked structurally (no browser): one histogram per clean
//! (scenario, param, profile, check), well-formed inline SVG, no network references,
//! deterministic bytes, and a summary-only directory.

use std::collections::BTreeSet;
use std::path::Path;

use assert_cmd::Command;
use seedsweep::report::html::write_report;

fn sweep(dir: &Path, extra: &[&str]) {
    Command::cargo_bin("seedsweep")
        .expect("binary is built by cargo test")
        .args(["sweep", "--seeds", "30", "--quiet"])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .assert()
        .success();
}

/// The distinct clean (scenario, param, profile, check) of `plan.csv`, and all check names.
fn clean_charts(dir: &Path) -> (BTreeSet<Vec<String>>, BTreeSet<String>) {
    let mut r = csv::Reader::from_path(dir.join("plan.csv")).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|x| x == n).unwrap();
    let (sc, pa, pr, mu, ch) = (
        col("scenario"),
        col("param"),
        col("profile"),
        col("mutant"),
        col("check"),
    );
    let mut keys = BTreeSet::new();
    let mut checks = BTreeSet::new();
    for row in r.records() {
        let row = row.unwrap();
        if row[mu].is_empty() {
            keys.insert(vec![
                row[sc].to_string(),
                row[pa].to_string(),
                row[pr].to_string(),
                row[ch].to_string(),
            ]);
            checks.insert(row[ch].to_string());
        }
    }
    (keys, checks)
}

/// The `<svg ...>...</svg>` blocks of `html`.
fn svg_blocks(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("<svg") {
        let end = rest[i..].find("</svg>").expect("unclosed <svg>") + i + "</svg>".len();
        out.push(&rest[i..end]);
        rest = &rest[end..];
    }
    out
}

/// Checks that `xml` is well formed enough for an XML parser: balanced, properly nested
/// tags, quoted attributes without raw `<`, and `&` only in entities.
fn assert_well_formed(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let b = xml.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => {
                let end = xml[i..].find('>').expect("unterminated tag") + i;
                let tag = &xml[i + 1..end];
                assert!(!tag.contains('<'), "`<` inside tag: {tag}");
                assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes: {tag}");
                if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().unwrap_or_else(|| panic!("stray </{name}>"));
                    assert_eq!(open, name.trim(), "misnested tags");
                } else if !tag.ends_with('/') {
                    let name = tag.split_whitespace().next().unwrap().to_string();
                    stack.push(name);
                }
                i = end + 1;
            }
            b'&' => {
                let end = xml[i..].find(';').expect("bare &") + i;
                let ent = &xml[i + 1..end];
                assert!(
                    ["amp", "lt", "gt", "quot", "#39"].contains(&ent),
                    "unknown entity &{ent};"
                );
                i = end + 1;
            }
            b'>' => panic!("bare > at {i}"),
            _ => i += 1,
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

fn assert_offline(html: &str) {
    let stripped = html.replace("http://www.w3.org/2000/svg", "");
    assert!(!stripped.contains("http://"), "network reference");
    assert!(!stripped.contains("https://"), "network reference");
    assert!(!html.contains("<script"), "script");
    assert!(!html.contains("<link"), "external stylesheet");
    assert!(!html.contains("<img"), "image");
}

#[test]
fn report_of_a_full_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    sweep(&dir, &["--mutants", "all"]);
    let out = tmp.path().join("report.html");
    let stats = write_report(&dir, &out).unwrap();
    let html = std::fs::read_to_string(&out).unwrap();

    let (keys, checks) = clean_charts(&dir);
    assert_eq!(stats.charts, keys.len());
    assert_eq!(stats.checks, checks.len());
    assert_eq!(html.matches("data-chart=\"hist\"").count(), keys.len());
    assert_eq!(html.matches("data-chart=\"quantiles\"").count(), 0);

    let svgs = svg_blocks(&html);
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    assert_eq!(svgs.len(), keys.len());
    for s in &svgs {
        let open = &s[..s.find('>').unwrap()];
        assert!(open.contains("viewBox=\"0 0 "), "no viewBox: {open}");
        assert_well_formed(s);
        assert_eq!(s.matches("class=\"limit\"").count(), 1, "one limit line");
        assert!(s.contains(">limit</text>"));
        assert!(s.contains("worst usage"), "worst marker");
    }
    assert_offline(&html);
    for c in &checks {
        assert!(html.contains(&format!("<h4>{c}</h4>")), "check {c}");
    }
    // Mutant margins are present. Tail markers are not: 30 seeds support no tail point
    // (an empirical one at 1e-2 needs 368 seeds, a GPD at least 100), and the report never
    // draws an empirical quantile beyond the data.
    assert!(html.contains("class=\"mutants\""));
    assert!(html.contains("td class=\"caught\""));
    assert!(!html.contains("exceeded with probability 1e-3"));

    // Deterministic: a second write gives the same bytes.
    let out2 = tmp.path().join("report2.html");
    assert_eq!(write_report(&dir, &out2).unwrap(), stats);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&out2).unwrap());
    // No temporary file left behind.
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
}

#[test]
fn report_of_a_summary_only_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    sweep(&dir, &["--summary-only"]);
    assert!(!dir.join("seeds.csv").exists());
    let out = tmp.path().join("report.html");
    let stats = write_report(&dir, &out).unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    let (keys, checks) = clean_charts(&dir);
    assert_eq!(stats.charts, keys.len());
    assert_eq!(html.matches("data-chart=\"quantiles\"").count(), keys.len());
    assert_eq!(html.matches("data-chart=\"hist\"").count(), 0);
    for s in svg_blocks(&html) {
        assert!(s.contains("viewBox="));
        assert_well_formed(s);
        assert_eq!(s.matches("class=\"limit\"").count(), 1);
    }
    assert_offline(&html);
    for c in &checks {
        assert!(html.contains(&format!("<h4>{c}</h4>")));
    }
    assert!(!html.contains("class=\"mutants\""));
}

/// A hand-written directory with odd values: names that need escaping, zero and infinite
/// usages, an empty seed slice; and malformed files give errors naming them.
#[test]
fn odd_input_is_escaped_and_errors_name_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let plan = "scenario,param,profile,mutant,asserted,seed_dependent,first_seed,seeds,check,comparison,policy,atol,rtol\n";
    let mut p = String::from(plan);
    for cmp in ["sharded-vs-ref", "ref-vs-f64", "sharded-vs-f64"] {
        p.push_str(&format!(
            "a<b&c,x\"y,cpu,,sharded-vs-ref,true,0,3,ch<1>,{cmp},pol&1,1e-6,1e-5\n"
        ));
    }
    for cmp in ["sharded-vs-ref", "ref-vs-f64", "sharded-vs-f64"] {
        p.push_str(&format!(
            "empty,q,cpu,,sharded-vs-ref,true,5,0,c2,{cmp},old,1e-6,1e-5\n"
        ));
    }
    std::fs::write(dir.join("plan.csv"), &p).unwrap();
    let summary_h = "scenario,param,profile,check,comparison,policy,atol,rtol,seeds,failing_seeds,worst_usage_pct,worst_seed,worst_step,p50_usage_pct,p95_usage_pct,max_abs_diff,max_abs_expected,nonfinite_seeds,mutant,quantile_method\n";
    let mut s = String::from(summary_h);
    s.push_str("a<b&c,\"x\"\"y\",cpu,ch<1>,sharded-vs-ref,pol&1,1e-06,1e-05,3,1,inf,1,0,0.0,inf,inf,1.0,1,,exact\n");
    std::fs::write(dir.join("summary.csv"), &s).unwrap();
    let seeds_h = "scenario,param,profile,seed,check,comparison,policy,usage_pct,max_abs_diff,step,micro_step,mismatched,elements,nonfinite,max_abs_expected,mutant\n";
    let mut sd = String::from(seeds_h);
    for (seed, u) in [(0, "0.0"), (1, "inf"), (2, "0.0")] {
        for cmp in ["sharded-vs-ref", "ref-vs-f64", "sharded-vs-f64"] {
            sd.push_str(&format!(
                "a<b&c,\"x\"\"y\",cpu,{seed},ch<1>,{cmp},pol&1,{u},0.0,0,-1,0,4,0,1.0,\n"
            ));
        }
    }
    std::fs::write(dir.join("seeds.csv"), &sd).unwrap();

    let out = dir.join("r.html");
    let stats = write_report(dir, &out).unwrap();
    assert_eq!(stats.charts, 2);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("a&lt;b&amp;c"));
    assert!(html.contains("ch&lt;1&gt;"));
    assert!(html.contains("pol&amp;1"));
    assert!(!html.contains("a<b"));
    assert!(html.contains("no seeds in this run"));
    for s in svg_blocks(&html) {
        assert_well_formed(s);
    }
    assert!(html.contains(">inf</text>"), "infinite slot");
    assert!(html.contains(">0</text>"), "zero slot");

    // Summary-only view of the same directory.
    std::fs::remove_file(dir.join("seeds.csv")).unwrap();
    write_report(dir, &out).unwrap();
    for s in svg_blocks(&std::fs::read_to_string(&out).unwrap()) {
        assert_well_formed(s);
    }

    // Malformed summary: the error names the file and row.
    std::fs::write(
        dir.join("summary.csv"),
        format!("{summary_h}a,b,c,d,e,f,notanumber\n"),
    )
    .unwrap();
    let err = format!("{:#}", write_report(dir, &out).unwrap_err());
    assert!(err.contains("summary.csv"), "{err}");
    assert!(err.contains("row 2"), "{err}");

    // Missing plan.
    std::fs::remove_file(dir.join("plan.csv")).unwrap();
    let err = format!("{:#}", write_report(dir, &out).unwrap_err());
    assert!(err.contains("plan.csv"), "{err}");
}

/// The first thing in the page is the verdict: the verdict line and the grid (scenario ×
/// check × policy, failing rows first, each cell linking to a chart), before any other table
/// or chart; the contents list carries each group's status; a failing group shows its repro
/// command and, once `size` has run, the recommended tolerance next to the current one; the
/// tail markers are labelled in the chart.
#[test]
fn the_report_answers_first_with_a_verdict_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    Command::cargo_bin("seedsweep")
        .unwrap()
        .args(["sweep", "--seeds", "400", "--quiet", "--scenario"])
        .args(["deepspeed-tied-row-parallel", "--out"])
        .arg(&dir)
        .assert()
        .success();
    Command::cargo_bin("seedsweep")
        .unwrap()
        .args(["size", "-q"])
        .arg(&dir)
        .assert()
        .success();
    let out = tmp.path().join("r.html");
    write_report(&dir, &out).unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    let grid = html.find("<table class=\"grid\" id=\"verdict\">").unwrap();
    let line = html.find("<p class=\"verdict-line fail\">").unwrap();
    for first in ["<table class=\"swept\">", "<svg", "<nav>"] {
        assert!(line < grid && grid < html.find(first).unwrap(), "{first}");
    }
    // Grid rows: the failing (logits under `old`: 400 seeds of T1 exceed on some) first.
    let table = &html[grid..grid + html[grid..].find("</table>").unwrap()];
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 4, "T1's four checks");
    assert!(rows[0].contains("<code>logits</code>") && rows[0].contains("class=\"fail\""));
    for r in &rows[1..] {
        assert!(!r.contains("class=\"fail\""), "{r}");
    }
    // Every cell links to a chart that exists.
    for id in table.split("href=\"#c").skip(1) {
        let id = &id[..id.find('"').unwrap()];
        assert!(html.contains(&format!("id=\"c{id}\"")), "chart c{id}");
    }
    // Contents with status; a failbox with the repro command and the recommendation.
    assert!(html.contains("<span class=\"st-fail\">✗ 1 failing</span>"));
    let boxes = html.matches("<div class=\"failbox\">").count();
    assert_eq!(
        boxes, 4,
        "each T1 param's logits fail under `old` on some of 400 seeds"
    );
    assert!(html
        .contains("Repro: <code>seedsweep repro --scenario deepspeed-tied-row-parallel --param "));
    assert!(html.contains("Tolerance now: atol=1e-06, rtol=1e-05; recommended by <code>size</code>: atol-at-torch-rtol atol="));
    // 400 seeds: an empirical 1e-2 point (n >= 368) and GPD points; each labelled.
    assert!(html.contains(">p=1e-2</text>"));
}
