//! `seedsweep scale`: how rounding divergence grows with the reduction length and the TP
//! degree, on synthetic row-parallel shapes, next to the error-bound theory.
//!
//! Not a scenario: its per-seed measure is one synthetic layer computed three ways and
//! measured directly (below), with no traces or checks; its seeds run through the engine's
//! ordered parallel loop ([`crate::engine::plan::in_order`]).
//!
//! For each seed (ChaCha streams `scale.x` and `scale.w`, keyed by seed and K), a row-parallel
//! layer `y = x·Wᵀ` with `x` (`rows × K`, entries tanh of N(0,1), like activations) and `W`
//! (`cols × K`, N(0,1), like the tied embedding of the DeepSpeed test) is computed three ways:
//! float64, the unsharded fp32 matmul of the profile, and for every TP degree the sharded one
//! (DeepSpeed's shard rule, the profile's all-reduce). Per element, the error is measured
//! against the float64 value in units of `u·Σ_k |x_k w_k|` (u = 2⁻²⁴): the deterministic
//! bound for a K-term dot product is γ_K ≈ K (Higham, *Accuracy and Stability*, Thm 3.1) and
//! the probabilistic one is λ·√K (Higham & Mary, SISC 2019), so this normalised error
//! should follow √K. The usage of the test's comparison (sharded vs unsharded fp32) under each
//! policy is reported too: that is the number a tolerance has to cover at production size.

use std::path::PathBuf;

use crate::check::Tolerance;
use crate::commands::{emit, load_catalog, status, Common};
use crate::engine::plan::in_order;
use crate::kernels::matmul::MatmulScratch;
use crate::ops::backend::{Backend, F32Backend, F64Backend};
use crate::ops::tp::{row_parallel_forward, shard_ranges, RowParallelBuffers};
use crate::results::scale::ScalePoint;
use crate::rng::chacha::ChaChaStream;
use crate::scenario::mutant::TpFaults;
use crate::scenario::profile::Profile;
use crate::stats::quantile_sorted;
use crate::sys::atomic_write::{prepare_dir, write_atomic};
use crate::sys::error::InputError;
use crate::sys::limits::pool;

/// The unit roundoff of fp32.
pub const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// What to sweep.
#[derive(Debug, Clone)]
pub struct ScaleSpec {
    /// Reduction lengths.
    pub ks: Vec<usize>,
    /// TP degrees.
    pub tps: Vec<usize>,
    /// Rows of `x` (tokens).
    pub rows: usize,
    /// Output columns.
    pub cols: usize,
    /// Seeds per point, from 0.
    pub seeds: u64,
    /// Policies: name and tolerance.
    pub policies: Vec<(String, Tolerance)>,
}

/// Per-seed measurements of one K: for TP 1 (unsharded) then each TP degree.
struct SeedMeasure {
    err: Vec<f64>,
    usage: Vec<Vec<f64>>,
    abs_diff: Vec<f64>,
    max_y: f64,
}

fn measure(
    spec: &ScaleSpec,
    profile: &Profile,
    k: usize,
    seed: u64,
    scratch: &mut MatmulScratch,
) -> SeedMeasure {
    let (m, n) = (spec.rows, spec.cols);
    let mut x = vec![0f32; m * k];
    let mut w = vec![0f32; n * k];
    ChaChaStream::new(seed, &format!("scale.x.k{k}")).fill_normal(&mut x, 0.0, 1.0);
    for v in x.iter_mut() {
        *v = libm::tanhf(*v);
    }
    ChaChaStream::new(seed, &format!("scale.w.k{k}")).fill_normal(&mut w, 0.0, 1.0);
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let w64: Vec<f64> = w.iter().map(|&v| v as f64).collect();
    let ax: Vec<f64> = x64.iter().map(|v| v.abs()).collect();
    let aw: Vec<f64> = w64.iter().map(|v| v.abs()).collect();
    let mut f64be = F64Backend::default();
    let mut y64 = vec![0f64; m * n];
    let mut s64 = vec![0f64; m * n];
    f64be.matmul_nt(&x64, &w64, &mut y64, m, k, n);
    f64be.matmul_nt(&ax, &aw, &mut s64, m, k, n);
    let mut be = F32Backend::new(profile, scratch);
    let mut buf = RowParallelBuffers::default();
    let mut reference = vec![0f32; m * n];
    let whole_range = 0..k;
    let whole = std::slice::from_ref(&whole_range);
    row_parallel_forward(
        &mut be,
        &x,
        &w,
        &mut reference,
        m,
        k,
        n,
        whole,
        TpFaults::default(),
        &mut buf,
    );
    let norm_err = |y: &[f32]| -> f64 {
        y.iter()
            .zip(&y64)
            .zip(&s64)
            .map(|((&a, &e), &s)| {
                if s > 0.0 {
                    (a as f64 - e).abs() / (U32 * s)
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    };
    let mut out = SeedMeasure {
        err: vec![norm_err(&reference)],
        usage: vec![vec![0.0; spec.policies.len()]],
        abs_diff: vec![0.0],
        max_y: y64.iter().fold(0.0f64, |a, v| a.max(v.abs())),
    };
    let mut sharded = vec![0f32; m * n];
    for &tp in &spec.tps {
        let shards = shard_ranges(k, tp, 1);
        row_parallel_forward(
            &mut be,
            &x,
            &w,
            &mut sharded,
            m,
            k,
            n,
            &shards,
            TpFaults::default(),
            &mut buf,
        );
        out.err.push(norm_err(&sharded));
        let mut usage = Vec::with_capacity(spec.policies.len());
        for (_, tol) in &spec.policies {
            let u = sharded
                .iter()
                .zip(&reference)
                .map(|(&a, &e)| tol.usage(a as f64, e as f64))
                .fold(0.0, f64::max);
            usage.push(u * 100.0);
        }
        out.usage.push(usage);
        out.abs_diff.push(
            sharded
                .iter()
                .zip(&reference)
                .map(|(&a, &e)| (a as f64 - e as f64).abs())
                .fold(0.0, f64::max),
        );
    }
    out
}

/// Runs the sweep on the current rayon pool, the seeds of each K through the engine's
/// ordered parallel loop ([`in_order`]); points in (K, TP) order, TP 1 first per K.
pub fn run(spec: &ScaleSpec, profile: &Profile, pb: &indicatif::ProgressBar) -> Vec<ScalePoint> {
    let mut points = Vec::new();
    for &k in &spec.ks {
        let mut per_seed: Vec<SeedMeasure> = Vec::new();
        in_order(
            0..spec.seeds,
            MatmulScratch::default,
            |scratch, &seed| measure(spec, profile, k, seed, scratch),
            |_, chunk| {
                pb.inc(chunk.len() as u64);
                per_seed.extend(chunk);
                Ok(())
            },
        )
        .expect("collecting measures cannot fail");
        let tps: Vec<usize> = std::iter::once(1).chain(spec.tps.iter().copied()).collect();
        for (ti, &tp) in tps.iter().enumerate() {
            let mut errs: Vec<f64> = per_seed.iter().map(|s| s.err[ti]).collect();
            errs.sort_unstable_by(f64::total_cmp);
            let mut worst = Vec::new();
            let mut p95 = Vec::new();
            for p in 0..spec.policies.len() {
                let mut u: Vec<f64> = per_seed.iter().map(|s| s.usage[ti][p]).collect();
                u.sort_unstable_by(f64::total_cmp);
                worst.push(*u.last().unwrap_or(&0.0));
                p95.push(quantile_sorted(&u, 0.95));
            }
            points.push(ScalePoint {
                k,
                tp,
                seeds: spec.seeds,
                p50_err: quantile_sorted(&errs, 0.5),
                p95_err: quantile_sorted(&errs, 0.95),
                max_err: *errs.last().unwrap_or(&0.0),
                sqrt_k: (k as f64).sqrt(),
                worst_usage_pct: worst,
                p95_usage_pct: p95,
                max_abs_diff: per_seed.iter().map(|s| s.abs_diff[ti]).fold(0.0, f64::max),
                max_abs_y: per_seed.iter().map(|s| s.max_y).fold(0.0, f64::max),
            });
        }
    }
    points
}

/// `scale` options.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Configs (for profiles).
    pub common: Common,
    /// Profile spec.
    pub profile: String,
    /// Reduction lengths.
    pub ks: Vec<usize>,
    /// TP degrees.
    pub tps: Vec<usize>,
    /// Seeds per point.
    pub seeds: u64,
    /// Rows of the synthetic input.
    pub rows: usize,
    /// Output columns.
    pub cols: usize,
    /// Policy names.
    pub policies: Vec<String>,
    /// Worker threads.
    pub threads: Option<usize>,
    /// Output directory.
    pub out: PathBuf,
    /// No progress bar and no status lines.
    pub quiet: bool,
}

/// Runs `scale`: writes `scale.csv` (and `scale.svg`) into `--out` and prints a table.
pub fn scale(o: &ScaleOptions) -> anyhow::Result<i32> {
    let catalog = load_catalog(&o.common)?;
    for name in &catalog.from_configs {
        let i = catalog.scenario_index(name, "--config")?;
        let c = catalog.scenarios[i].common();
        if c.extra_profiles.profiles.is_empty() && c.extra_profiles.modifiers.is_empty() {
            return Err(InputError::flag(
                "--config",
                format!(
                    "{} defines no [profiles.*] or [modifiers.*] table; scale draws its own \
                     synthetic data and uses only a config's profiles",
                    c.file
                ),
            )
            .into());
        }
    }
    let profile = catalog.profiles.resolve(&o.profile, "--profile")?;
    {
        // Per thread, one seed of the largest K: x and W in f32 and f64 (values and magnitudes),
        // and the m x n outputs of every computation; plus every seed's measures of one K.
        let kmax = o.ks.iter().copied().max().unwrap_or(1) as u64;
        let (m, n) = (o.rows as u64, o.cols as u64);
        let per_seed_run = (m.saturating_add(n))
            .saturating_mul(kmax)
            .saturating_mul(4 + 3 * 8)
            .saturating_add(
                m.saturating_mul(n)
                    .saturating_mul(8 * 4 + 4 * (o.tps.len() as u64 + 2)),
            );
        let t = (crate::sys::limits::effective_threads(o.threads) as u64).min(o.seeds);
        let measures = o.seeds.saturating_mul(
            (o.tps.len() as u64 + 1).saturating_mul(o.policies.len() as u64 + 2) * 8 + 128,
        );
        crate::sys::limits::check_memory(
            &[
                (
                    per_seed_run.saturating_mul(t),
                    format!(
                        "{t} thread(s) x {} per seed at K = {kmax} (--rows {m}, --cols {n})",
                        crate::sys::limits::human(per_seed_run)
                    ),
                ),
                (measures, format!("the measures of {} seeds", o.seeds)),
            ],
            o.common.max_memory,
        )?;
    }
    let shared = crate::scenario::config::builtin_policies()?;
    let mut policies = Vec::new();
    for name in &o.policies {
        let p = shared.iter().find(|p| &p.name == name).ok_or_else(|| {
            let valid: Vec<&str> = shared.iter().map(|p| p.name.as_str()).collect();
            InputError::flag(
                "--policy",
                crate::sys::error::unknown_name("policy", name, &valid),
            )
        })?;
        policies.push((p.name.clone(), p.default));
    }
    let pool = pool(o.threads)?;
    prepare_dir(&o.out, "--out")?;
    let spec = ScaleSpec {
        ks: o.ks.clone(),
        tps: o.tps.clone(),
        rows: o.rows,
        cols: o.cols,
        seeds: o.seeds,
        policies,
    };
    let pb = crate::sys::progress::bar_of(
        spec.ks.len() as u64 * spec.seeds,
        o.quiet,
        "scale",
        "seeds (all TP degrees)",
    );
    let points = pool.install(|| run(&spec, &profile, &pb));
    pb.finish_and_clear();
    let csv = crate::results::csv::scale_csv(&profile.name, &o.policies, &points)?;
    write_atomic(&o.out.join("scale.csv"), &csv)?;
    let svg = crate::report::svg::scale_plot(&points, &o.policies[0], 0);
    write_atomic(&o.out.join("scale.svg"), svg.as_bytes())?;
    let mut header: Vec<String> = ["K", "TP", "p50 err/u·Σ|xw|", "p95", "max", "√K"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in &o.policies {
        header.push(format!("{p}: worst"));
        header.push("p95".into());
    }
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|pt| {
            let mut r = vec![
                pt.k.to_string(),
                if pt.tp == 1 {
                    "1 (ref)".into()
                } else {
                    pt.tp.to_string()
                },
                format!("{:.3}", pt.p50_err),
                format!("{:.3}", pt.p95_err),
                format!("{:.3}", pt.max_err),
                format!("{:.1}", pt.sqrt_k),
            ];
            for (w, p) in pt.worst_usage_pct.iter().zip(&pt.p95_usage_pct) {
                r.push(crate::report::table::pct(w / 100.0));
                r.push(crate::report::table::pct(p / 100.0));
            }
            r
        })
        .collect();
    emit(&format!(
        "{} on x (rows x K, tanh N(0,1)) . W^T (cols x K, N(0,1)), {} seeds per point; errors against float64 in units of u*sum|x*w| (u = 2^-24), usage of sharded vs unsharded fp32\n",
        profile.name, o.seeds
    ));
    emit(&crate::report::table::render(&header, &rows, 0));
    status(
        o.quiet,
        &format!(
            "wrote {} and {}",
            o.out.join("scale.csv").display(),
            o.out.join("scale.svg").display()
        ),
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::profile::ProfileRegistry;

    fn spec() -> ScaleSpec {
        ScaleSpec {
            ks: vec![64, 1024],
            tps: vec![2, 8],
            rows: 4,
            cols: 16,
            seeds: 12,
            policies: vec![("torch-default".into(), Tolerance::TORCH_FP32)],
        }
    }

    #[test]
    fn errors_stay_under_the_deterministic_bound_and_usage_grows_with_k() {
        let p = ProfileRegistry::builtin()
            .unwrap()
            .resolve("cpu-fma", "--profile")
            .unwrap();
        let pts = run(&spec(), &p, &indicatif::ProgressBar::hidden());
        assert_eq!(pts.len(), 2 * 3);
        for pt in &pts {
            // γ_K = K·u/(1 − K·u) ≈ K in units of u·Σ|xw|, plus the all-reduce and f32
            // rounding of the inputs' products: (K + tp + 1) is a safe ceiling.
            assert!(pt.max_err <= (pt.k + pt.tp + 1) as f64, "{pt:?}");
        }
        // Values grow like √K and rounding errors like K·u·|partial sums|, so the share of a
        // fixed tolerance that the TP split uses grows with K.
        let usage = |k: usize| {
            pts.iter()
                .find(|p| p.k == k && p.tp == 8)
                .unwrap()
                .worst_usage_pct[0]
        };
        assert!(
            usage(1024) > usage(64),
            "usage grows with K: {} vs {}",
            usage(1024),
            usage(64)
        );
        // TP 1 is the reference itself: zero usage.
        assert!(pts
            .iter()
            .filter(|p| p.tp == 1)
            .all(|p| p.worst_usage_pct[0] == 0.0));
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let p = ProfileRegistry::builtin()
            .unwrap()
            .resolve("cpu-fma", "--profile")
            .unwrap();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| run(&spec(), &p, &indicatif::ProgressBar::hidden()));
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
            .install(|| run(&spec(), &p, &indicatif::ProgressBar::hidden()));
        for (a, b) in one.iter().zip(&two) {
            assert_eq!(a.max_err.to_bits(), b.max_err.to_bits());
            assert_eq!(a.worst_usage_pct, b.worst_usage_pct);
        }
    }
}
