//! The scenario language: one TOML file describes a test (`docs/scenario-language.md`).
//!
//! The pipeline, in module order:
//!
//! ```text
//! file (top level, policies) -> params (one patched document per [[params]] entry)
//!   -> spec (typed, dims substituted) -> resolve (shapes per rank, shards, collectives,
//!   checks; every mismatch found here) -> lower (the executor's IR, `graph::ir`)
//!   -> check (the text `seedsweep check` prints); build: the runnable scenario (graph executor)
//! ```
//!
//! Files with a DiLoCo outer loop (`[train.outer]`) are read by [`outer`] into one graph that
//! the graph executor runs with its outer-loop wrapper ([`crate::graph::outer_loop`]).

pub mod build;
pub mod check;
pub mod file;
pub mod lower;
pub mod node;
pub mod outer;
pub mod params;
pub mod resolve;
pub mod spec;

pub use file::{is_scenario_file, parse_file, ScenarioFile};
