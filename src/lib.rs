//! seedsweep: a seed-sweep numerical divergence harness.
//!
//! The pipeline, in module order:
//!
//! ```text
//! config (TOML) -> catalog (scenario × param × profile × seed) -> scenario runs
//!   (f64, unsharded fp32, sharded fp32; model/ on backend, fp/ kernels, rng/ draws)
//!   -> trace -> evaluate (checks under tolerance policies) -> sweep (seed-order
//!   aggregation, stats) -> export (csv, table) / repro (torch-style messages)
//! ```
#![warn(missing_docs)]

pub mod app;
pub mod backend;
pub mod catalog;
pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod evaluate;
pub mod explain;
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
pub mod real;
pub mod repro;
pub mod revealed;
pub mod rng;
pub mod scale;
pub mod scenario;
pub mod size;
pub mod stats;
pub mod sweep;
pub mod trace;
