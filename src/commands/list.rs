//! `seedsweep list`: what the catalog holds.

use crate::commands::{load_catalog, Common};

/// `list`: scenarios with their parametrizations and checks, profiles, modifiers, policies.
pub fn list(common: &Common) -> anyhow::Result<String> {
    let catalog = load_catalog(common)?;
    let mut out = String::from("SCENARIOS\n");
    for s in &catalog.scenarios {
        let c = s.common();
        out.push_str(&format!(
            "  {}  ({}; first seed {}; rng {}; {})\n    {}\n",
            c.name,
            c.file,
            c.first_seed,
            c.rng.name(),
            s.summary(),
            c.description
        ));
        out.push_str("    params:\n");
        for (i, id) in s.param_ids().iter().enumerate() {
            let checks: Vec<&str> = s.checks(i).iter().map(|c| c.name).collect();
            out.push_str(&format!("      {id}  checks: {}\n", checks.join(", ")));
        }
        out.push_str(&format!(
            "    default profiles: {}; default policies: {}\n",
            c.profiles.join(", "),
            c.default_policies.join(", ")
        ));
        out.push_str("    policies:\n");
        for p in s.policies() {
            let overrides: Vec<String> = p
                .checks
                .iter()
                .map(|(k, t)| format!("{k}={}/{}", t.atol, t.rtol))
                .collect();
            let extra = if overrides.is_empty() {
                String::new()
            } else {
                format!("; overrides {}", overrides.join(", "))
            };
            out.push_str(&format!(
                "      {:<14} atol {} rtol {}{}  — {}\n",
                p.name, p.default.atol, p.default.rtol, extra, p.description
            ));
        }
    }
    out.push_str("\nPROFILES\n");
    for p in catalog.profiles.profiles() {
        out.push_str(&format!("  {:<16} {}\n", p.name, p.description));
    }
    out.push_str("\nMODIFIERS (compose as PROFILE+MODIFIER)\n");
    for m in catalog.profiles.modifier_names() {
        out.push_str(&format!(
            "  {:<22} {}\n",
            m,
            catalog.profiles.modifier_description(m).unwrap_or_default()
        ));
    }
    out.push_str("\nMUTANTS (--mutants all|NAME,...; injected into the sharded computation)\n");
    for m in crate::scenario::mutant::Mutant::ALL {
        let users: Vec<&str> = catalog
            .scenarios
            .iter()
            .filter(|s| s.mutants().contains(&m))
            .map(|s| s.common().name.as_str())
            .collect();
        if !users.is_empty() {
            out.push_str(&format!("  {:<26} {}\n", m.name(), users.join(", ")));
        }
    }
    out.push_str(
        "\nCOMPARISONS\n  sharded-vs-ref (what the test asserts), ref-vs-f64, sharded-vs-f64\n",
    );
    Ok(out)
}
