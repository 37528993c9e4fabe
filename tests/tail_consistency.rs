//! Predicted tails are consistent with the data: the 1e-3 quantile predicted from the first
//! 1,000 seeds brackets the empirical 1e-3 quantile of 10,000 seeds within its interval.
//! (T1 `35-3-False-0`, `cpu-fma`, the logits check under torch's default: about 3 s.)

use seedsweep::catalog::{Catalog, Selection};
use seedsweep::check::Tolerance;
use seedsweep::size::{collect, usages};
use seedsweep::stats::quantile_sorted;
use seedsweep::stats::tail::tail_estimate;
use seedsweep::sweep::SeedRange;

#[test]
fn the_1e3_prediction_from_1000_seeds_brackets_the_10000_seed_quantile() {
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let groups = catalog
        .plan(&Selection {
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
    let fr = collect(&catalog, &groups, &range);
    let logits = &fr[0][0];
    let all = usages(logits, Tolerance::TORCH_FP32);
    let fit = tail_estimate(&all[..1000], &[1e-3]);
    let point = fit.points[0];
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let empirical = quantile_sorted(&sorted, 1.0 - 1e-3);
    assert!(
        point.lo <= empirical && empirical <= point.hi,
        "predicted {} [{}, {}] ({:?}) vs empirical {empirical}",
        point.value,
        point.lo,
        point.hi,
        fit.method
    );
}
