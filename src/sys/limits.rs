//! Resource limits checked before any work: worker threads, and the memory a run may use
//! against what the machine has. What a run needs is estimated by
//! [`crate::engine::budget`].

use crate::sys::error::InputError;

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

/// What a run may allocate, and what sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from (`--max-memory`, `MemAvailable`, the cgroup's limit, ...).
    pub source: String,
    /// Whether `--max-memory` set it (then raising it is the user's remedy).
    pub from_flag: bool,
}

/// Bytes available to this run: the smallest of the machine's available memory
/// (`MemAvailable` in /proc/meminfo; `--max-memory` replaces this one), the headroom of the
/// process's address-space limit (`RLIMIT_AS`, `ulimit -v`, less its current size), and the
/// headroom of every memory cgroup it is in (`memory.max` less `memory.current`, or v1's
/// `memory.limit_in_bytes` less `memory.usage_in_bytes`). `None` when none is known (no
/// check). A hard limit caps `--max-memory` too: past it the allocator aborts the process.
pub fn available(max_memory: Option<u64>) -> Option<Budget> {
    let mut all: Vec<Budget> = Vec::new();
    match max_memory {
        Some(b) => all.push(Budget {
            bytes: b,
            source: "allowed by --max-memory".into(),
            from_flag: true,
        }),
        None => {
            if let Some(b) = std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|t| meminfo_available(&t))
            {
                all.push(Budget {
                    bytes: b,
                    source: "available (MemAvailable)".into(),
                    from_flag: false,
                });
            }
        }
    }
    if let Some(b) = address_space_headroom() {
        all.push(Budget {
            bytes: b,
            source: "left under this process's address-space limit (RLIMIT_AS, ulimit -v)".into(),
            from_flag: false,
        });
    }
    if let Some((b, path)) = cgroup_headroom() {
        all.push(Budget {
            bytes: b,
            source: format!("left under the memory cgroup's limit ({path})"),
            from_flag: false,
        });
    }
    all.into_iter().min_by_key(|b| b.bytes)
}

/// `MemAvailable` of a /proc/meminfo text, in bytes.
fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// `RLIMIT_AS` less the process's current virtual size (`VmSize`); `None` when unlimited.
fn address_space_headroom() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given and nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } != 0
            || r.rlim_cur == libc::RLIM_INFINITY
        {
            return None;
        }
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let vm = status_kb(&status, "VmSize:").unwrap_or(0);
        Some(r.rlim_cur.saturating_sub(vm))
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// A `Key:   N kB` field of /proc/self/status, in bytes.
fn status_kb(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb.saturating_mul(1024))
}

/// Limit less usage of a cgroup's memory files: `None` for no limit (`max`, or v1's huge
/// "unlimited" values).
fn cgroup_left(limit: &str, usage: &str) -> Option<u64> {
    let limit: u64 = limit.trim().parse().ok()?;
    if limit >= 1 << 62 {
        return None;
    }
    let usage: u64 = usage.trim().parse().unwrap_or(0);
    Some(limit.saturating_sub(usage))
}

/// The smallest headroom over the memory cgroups of this process (v2: its cgroup and every
/// parent; v1: the memory controller's cgroup), with the limit file that sets it.
fn cgroup_headroom() -> Option<(u64, String)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<(u64, String)> = None;
    let mut consider = |dir: std::path::PathBuf, limit: &str, usage: &str| {
        let l = std::fs::read_to_string(dir.join(limit)).ok();
        let u = std::fs::read_to_string(dir.join(usage)).ok();
        if let (Some(l), Some(u)) = (l, u) {
            if let Some(left) = cgroup_left(&l, &u) {
                if best.as_ref().is_none_or(|(b, _)| left < *b) {
                    best = Some((left, dir.join(limit).display().to_string()));
                }
            }
        }
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            // cgroup v2: the process's cgroup and its parents up to the root.
            let mut dir = std::path::Path::new("/sys/fs/cgroup").join(rel);
            loop {
                consider(dir.clone(), "memory.max", "memory.current");
                if dir == std::path::Path::new("/sys/fs/cgroup") || !dir.pop() {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            consider(
                std::path::Path::new("/sys/fs/cgroup/memory").join(rel),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            );
        }
    }
    best
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
        .ok()
        .filter(|v: &f64| !v.is_nan())
        .ok_or_else(|| format!("`{s}` is not a size (e.g. 512M, 8G)"))?;
    if v <= 0.0 {
        return Err(format!("`{s}`: give a size > 0"));
    }
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!(
            "`{s}` is too large; the largest size is 16777215T (2^64 - 1 bytes)"
        ));
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

/// Refuses a run whose estimate exceeds the available memory. `parts` are `(bytes, what)`.
pub fn check_memory(parts: &[(u64, String)], max_memory: Option<u64>) -> Result<(), InputError> {
    let Some(budget) = available(max_memory) else {
        return Ok(());
    };
    let avail = budget.bytes;
    let total = parts.iter().fold(0u64, |a, (b, _)| a.saturating_add(*b));
    if total <= avail {
        return Ok(());
    }
    let what: Vec<String> = parts
        .iter()
        .filter(|(b, _)| *b > 0)
        .map(|(b, w)| format!("{} for {w}", human(*b)))
        .collect();
    let msg = format!(
        "this run needs about {} ({}) but {} is {}; reduce the shapes, --threads or --seeds{}",
        human(total),
        what.join(" + "),
        human(avail),
        budget.source,
        if budget.from_flag {
            ", or give a larger --max-memory"
        } else if max_memory.is_none() && budget.source.starts_with("available") {
            ", or give --max-memory SIZE to allow more"
        } else {
            " (--max-memory cannot raise this limit)"
        }
    );
    Err(if budget.from_flag {
        InputError::flag("--max-memory", msg)
    } else {
        InputError::Refused(format!("not enough memory: {msg}"))
    })
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
        // Too large is said as such, not as "> 0" (1e400 parses as infinity).
        for big in ["1e400", "1e400G", "20000000T"] {
            let e = parse_size(big).unwrap_err();
            assert!(e.contains("too large"), "{big}: {e}");
        }
        assert!(parse_size("xM").unwrap_err().contains("not a size"));
        assert!(parse_size("0").unwrap_err().contains("> 0"));
    }

    #[test]
    fn memory_limits_parse() {
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(meminfo_available(meminfo), Some(1000 * 1024));
        assert_eq!(cgroup_left("6442450944\n", "1073741824\n"), Some(5 << 30));
        assert_eq!(cgroup_left("max\n", "1073741824\n"), None);
        // cgroup v1's "unlimited" is a page-rounded 2^63 - 1.
        assert_eq!(cgroup_left("9223372036854771712", "1"), None);
        assert_eq!(cgroup_left("100", "200"), Some(0));
        let status = "Name:\tx\nVmSize:\t  2048 kB\n";
        assert_eq!(status_kb(status, "VmSize:"), Some(2048 * 1024));
    }

    #[test]
    fn a_refusal_without_the_flag_does_not_blame_the_flag() {
        let parts = [(u64::MAX / 2, "x".to_string())];
        let e = check_memory(&parts, None).unwrap_err().to_string();
        assert!(!e.contains("invalid value"), "{e}");
        assert!(e.starts_with("not enough memory"), "{e}");
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
