//! The CSV view of a [`Sizing`]: `recommendations.csv`, one row per profile (and `all`),
//! check (and `all`) and shape; its columns are declared in [`crate::results::schema`].

use super::{Rec, Sizing};
use crate::results::schema::{RecRow, RECOMMENDATION_COLUMNS};

/// The rows: per (scenario, param), every profile's own recommendations (check, then
/// shape), then the ones for every profile (`all`).
pub fn rows(s: &Sizing) -> Vec<RecRow> {
    let mut rows = Vec::new();
    for k in &s.keys {
        let n_checks = k.checks.len();
        let mut row = |profile: &str, c: usize, rec: &Rec, seeds: usize, bp: &str, bc: &str| {
            rows.push(RecRow {
                scenario: k.scenario.clone(),
                param: k.param.clone(),
                profile: profile.to_string(),
                check: k.checks.get(c).map_or("all", |s| s.as_str()).to_string(),
                shape: rec.shape.name().into(),
                atol: finite(rec.tol.atol),
                rtol: finite(rec.tol.rtol),
                flake_rate: s.flake,
                target_pct: s.target,
                predicted_pct: finite(rec.predicted),
                predicted_upper_pct: finite(rec.upper),
                tail_method: rec.method.name().into(),
                seeds,
                seeds_needed_gpd: s.seeds_needed_gpd,
                seeds_needed_empirical: s.seeds_needed_empirical,
                binding_profile: bp.to_string(),
                binding_check: bc.to_string(),
                note: rec.note.clone(),
            });
        };
        // The binding check is named on the rows for all checks only.
        let bc = |c: usize, name: &str| {
            if c == n_checks {
                name.to_string()
            } else {
                String::new()
            }
        };
        for p in &k.profiles {
            for (c, per_shape) in p.recs.iter().enumerate() {
                for (sh, rec) in per_shape.iter().enumerate() {
                    row(
                        &p.profile,
                        c,
                        rec,
                        p.seeds,
                        "",
                        &bc(c, &p.binding_check[sh]),
                    );
                }
            }
        }
        for (c, per_shape) in k.combined.iter().enumerate() {
            for (sh, b) in per_shape.iter().enumerate() {
                let bp = &k.profiles[b.profile];
                row(
                    "all",
                    c,
                    &b.rec,
                    bp.seeds,
                    &bp.profile,
                    &bc(c, &k.combined_binding_check[sh]),
                );
            }
        }
    }
    rows
}

/// `recommendations.csv` bytes.
pub fn render_csv(s: &Sizing) -> Vec<u8> {
    crate::results::csv::table(RECOMMENDATION_COLUMNS, &rows(s))
}

/// A figure, or none (an empty cell) when it is not finite.
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}
