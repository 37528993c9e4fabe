//! `seedsweep report`: one self-contained HTML page from a sweep folder.

use std::path::Path;

use crate::commands::status;

/// Writes the report of the sweep folder `dir` to `out` (`-`: stdout) and says on stderr
/// what it wrote (unless `quiet`). The folder's files must match the checksums its
/// fingerprint records.
pub fn report(dir: &Path, out: &Path, quiet: bool) -> anyhow::Result<i32> {
    if let Ok(Some(fp)) = crate::sweepdir::fingerprint::Fingerprint::read(dir) {
        crate::sweepdir::fingerprint::verify_checksums(dir, &fp, "report")?;
    }
    let stats = crate::report::html::write_report(dir, out)?;
    status(
        quiet,
        &format!(
            "wrote {} ({} charts, {} checks)",
            out.display(),
            stats.charts,
            stats.checks
        ),
    );
    Ok(0)
}
