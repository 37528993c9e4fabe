//! The input: the scenario language (one TOML file describes a test, `docs/scenario-language.md`),
//! the IR it lowers into ([`ir`]), the catalog of scenarios and profiles ([`catalog`]), configs
//! and policies ([`config`]), numerics profiles ([`profile`], [`revealed_file`]) and mutants
//! ([`mutant`]).
//!
//! The pipeline, in module order:
//!
//! ```text
//! file (top level, policies) -> params (one patched document per [[params]] entry)
//!   -> spec (typed, dims substituted) -> resolve (shapes per rank, shards, collectives,
//!   checks; every mismatch found here) -> lower (the executor's IR, [`ir`])
//!   -> describe (the text `seedsweep check` prints); `exec::build`: the runnable scenario
//! ```
//!
//! Files with a DiLoCo outer loop (`[train.outer]`) are read by [`outer`] into one graph that
//! the graph executor runs with its outer-loop wrapper ([`crate::exec::outer_loop`]).

pub mod catalog;
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

pub use file::{is_scenario_file, parse_file, ScenarioFile};
