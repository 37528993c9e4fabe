//! Predicted tails are consistent with the data: on T1 `35-3-False-0`, `cpu-fma`, the logits
//! check under torch's default, the 1e-3 tail predicted from each of four disjoint windows of
//! 1,000 seeds (seeds 8173.., +1000, +2000, +5000) is compared with the 1e-3 quantile of all
//! 10,000 seeds. Both are estimates: the 10,000-seed one is empirical (10 seeds above it) with
//! its distribution-free 95 % interval [49.20, 60.76] %. Asserted: (1) each window's sizing
//! bound (what `size` keeps at or below the target) is at or above that interval's lower
//! end, and (2) at least three of the four windows' 95 % intervals overlap it. About 15 s.
//!
//! Measured, and why (2) says "three": the first window fits a bounded tail (ξ̂ ≈ −0.25) and
//! its GPD interval [37.29, 49.18] % ends 0.02 points below the 10,000-seed interval — a real
//! miss of the two-sided interval on this data, not hidden here. Its sizing bound, which
//! does not extrapolate a negative shape (see `sizing_bound`), is 52.7 %. The other windows
//! fit ξ̂ from 0.03 to 0.20 and their intervals contain the 10,000-seed point 53.2 %.

use seedsweep::check::Tolerance;
use seedsweep::engine::aggregate::collect_frontiers;
use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::engine::plan::SeedRange;
use seedsweep::report::size::usages;
use seedsweep::stats::tail::{sizing_bound, tail_estimate};

#[test]
fn predictions_from_1000_seed_windows_agree_with_10000_seeds() {
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec!["deepspeed-tied-row-parallel".into()]),
            params: Some(vec!["35-3-False-0".into()]),
            profiles: Some(vec!["cpu-fma".into()]),
            ..Default::default()
        })
        .unwrap();
    let range = SeedRange {
        first: None,
        count: 10_000,
        shard: None,
    };
    let fr = collect_frontiers(&catalog, &groups, &range, "size", true);
    let logits = &fr[0][0];
    let all = usages(logits, Tolerance::TORCH_FP32);
    let big = tail_estimate(&all, &[1e-3]).points[0];
    assert!(big.lo.is_finite() && big.hi.is_finite(), "{big:?}");
    let mut overlapping = 0;
    for start in [0usize, 1000, 2000, 5000] {
        let window = &all[start..start + 1000];
        let fit = tail_estimate(window, &[1e-3]);
        let pt = fit.points[0];
        eprintln!(
            "window {start}: predicted {} [{}, {}] ({:?}) vs 10,000 seeds {} [{}, {}]",
            pt.value, pt.lo, pt.hi, fit.method, big.value, big.lo, big.hi
        );
        if pt.lo <= big.hi && big.lo <= pt.hi {
            overlapping += 1;
        }
        let bound = sizing_bound(window, 1e-3);
        assert!(
            bound.hi >= big.lo,
            "window {start}: sizing bound {} below the 10,000-seed interval [{}, {}]",
            bound.hi,
            big.lo,
            big.hi
        );
    }
    assert!(overlapping >= 3, "only {overlapping} of 4 windows overlap");
}
