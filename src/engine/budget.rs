//! What the selected groups need before any work starts: seed ranges that fit in u64, and
//! the memory one seed-run takes (checked against the machine by
//! [`crate::sys::limits::check_memory`]).
//!
//! Memory estimate of one seed-run of a parametrization: for a graph scenario, the bound its
//! plan gives (`crate::exec::memory`: parameters, gradients, activations, matmul scratch and
//! traces of the three computations) plus a quarter, checked against peak resident memory by
//! `tests/suite/memory_bound.rs`. A file with an outer loop, whose replicas run through
//! buffers of their own, gets a conservative upper bound instead (checked by hand against peak
//! RSS, see the README): the three computations (float64, reference, sharded) each record
//! every check's tensor at every recorded step as f64 and keep working buffers of the same
//! shapes, so `bytes ≈ 3 · 8 · Σ_checks numel · (R + 4) + 16 MiB`, where `R` is the product
//! of the step counts its `[train]` table sets (`steps`, `micro_steps`; 1 when none). Every worker thread holds one seed-run. A per-seed sweep also keeps every usage
//! (8 bytes per seed and result entry) for exact quantiles; `--summary-only` keeps a
//! histogram and the top of the tail per entry.

use crate::engine::catalog::{Catalog, Group};
use crate::sys::error::InputError;

/// Checks that `count` seeds from each group's first seed (`first`, or the scenario's own)
/// form a range whose end (exclusive) is within u64, and that `count` is at least 1: a range
/// that would wrap around is refused, never run as an empty one.
pub fn check_seed_range(
    catalog: &Catalog,
    groups: &[Group],
    first: Option<u64>,
    count: u64,
) -> Result<(), InputError> {
    if count == 0 {
        return Err(InputError::flag(
            "--seeds",
            "0 is not allowed; give at least 1 seed",
        ));
    }
    for g in groups {
        let c = catalog.scenarios[g.scenario].common();
        let f = first.unwrap_or(c.first_seed);
        if f.checked_add(count).is_none() {
            return Err(InputError::flag(
                if first.is_some() {
                    "--first-seed"
                } else {
                    "--seeds"
                },
                format!(
                    "seeds {f} .. {f} + {count} overflow u64: a range ends (exclusive) at most \
                     at {}, so the last seed is at most {}; give a smaller --first-seed or \
                     --seeds{}",
                    u64::MAX,
                    u64::MAX - 1,
                    if first.is_some() {
                        String::new()
                    } else {
                        format!(" ({}: first_seed {f} in {})", c.name, c.file)
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// The estimated bytes of one seed-run of `g` (see the module doc), with a description of
/// where the size comes from.
pub fn per_run(catalog: &Catalog, g: &Group) -> (u64, String) {
    let s = &catalog.scenarios[g.scenario];
    let c = s.common();
    let mut numel: u128 = 0;
    let mut largest: (u128, &str, Vec<usize>) = (0, "", Vec::new());
    for ch in s.checks(g.param) {
        let n: u128 = ch.shape.iter().map(|&d| d as u128).product();
        numel += n;
        if n > largest.0 {
            largest = (n, ch.name, ch.shape.clone());
        }
    }
    let mut r: u128 = 1;
    // Every file's graph tables are in `model`; its step counts in [train] (an outer-loop
    // file's [train.outer] sets none: `sync_period` divides the steps, it adds none).
    let train = c.model.get("train").and_then(|v| v.as_table());
    for key in ["steps", "micro_steps"] {
        if let Some(v) = train.and_then(|t| t.get(key)).and_then(|v| v.as_integer()) {
            r = r.saturating_mul(v.max(1) as u128);
        }
    }
    // A parametrization evaluated step by step holds one step's traces at a time.
    if s.streams(g.param) {
        r = 1;
    }
    // A graph scenario bounds its seed-run from its model (`crate::exec::memory`); others
    // by the check tensors.
    let (bytes, basis) = match s.run_bytes(g.param, &g.profile, g.mutant) {
        // A quarter more for what the model leaves out: allocator slack, vectors grown past
        // their length, and small buffers (chunks, frontiers, output rows).
        Some(b) => (
            b.saturating_add(b / 4),
            "parameters, gradients, activations and traces",
        ),
        None => ((3 * 8 * numel).saturating_mul(r + 4), "check tensors"),
    };
    let bytes = bytes.saturating_add(16 << 20);
    let shape: Vec<String> = largest.2.iter().map(|d| d.to_string()).collect();
    (
        bytes.min(u64::MAX as u128) as u64,
        format!(
            "{} [{}]: {basis}; largest tensor {} {} x {} recorded step(s), shapes set by [model] \
             and [[params]] in {}",
            c.name,
            s.param_ids()[g.param],
            largest.1,
            shape.join("x"),
            r,
            c.file
        ),
    )
}
