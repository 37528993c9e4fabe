//! Resource limits checked before any work: worker threads, seed ranges, and an estimate of
//! the memory a run needs against what the machine has.
//!
//! Memory estimate of one seed-run of a parametrization: for a graph scenario, the bound its
//! plan gives (`crate::graph::memory`: parameters, gradients, activations, matmul scratch and
//! traces of the three computations) plus a quarter, checked against peak resident memory by
//! `tests/memory_bound.rs`. Otherwise (a conservative upper bound, checked by hand against
//! peak RSS, see the README): the three computations (float64, reference,
//! sharded) each record every check's tensor at every recorded step as f64 and keep working
//! buffers of the same shapes, so
//! `bytes ≈ 3 · 8 · Σ_checks numel · (R + 4) + 16 MiB`, where `R` is the product of the
//! step counts the `[model]` table sets (`steps`, `accum`, `rounds`, `inner_steps`; 1 when
//! none). Every worker thread holds one seed-run. A per-seed sweep also keeps every usage
//! (8 bytes per seed and result entry) for exact quantiles; `--summary-only` keeps a
//! histogram and the top of the tail per entry.

use crate::catalog::{Catalog, Group};
use crate::error::InputError;

/// Largest `--threads`.
pub const MAX_THREADS: usize = 1024;

/// Checks `--threads` (`None`: all cores).
pub fn check_threads(threads: Option<usize>) -> Result<(), InputError> {
    match threads {
        Some(n) if !(1..=MAX_THREADS).contains(&n) => Err(InputError::flag(
            "--threads",
            format!("{n} is not allowed; allowed: 1..={MAX_THREADS}"),
        )),
        _ => Ok(()),
    }
}

/// A rayon pool of `threads` workers (default: all cores), naming `--threads` when the system
/// cannot start them.
pub fn pool(threads: Option<usize>) -> anyhow::Result<rayon::ThreadPool> {
    check_threads(threads)?;
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        b = b.num_threads(n);
    }
    b.build().map_err(|e| {
        InputError::flag(
            "--threads",
            format!("cannot start {} worker threads: {e}", threads.unwrap_or(0)),
        )
        .into()
    })
}

/// Threads a pool of `threads` would have.
pub fn effective_threads(threads: Option<usize>) -> usize {
    threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    })
}

/// Checks that `count` seeds from each group's first seed (`first`, or the scenario's own)
/// stay within u64.
pub fn check_seed_range(
    catalog: &Catalog,
    groups: &[Group],
    first: Option<u64>,
    count: u64,
) -> Result<(), InputError> {
    for g in groups {
        let c = catalog.scenarios[g.scenario].common();
        let f = first.unwrap_or(c.first_seed);
        if f.checked_add(count.saturating_sub(1)).is_none() {
            return Err(InputError::flag(
                if first.is_some() {
                    "--first-seed"
                } else {
                    "--seeds"
                },
                format!(
                    "seeds {f} + {count} overflow u64 (largest seed {}){}",
                    u64::MAX,
                    if first.is_some() {
                        String::new()
                    } else {
                        format!(" for {} (first_seed {f} in {})", c.name, c.file)
                    }
                ),
            ));
        }
    }
    Ok(())
}

/// Bytes available to this run: `--max-memory` when given, else the machine's available
/// memory (`MemAvailable` in /proc/meminfo); `None` when unknown (no check).
pub fn available(max_memory: Option<u64>) -> Option<u64> {
    if max_memory.is_some() {
        return max_memory;
    }
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// Parses a size for `--max-memory`: bytes, or a number with K, M, G or T (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("`{s}`: unknown unit; allowed: K, M, G, T")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 512M, 8G)"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{s}`: give a size > 0"));
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(format!("`{s}` is too large"));
    }
    Ok(bytes as u64)
}

/// A human size (`1.5 GiB`).
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
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
    // Legacy configs keep these in [model]; scenario-language files in [train] and
    // [train.outer] (which `model` holds as tables).
    let train = c.model.get("train").and_then(|v| v.as_table());
    let outer = train
        .and_then(|t| t.get("outer"))
        .and_then(|v| v.as_table());
    for key in ["steps", "accum", "micro_steps", "rounds", "inner_steps"] {
        for table in [Some(&c.model), train, outer].into_iter().flatten() {
            if let Some(v) = table.get(key).and_then(|v| v.as_integer()) {
                r = r.saturating_mul(v.max(1) as u128);
            }
        }
    }
    // A parametrization evaluated step by step holds one step's traces at a time.
    if s.streams(g.param) {
        r = 1;
    }
    // A graph scenario bounds its seed-run from its model (`crate::graph::memory`); others
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

/// Refuses a run whose estimate exceeds the available memory. `parts` are `(bytes, what)`.
pub fn check_memory(parts: &[(u64, String)], max_memory: Option<u64>) -> Result<(), InputError> {
    let Some(avail) = available(max_memory) else {
        return Ok(());
    };
    let total = parts.iter().fold(0u64, |a, (b, _)| a.saturating_add(*b));
    if total <= avail {
        return Ok(());
    }
    let what: Vec<String> = parts
        .iter()
        .filter(|(b, _)| *b > 0)
        .map(|(b, w)| format!("{} for {w}", human(*b)))
        .collect();
    Err(InputError::flag(
        "--max-memory",
        format!(
            "this run needs about {} ({}) but {} {} available; reduce the shapes, --threads or \
             --seeds, or give --max-memory SIZE to allow more",
            human(total),
            what.join(" + "),
            human(avail),
            if max_memory.is_some() {
                "is allowed by --max-memory"
            } else {
                "is"
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("1e30T").is_err());
    }

    #[test]
    fn threads_beyond_the_maximum_are_refused() {
        assert!(check_threads(Some(MAX_THREADS)).is_ok());
        let e = check_threads(Some(100_000)).unwrap_err().to_string();
        assert!(e.contains("--threads") && e.contains("1..=1024"), "{e}");
        assert!(check_threads(Some(0)).is_err());
    }

    #[test]
    fn a_run_above_the_limit_is_refused_naming_what_it_needs() {
        let parts = [(3u64 << 30, "x".to_string())];
        assert!(check_memory(&parts, Some(4 << 30)).is_ok());
        let e = check_memory(&parts, Some(1 << 30)).unwrap_err().to_string();
        assert!(
            e.contains("3.0 GiB for x") && e.contains("--max-memory"),
            "{e}"
        );
    }
}
