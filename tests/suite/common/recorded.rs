//! Measured tables kept in the repository (agreement counts, the conformance table): a test
//! asserts that what it measures equals the recorded text, so a regression and an improvement
//! both fail it; `SEEDSWEEP_BLESS_CORPUS=1` rewrites the text instead, and its diff is the
//! evidence.

use std::path::Path;

/// Whether this run rewrites the recorded tables (`SEEDSWEEP_BLESS_CORPUS` set).
pub fn blessing() -> bool {
    std::env::var_os("SEEDSWEEP_BLESS_CORPUS").is_some()
}

/// When [`blessing`], writes `measured` to `path` and returns `None`; otherwise returns the
/// recorded text of `path` (empty when the file is missing, so that a comparison fails).
pub fn bless_or_recorded(path: impl AsRef<Path>, measured: &str) -> Option<String> {
    let path = path.as_ref();
    if blessing() {
        std::fs::write(path, measured).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return None;
    }
    Some(std::fs::read_to_string(path).unwrap_or_default())
}
