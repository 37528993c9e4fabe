//! `seedsweep check FILE`: validates a scenario file and prints its resolved graph (every
//! tensor's shape per rank, the collectives, the training, the checks with their tolerances);
//! the work is [`crate::scenario::describe`].

use std::path::Path;

use crate::commands::emit;

/// Prints the resolved graph of `path`, or returns the file's first error (file, key path,
/// what is allowed).
pub fn check(path: &Path) -> anyhow::Result<i32> {
    emit(&crate::scenario::describe::check_path(path)?);
    Ok(0)
}
