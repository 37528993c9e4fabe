//! The rows of `scale`'s table: one per (reduction length K, TP degree).

/// One (K, TP) point.
#[derive(Debug, Clone)]
pub struct ScalePoint {
    /// Reduction length.
    pub k: usize,
    /// TP degree (1: the unsharded fp32 matmul itself).
    pub tp: usize,
    /// Seeds.
    pub seeds: u64,
    /// Median over seeds of the largest normalised error `|y - y64| / (u·Σ|x w|)`.
    pub p50_err: f64,
    /// 95th percentile over seeds of the same.
    pub p95_err: f64,
    /// Largest over seeds.
    pub max_err: f64,
    /// √K, the shape of the probabilistic bound.
    pub sqrt_k: f64,
    /// Per policy: worst usage (percent) of sharded vs unsharded fp32 over seeds (0 for TP 1).
    pub worst_usage_pct: Vec<f64>,
    /// Per policy: 95th percentile of the same.
    pub p95_usage_pct: Vec<f64>,
    /// Largest |sharded - unsharded| over seeds.
    pub max_abs_diff: f64,
    /// Largest |y| over seeds.
    pub max_abs_y: f64,
}
