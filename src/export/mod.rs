//! Writers: one file per output format.

pub mod csv;
pub mod dump;
pub mod frontiers;
pub mod html;
pub mod svg;
pub mod table;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Creates `dir` (and parents) and proves it is writable by creating and removing a probe
/// file, so that a bad `--out` fails before any work starts.
pub fn prepare_dir(dir: &Path, flag: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag}: cannot create directory {}", dir.display()))?;
    let probe = dir.join(".seedsweep-write-probe");
    std::fs::File::create(&probe)
        .with_context(|| format!("{flag}: directory {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed and
/// synced, then renamed over `path`. A reader never sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp: PathBuf = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
