//! Writers: one file per output format.

pub mod csv;
pub mod dump;
pub mod frontiers;
pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod output;
pub mod parquet;
pub mod rowlog;
pub mod schema;
pub mod seeds_file;
pub mod svg;
pub mod table;

use std::path::Path;

use anyhow::Context;

/// Creates `dir` (and parents) and proves it is writable by creating and removing a probe
/// file, so that a bad `--out` fails before any work starts.
pub fn prepare_dir(dir: &Path, flag: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag}: cannot create directory {}", dir.display()))?;
    // An unpredictable name created exclusively: a link planted there is never followed.
    let probe = dir.join(format!(
        ".seedsweep-write-probe-{}-{:016x}",
        std::process::id(),
        output::random_u64()
    ));
    output::create_new(&probe)
        .with_context(|| format!("{flag}: directory {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to `path` under the rules of [`output`]: atomically (a temporary file in the
/// same folder, synced, then renamed) where the target is a regular file or absent, following
/// symlinks, in place for a FIFO or device, to stdout for `-`. A reader never sees a
/// half-written file, and a link, FIFO or device is never replaced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    output::write(path, bytes)
}
