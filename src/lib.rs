//! seedsweep: a seed-sweep numerical divergence harness.
//!
//! The pipeline, in module order:
//!
//! ```text
//! config (TOML) -> catalog (scenario × param × profile × mutant)
//!   -> engine: plan (groups × seeds × shards -> work units)
//!              run (one seed -> f64, unsharded fp32, sharded fp32 traces; the scenario's
//!                   model/ code on backend, fp/ kernels, rng/ draws)
//!              evaluate (checks under tolerance policies -> rows, frontiers)
//!              aggregate (seed order -> summaries, tails)
//!   -> commands/ (one file per command) -> export (csv, table, html, ...)
//! ```
#![warn(missing_docs)]

pub mod alloc;
pub mod backend;
pub mod catalog;
pub mod check;
pub mod checkpoint;
pub mod cli;
pub mod commands;
pub mod config;
pub mod engine;
pub mod error;
pub mod export;
pub mod fingerprint;
pub mod folder;
pub mod fp;
pub mod graph;
pub mod interrupt;
pub mod lang;
pub mod limits;
pub mod lock;
pub mod model;
pub mod mutant;
pub mod profile;
pub mod progress;
pub mod real;
pub mod revealed;
pub mod rng;
pub mod scenario;
pub mod shard_set;
pub mod sizing;
pub mod stats;
pub mod trace;
pub mod verdict;

/// The evaluation of one seed's traces, at its former path (scenario code names
/// `crate::evaluate::Comparison`).
pub use engine::evaluate;
