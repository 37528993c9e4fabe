//! A sweep folder (`sweep --out`, `merge --out`) holds exactly one sweep.
//!
//! Policy: a new sweep into a folder removes the files seedsweep owns there ([`FILES`], and
//! their temporary files) before it writes anything, and leaves every other file alone; so a
//! folder never mixes the files of two sweeps. A name seedsweep owns that is not a regular
//! file (a symlink, a FIFO, a folder) is refused, never removed or written through. Writers
//! take the folder's [lock](crate::lock) first.
//!
//! To add a file kind to sweep folders, add one line to [`FILES`].

use std::path::Path;

use anyhow::Context;

use crate::export::output::is_temp_of;
use crate::lock::Lock;

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
        name: crate::fingerprint::FILE,
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
        name: crate::export::frontiers::PARTIAL,
        what: "per-seed frontiers of an unfinished sweep",
    },
    Owned {
        name: crate::export::frontiers::FILE,
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
        name: crate::export::rowlog::PARTIAL,
        what: "per-seed rows of an unfinished --format parquet sweep",
    },
    Owned {
        name: crate::export::parquet::FILE,
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

/// Makes `dir` ready for a new sweep: creates it, takes its lock, checks that every owned
/// name is a regular file or absent, then removes the owned files and stale temporaries.
pub fn prepare_new(dir: &Path, flag: &str) -> anyhow::Result<Lock> {
    crate::export::prepare_dir(dir, flag)?;
    let lock = Lock::acquire(dir, flag)?;
    for f in FILES {
        check_regular(dir, f.name, flag)?;
    }
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
