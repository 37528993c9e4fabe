//! A sweep folder (`sweep --out`, `merge --out`) holds exactly one sweep.
//!
//! Policy: a new sweep goes only into a new or empty folder, or into a folder that holds a
//! sweep of seedsweep's own (a readable `fingerprint.txt`); any other non-empty folder is
//! refused, and nothing in it is touched. In a sweep folder, a new sweep removes the files
//! seedsweep owns there ([`FILES`], and their temporary files) before it writes anything,
//! and leaves every other file alone; so a folder never mixes the files of two sweeps. A name seedsweep owns that is not a regular
//! file (a symlink, a FIFO, a folder) is refused, never removed or written through. Writers
//! take the folder's [lock](crate::sweepdir::lock) first.
//!
//! To add a file kind to sweep folders, add one line to [`FILES`].

use std::path::Path;

use anyhow::Context;

use crate::sweepdir::lock::Lock;
use crate::sys::atomic_write::is_temp_of;

/// One file seedsweep owns in a sweep folder.
#[derive(Debug, Clone, Copy)]
pub struct Owned {
    /// File name.
    pub name: &'static str,
    /// What it holds.
    pub what: &'static str,
}

/// Every file seedsweep owns in a sweep folder, in the order they are written.
pub const FILES: &[Owned] = &[
    Owned {
        name: crate::sweepdir::fingerprint::FILE,
        what: "what determines the output",
    },
    Owned {
        name: "plan.csv",
        what: "the groups and seed slices",
    },
    Owned {
        name: "seeds.csv.partial",
        what: "per-seed rows of an unfinished sweep",
    },
    Owned {
        name: ".progress",
        what: "the last checkpoint of seeds.csv.partial",
    },
    Owned {
        name: crate::results::frontiers::PARTIAL,
        what: "per-seed frontiers of an unfinished sweep",
    },
    Owned {
        name: crate::results::frontiers::FILE,
        what: "per-seed frontiers for `size DIR`",
    },
    Owned {
        name: "mutants.csv",
        what: "mutant detection summary",
    },
    Owned {
        name: "summary.csv",
        what: "per-check summary",
    },
    Owned {
        name: "seeds.csv",
        what: "per-seed rows",
    },
    Owned {
        name: crate::results::rowlog::PARTIAL,
        what: "per-seed rows of an unfinished --format parquet sweep",
    },
    Owned {
        name: crate::results::rowlog::MUTANTS_PARTIAL,
        what: "the mutant groups' values of an unfinished sweep",
    },
    Owned {
        name: crate::results::parquet::FILE,
        what: "per-seed rows (--format parquet)",
    },
    Owned {
        name: "recommendations.csv",
        what: "the `size DIR` recommendations of the previous sweep",
    },
    Owned {
        name: "report.html",
        what: "the report of the previous sweep (stale once the sweep changes)",
    },
];

/// Refuses an owned name that exists but is not a regular file.
fn check_regular(dir: &Path, name: &str, flag: &str) -> anyhow::Result<bool> {
    let p = dir.join(name);
    match std::fs::symlink_metadata(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("{flag}: cannot inspect {}", p.display())),
        Ok(m) if m.file_type().is_file() => Ok(true),
        Ok(_) => anyhow::bail!(
            "{flag}: {} is not a regular file (a symlink, FIFO, device or folder); seedsweep \
             owns that name in a sweep folder and will not replace it: move it away or choose \
             another folder",
            p.display()
        ),
    }
}

/// Removes the temporary files a killed writer left for owned names.
fn remove_temps(dir: &Path) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if FILES.iter().any(|f| is_temp_of(&name, f.name))
            && e.file_type().map(|t| t.is_file()).unwrap_or(false)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(())
}

/// Whether `name` is one of seedsweep's own transient files: its lock, a write probe, or a
/// temporary file of an owned name.
fn is_transient(name: &str) -> bool {
    name == crate::sweepdir::lock::FILE
        || name.starts_with(".seedsweep-write-probe")
        || FILES.iter().any(|f| is_temp_of(name, f.name))
}

/// Refuses a folder that is neither new, nor empty (but for seedsweep's transient files), nor
/// a sweep of seedsweep's own (a readable fingerprint). Nothing is written or removed.
pub fn check_ours(dir: &Path, flag: &str) -> anyhow::Result<()> {
    if !dir.is_dir()
        || matches!(
            crate::sweepdir::fingerprint::Fingerprint::read(dir),
            Ok(Some(_))
        )
    {
        return Ok(());
    }
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("{flag}: cannot list {}", dir.display()))?;
    let mut foreign: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !is_transient(n))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let shown: Vec<String> = foreign.iter().take(3).map(|n| format!("`{n}`")).collect();
    let why = match crate::sweepdir::fingerprint::Fingerprint::read(dir) {
        Err(e) => format!(
            "its {} is unreadable ({e:#})",
            crate::sweepdir::fingerprint::FILE
        ),
        _ => format!("it has no {}", crate::sweepdir::fingerprint::FILE),
    };
    anyhow::bail!(
        "{flag}: {} is not a seedsweep sweep folder ({why}) and is not empty: it holds {}{}. \
         seedsweep writes only into a new or empty folder, or over a sweep of its own, and \
         never removes or replaces what it did not write; give another folder",
        dir.display(),
        shown.join(", "),
        if foreign.len() > 3 {
            format!(" and {} more", foreign.len() - 3)
        } else {
            String::new()
        }
    )
}

/// Makes `dir` ready for a new sweep: checks that it is new, empty or a sweep folder
/// ([`check_ours`]), creates it, takes its lock, checks that every owned name is a regular
/// file or absent, then removes the owned files and stale temporaries.
pub fn prepare_new(dir: &Path, flag: &str) -> anyhow::Result<Lock> {
    let checks = || -> anyhow::Result<()> {
        for f in FILES {
            check_regular(dir, f.name, flag)?;
        }
        check_ours(dir, flag)
    };
    // Before the probe and the lock touch the folder, and again once the lock is held (taking
    // it may wait up to a lease, while another writer could change the folder).
    checks()?;
    crate::sys::atomic_write::prepare_dir(dir, flag)?;
    let lock = Lock::acquire(dir, flag)?;
    checks()?;
    // In reverse order, the fingerprint last: a kill in between leaves a folder whose
    // fingerprint still describes what is left (which `--resume` either continues or refuses).
    for f in FILES.iter().rev() {
        let p = dir.join(f.name);
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("{flag}: cannot remove {}", p.display()))
            }
            _ => {}
        }
    }
    remove_temps(dir)?;
    Ok(lock)
}

/// Opens `dir` to continue the sweep in it: takes its lock, checks the owned names, removes
/// stale temporaries.
pub fn open_existing(dir: &Path, flag: &str) -> anyhow::Result<Lock> {
    let lock = Lock::acquire(dir, flag)?;
    for f in FILES {
        check_regular(dir, f.name, flag)?;
    }
    remove_temps(dir)?;
    Ok(lock)
}

/// Whether `dir/name` exists (as anything).
pub fn has(dir: &Path, name: &str) -> bool {
    std::fs::symlink_metadata(dir.join(name)).is_ok()
}
