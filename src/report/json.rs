//! The verdict as JSON (`--json FILE|-`), documented in `docs/verdict-json.md` and versioned
//! by [`crate::report::verdict::SCHEMA_VERSION`]. Written by hand (no JSON dependency): keys in a
//! fixed order, floats as Python's `repr` digits (valid JSON numbers), a usage that is
//! infinite as the string `"inf"`, and a value that is not available as `null`; so the bytes
//! are a function of the verdict alone.

use std::fmt::Write as _;

use crate::report::verdict::{Case, MutantCase, Verdict, SCHEMA_VERSION};

/// A JSON string literal.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A float: its `repr` digits, `"inf"` / `"-inf"` for an infinity, `null` for NaN.
fn float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("null");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "\"inf\"" } else { "\"-inf\"" });
    } else {
        out.push_str(&crate::check::python_repr::py_repr(x));
    }
}

/// Writes `"key": ` (after a comma unless first).
fn key(out: &mut String, first: &mut bool, k: &str, indent: usize) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', indent));
    string(out, k);
    out.push_str(": ");
}

fn strings(out: &mut String, v: &[String]) {
    out.push('[');
    for (i, s) in v.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        string(out, s);
    }
    out.push(']');
}

fn case(out: &mut String, c: &Case) {
    let i = 6;
    let mut f = true;
    out.push('{');
    for (k, v) in [
        ("scenario", &c.scenario),
        ("param", &c.param),
        ("profile", &c.profile),
        ("check", &c.check),
    ] {
        key(out, &mut f, k, i);
        string(out, v);
    }
    key(out, &mut f, "comparison", i);
    string(out, c.comparison.name());
    key(out, &mut f, "asserted", i);
    out.push_str(if c.asserted { "true" } else { "false" });
    key(out, &mut f, "policy", i);
    string(out, &c.policy);
    key(out, &mut f, "status", i);
    string(
        out,
        if !c.failures.is_empty() {
            "fail"
        } else if c.exceeds() {
            "exceeds"
        } else {
            "pass"
        },
    );
    key(out, &mut f, "atol", i);
    float(out, c.tolerance.atol);
    key(out, &mut f, "rtol", i);
    float(out, c.tolerance.rtol);
    key(out, &mut f, "seeds", i);
    let _ = write!(out, "{}", c.seeds);
    key(out, &mut f, "worst_usage_pct", i);
    float(out, c.worst_usage_pct);
    key(out, &mut f, "worst_seed", i);
    let _ = write!(out, "{}", c.worst_seed);
    key(out, &mut f, "worst_step", i);
    let _ = write!(out, "{}", c.worst_step.step);
    key(out, &mut f, "worst_micro_step", i);
    let _ = write!(out, "{}", crate::results::csv::micro_step(c.worst_step));
    key(out, &mut f, "failing_seeds", i);
    let _ = write!(out, "{}", c.failing_seeds);
    key(out, &mut f, "failing_seed_list", i);
    out.push('[');
    for (j, s) in c.failing_seed_list.iter().enumerate() {
        if j > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{s}");
    }
    out.push(']');
    key(out, &mut f, "tail", i);
    match &c.tail {
        None => out.push_str("null"),
        Some(t) => {
            let mut g = true;
            out.push('{');
            key(out, &mut g, "method", i + 2);
            string(out, t.method);
            key(out, &mut g, "flake_rate_at_tolerance", i + 2);
            float(out, t.flake_rate);
            key(out, &mut g, "flake_rate_method", i + 2);
            string(out, t.flake_rate_method);
            key(out, &mut g, "points", i + 2);
            out.push('[');
            for (j, p) in t.points.iter().enumerate() {
                if j > 0 {
                    out.push_str(", ");
                }
                out.push_str("{\"p\": ");
                float(out, p.p);
                out.push_str(", \"usage_pct\": ");
                float(out, p.value);
                out.push_str(", \"lo_pct\": ");
                float(out, p.lo);
                out.push_str(", \"hi_pct\": ");
                float(out, p.hi);
                out.push('}');
            }
            out.push(']');
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', i));
            out.push('}');
        }
    }
    key(out, &mut f, "mutants_caught", i);
    strings(out, &c.mutants_caught);
    key(out, &mut f, "mutants_missed", i);
    strings(out, &c.mutants_missed);
    key(out, &mut f, "repro", i);
    string(out, &c.repro);
    key(out, &mut f, "message", i);
    match &c.message {
        Some(m) => string(out, m),
        None => out.push_str("null"),
    }
    key(out, &mut f, "failures", i);
    strings(out, &c.failures);
    out.push_str("\n    }");
}

fn mutant(out: &mut String, m: &MutantCase) {
    let i = 6;
    let mut f = true;
    out.push('{');
    for (k, v) in [
        ("scenario", &m.scenario),
        ("param", &m.param),
        ("profile", &m.profile),
        ("mutant", &m.mutant),
        ("policy", &m.policy),
    ] {
        key(out, &mut f, k, i);
        string(out, v);
    }
    key(out, &mut f, "status", i);
    string(
        out,
        if m.fails_gate {
            "fail"
        } else if m.missed() {
            "missed"
        } else {
            "caught"
        },
    );
    key(out, &mut f, "caught_seeds", i);
    let _ = write!(out, "{}", m.caught_seeds);
    key(out, &mut f, "seeds", i);
    let _ = write!(out, "{}", m.seeds);
    key(out, &mut f, "checks_missing", i);
    strings(out, &m.checks_missing);
    out.push_str("\n    }");
}

/// The JSON document of `v` (ends with a newline).
pub fn to_json(v: &Verdict) -> String {
    let mut out = String::with_capacity(512 * (v.cases.len() + 1));
    let mut f = true;
    out.push('{');
    key(&mut out, &mut f, "schema_version", 2);
    let _ = write!(out, "{SCHEMA_VERSION}");
    key(&mut out, &mut f, "tool", 2);
    string(&mut out, concat!("seedsweep ", env!("CARGO_PKG_VERSION")));
    key(&mut out, &mut f, "command", 2);
    string(&mut out, v.command);
    key(&mut out, &mut f, "verdict", 2);
    string(&mut out, if v.failed() { "fail" } else { "pass" });
    key(&mut out, &mut f, "failure", 2);
    match v.failure_line() {
        Some(l) => string(&mut out, &l),
        None => out.push_str("null"),
    }
    key(&mut out, &mut f, "gates", 2);
    let _ = write!(
        out,
        "{{\"fail_on_exceed\": {}, \"fail_on_missed_mutant\": {}, \"max_flake_rate\": ",
        v.gates.fail_on_exceed, v.gates.fail_on_missed_mutant
    );
    match v.gates.max_flake_rate {
        Some(p) => float(&mut out, p),
        None => out.push_str("null"),
    }
    out.push('}');
    key(&mut out, &mut f, "cases", 2);
    out.push('[');
    for (j, c) in v.cases.iter().enumerate() {
        out.push_str(if j > 0 { ",\n    " } else { "\n    " });
        case(&mut out, c);
    }
    out.push_str(if v.cases.is_empty() { "]" } else { "\n  ]" });
    key(&mut out, &mut f, "mutants", 2);
    out.push('[');
    for (j, m) in v.mutants.iter().enumerate() {
        out.push_str(if j > 0 { ",\n    " } else { "\n    " });
        mutant(&mut out, m);
    }
    out.push_str(if v.mutants.is_empty() { "]" } else { "\n  ]" });
    out.push_str("\n}\n");
    out
}
