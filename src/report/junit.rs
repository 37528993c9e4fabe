//! The verdict as JUnit XML (`--junit-xml FILE`), the format CI systems (Jenkins, GitLab,
//! GitHub test reporters) read: one `<testsuite>` per (scenario, param, profile), one
//! `<testcase>` per check and policy in the comparison the test asserts, and one per mutant
//! and policy. A case fails when the check exceeds its tolerance on some seed, fails a gate
//! (`--max-flake-rate`), or, for a mutant, when the bug escapes on some seed; its
//! `<failure>` holds torch's mismatch message at the worst seed and the `seedsweep repro`
//! command. Follows the common JUnit schema (Jenkins' `junit-10.xsd`); no `time` or
//! `timestamp` attributes, so the bytes are a function of the verdict alone.

use std::fmt::Write as _;

use crate::report::verdict::{pct, Case, MutantCase, Verdict};

/// XML text or attribute value, escaped; characters XML 1.0 cannot hold become U+FFFD.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Whether the case is a failed test case.
fn case_fails(c: &Case) -> bool {
    c.exceeds() || !c.failures.is_empty()
}

fn case_xml(out: &mut String, c: &Case) {
    let _ = write!(
        out,
        "    <testcase name=\"{} policy={}\" classname=\"seedsweep.{}.{}.{}\"",
        esc(&c.check),
        esc(&c.policy),
        esc(&c.scenario),
        esc(&c.param),
        esc(&c.profile)
    );
    if !case_fails(c) {
        let _ = writeln!(
            out,
            "><system-out>worst {} at seed {} step {} over {} seed(s)</system-out></testcase>",
            pct(c.worst_usage_pct),
            c.worst_seed,
            c.worst_step,
            c.seeds
        );
        return;
    }
    let mut why = c.failures.clone();
    if why.is_empty() {
        why.push(format!(
            "exceeds its tolerance on {} of {} seeds, worst {} at seed {} step {}",
            c.failing_seeds,
            c.seeds,
            pct(c.worst_usage_pct),
            c.worst_seed,
            c.worst_step
        ));
    }
    let mut body = String::new();
    if let Some(m) = &c.message {
        body.push_str(m);
        body.push_str("\n\n");
    }
    let _ = write!(
        body,
        "failing seeds: {}{}\nrepro: {}\n",
        c.failing_seed_list
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        if c.failing_seeds > c.failing_seed_list.len() {
            format!(" ... ({} in all)", c.failing_seeds)
        } else {
            String::new()
        },
        c.repro
    );
    let _ = writeln!(
        out,
        ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
        esc(&why.join("; ")),
        if c.exceeds() {
            "exceeded"
        } else {
            "flake-rate"
        },
        esc(&body)
    );
}

fn mutant_xml(out: &mut String, m: &MutantCase) {
    let _ = write!(
        out,
        "    <testcase name=\"mutant {} caught policy={}\" classname=\"seedsweep.{}.{}.{}\"",
        esc(&m.mutant),
        esc(&m.policy),
        esc(&m.scenario),
        esc(&m.param),
        esc(&m.profile)
    );
    if !m.missed() {
        let _ = writeln!(
            out,
            "><system-out>caught on {}/{} seeds</system-out></testcase>",
            m.caught_seeds, m.seeds
        );
        return;
    }
    let _ = writeln!(
        out,
        ">\n      <failure message=\"{}\" type=\"missed-mutant\">checks that miss it on some seed: {}</failure>\n    </testcase>",
        esc(&format!(
            "the test catches {} on {}/{} seeds",
            m.mutant, m.caught_seeds, m.seeds
        )),
        esc(&m.checks_missing.join(" "))
    );
}

/// One `<testsuite>`: its (scenario, param, profile), check cases and mutant cases.
type Suite<'a> = (
    (&'a str, &'a str, &'a str),
    Vec<&'a Case>,
    Vec<&'a MutantCase>,
);

/// The JUnit XML document of `v`.
pub fn to_junit(v: &Verdict) -> String {
    // Suites by (scenario, param, profile), in case order.
    let mut suites: Vec<Suite> = Vec::new();
    for c in v.cases.iter().filter(|c| c.asserted) {
        let k = (c.scenario.as_str(), c.param.as_str(), c.profile.as_str());
        match suites.iter_mut().find(|s| s.0 == k) {
            Some(s) => s.1.push(c),
            None => suites.push((k, vec![c], Vec::new())),
        }
    }
    for m in &v.mutants {
        let k = (m.scenario.as_str(), m.param.as_str(), m.profile.as_str());
        match suites.iter_mut().find(|s| s.0 == k) {
            Some(s) => s.2.push(m),
            None => suites.push((k, Vec::new(), vec![m])),
        }
    }
    let total: usize = suites.iter().map(|s| s.1.len() + s.2.len()).sum();
    let failures: usize = suites
        .iter()
        .map(|s| {
            s.1.iter().filter(|c| case_fails(c)).count() + s.2.iter().filter(|m| m.missed()).count()
        })
        .sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"seedsweep {}\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\">",
        v.command
    );
    for ((scenario, param, profile), cases, mutants) in &suites {
        let f = cases.iter().filter(|c| case_fails(c)).count()
            + mutants.iter().filter(|m| m.missed()).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{} [{}] {}\" tests=\"{}\" failures=\"{f}\" errors=\"0\" skipped=\"0\">",
            esc(scenario),
            esc(param),
            esc(profile),
            cases.len() + mutants.len()
        );
        for c in cases {
            case_xml(&mut out, c);
        }
        for m in mutants {
            mutant_xml(&mut out, m);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
