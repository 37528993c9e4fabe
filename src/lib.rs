//! seedsweep: a seed-sweep numerical divergence harness.
//!
//! The pipeline, one folder per stage:
//!
//! ```text
//! scenario  the input: the scenario language (parse, resolve, validate, lower to the IR),
//!           the catalog of scenarios × params × profiles × mutants, configs and policies
//! engine    plan (groups × seeds × shards -> work units), run one seed, evaluate, aggregate
//! exec      one computation of a scenario: the graph executor, backends, DP, outer loop
//!   ops     the mirrored layers (linear, norms, activations, losses, optimizers)
//!   kernels exact IEEE kernels in stated orders (matmul, all-reduce, transcendentals)
//!   rng     torch's and JAX's generators
//! check     tolerances, usage, torch's mismatch message
//! stats     order statistics, tails, frontiers (maths only)
//! results   the output tables: one schema, its CSV, Parquet and row-log codecs
//! report    what reads the results: table, HTML, SVG, Markdown, JSON/JUnit verdicts, sizing
//! sweepdir  the sweep folder: ownership, lock, fingerprint, checkpoint, shard set
//! sys       process plumbing: allocation, atomic writes, interrupts, progress, memory
//!           limits, input errors
//! commands  one file per command; cli parses the flags
//! ```
#![warn(missing_docs)]

pub mod check;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod exec;
pub mod kernels;
pub mod ops;
pub mod report;
pub mod results;
pub mod rng;
pub mod scenario;
pub mod stats;
pub mod sweepdir;
pub mod sys;
