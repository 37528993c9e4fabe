//! `seedsweep report`: one self-contained HTML page from a sweep folder.

use std::path::Path;

use crate::commands::emitln;

/// Writes the report of the sweep folder `dir` to `out` (`-`: stdout) and says what it wrote.
pub fn report(dir: &Path, out: &Path) -> anyhow::Result<i32> {
    if let Ok(Some(fp)) = crate::fingerprint::Fingerprint::read(dir) {
        crate::fingerprint::verify_checksums(dir, &fp, "report")?;
    }
    let stats = crate::export::html::write_report(dir, out)?;
    let msg = format!(
        "wrote {} ({} charts, {} checks)",
        out.display(),
        stats.charts,
        stats.checks
    );
    if out.as_os_str() == "-" {
        // The report itself went to stdout.
        eprintln!("{msg}");
    } else {
        emitln(&msg);
    }
    Ok(0)
}
