//! A loaded scenario file ([`crate::scenario::load`]) made runnable: its lowered graphs
//! prepared for the graph executor ([`GraphScenario`]), with the comparison the file says
//! the test asserts and `list`'s line ([`crate::scenario::describe::summary`]).

use crate::exec::GraphScenario;
use crate::scenario::file::ScenarioFile;
use crate::sys::error::InputError;

/// The runnable scenario of a loaded file.
pub fn build(file: ScenarioFile) -> Result<GraphScenario, InputError> {
    let summary = crate::scenario::describe::summary(&file);
    if file.outer {
        let Some(g) = file.lowered.into_iter().next() else {
            return Err(InputError::config(&file.common.file, "layers", "required"));
        };
        GraphScenario::outer(file.common, g, file.compare, summary)
    } else {
        let references = file
            .references
            .into_iter()
            .map(|r| r.map(|r| r.lowered))
            .collect();
        GraphScenario::new(
            file.common,
            file.lowered,
            file.check_names,
            summary,
            file.compare,
        )?
        .with_references(references)
    }
}
