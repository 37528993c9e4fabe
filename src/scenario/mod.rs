//! The input: the scenario language (one TOML file describes a test,
//! `docs/scenario-language.md`), the IR it lowers into ([`ir`]), configs and policies
//! ([`config`]), numerics profiles ([`profile`], [`revealed_file`]), mutants ([`mutant`]) and
//! how dimensions are split over ranks ([`shard`]). The catalog of what a run knows is
//! [`crate::engine::catalog`].
//!
//! The pipeline, in module order:
//!
//! ```text
//! file (top level, policies) -> params (one patched document per [[params]] entry)
//!   -> spec (typed, dims substituted) -> resolve (shapes per rank, shards, collectives,
//!   checks; every mismatch found here) -> lower (the executor's IR, [`ir`])
//!   -> validate (what the executor relies on) -> describe (the text `seedsweep check`
//!   prints, and `list`'s line); [`load`] runs them all, and `exec::build` makes the result
//!   runnable
//! ```
//!
//! Files with a DiLoCo outer loop (`[train.outer]`) are read by [`outer`] into one graph that
//! the graph executor runs with its outer-loop wrapper ([`crate::exec::outer_loop`]).

pub mod config;
pub mod describe;
pub mod file;
pub mod ir;
pub mod lower;
pub mod mutant;
pub mod node;
pub mod outer;
pub mod params;
pub mod profile;
pub mod resolve;
pub mod revealed_file;
pub mod shard;
pub mod spec;
pub mod validate;
pub mod values;

pub use file::{is_scenario_file, parse_file, ScenarioFile};

use crate::sys::error::InputError;

/// The one route of every scenario file, built-in or `--config`, outer loop included: parsed,
/// resolved, lowered and validated ([`validate`]) into a [`ScenarioFile`]. `file` names the
/// file in errors. A text that is not a file of the language is refused, naming the key.
pub fn load(file: &str, text: &str) -> Result<ScenarioFile, InputError> {
    let parsed = if outer::is_outer_file(text) {
        outer::parse(file, text)?
    } else if is_scenario_file(text) {
        parse_file(file, text)?
    } else {
        let key = match toml::from_str::<toml::Table>(text) {
            Ok(t) if t.contains_key("scenario") => "scenario",
            Ok(_) => "layers",
            Err(e) => return Err(crate::scenario::profile::toml_error(file, e)),
        };
        return Err(InputError::config(
            file,
            key,
            "not a file of the scenario language: a test is described by a [[layers]] list (or a \
             [loss] on its inputs alone) and no `scenario` key (docs/scenario-language.md), as configs/deepspeed_row_parallel.toml",
        ));
    };
    validate::validate_graphs(&parsed.common.file, &parsed.lowered)?;
    for (g, r) in parsed.lowered.iter().zip(&parsed.references) {
        if let Some(r) = r {
            let at = if parsed.lowered.len() > 1 {
                format!("params[{}].parallel.reference", g.id)
            } else {
                "parallel.reference".to_string()
            };
            validate::validate_graphs(&parsed.common.file, std::slice::from_ref(&r.lowered))
                .map_err(|e| file::under_reference(&parsed.common.file, &at, e))?;
        }
    }
    Ok(parsed)
}
