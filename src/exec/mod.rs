//! One computation of a scenario: the graph executor that runs a lowered graph
//! ([`crate::scenario::ir`], whose doc states the execution model: init in construction
//! order, inputs per micro-step, forward in layer order, backward in reverse, accumulation,
//! optimizer step, checks recorded in three phases per micro-step) through a backend, three
//! times per seed (float64, unsharded fp32, sharded fp32), as a [`scenario::Scenario`].
//!
//! Files: [`build`] (a loaded file made runnable), [`scenario`] (the trait, traces and the
//! per-thread workspace), [`graph_scenario`] ([`GraphScenario`]: preparation and the trait's
//! implementation), [`graph`] (one computation of a graph, with its data-parallel ranks),
//! [`init`] (parameter and input draws), [`outer_loop`] (DiLoCo's outer loop around the
//! executor's inner step), [`condition`] (condition-number records), [`trace`] (what a
//! computation records for its checks), `memory` (a bound on one seed-run's memory).

pub mod build;
pub mod condition;
pub mod graph;
pub mod graph_scenario;
pub mod init;
mod memory;
pub mod outer_loop;
pub mod scenario;
pub mod trace;

pub use graph_scenario::GraphScenario;
