//! `seedsweep check FILE`: validates a scenario file and prints its resolved graph (every
//! tensor's shape per rank, the collectives, the training, the checks with their tolerances);
//! the work is [`crate::scenario::describe`].

use std::path::Path;

use crate::commands::emit;

/// Prints the resolved graph of `path`, or returns the file's first error (file, key path,
/// what is allowed). Then, on stderr, what its default profiles that mirror torch's CPU do
/// not cover exactly ([`crate::engine::exactness`]); with `strict`, that is an error.
pub fn check(path: &Path, strict: bool) -> anyhow::Result<i32> {
    emit(&crate::scenario::describe::check_path(path)?);
    // The file's own scenario (it replaces a built-in of the same name in the catalog).
    let text = crate::scenario::config::read_config(path, "FILE")?;
    let name = crate::scenario::load(&path.display().to_string(), &text)?
        .common
        .name;
    let catalog = crate::engine::catalog::Catalog::load(&[path], None)?;
    let groups = catalog.select(&crate::engine::catalog::Selection {
        scenarios: Some(vec![name]),
        ..Default::default()
    })?;
    crate::engine::exactness::announce(&catalog, &groups, strict, "--strict-exactness")?;
    Ok(0)
}
