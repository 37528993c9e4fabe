//! Scenarios described as graphs: the resolved graph IR ([`ir`]) that the scenario language
//! lowers into, and the executor that runs any such graph as a [`crate::exec::scenario::Scenario`]
//! ([`GraphScenario`]).
//!
//! See [`ir`] for the execution model: init in construction order, inputs per micro-step,
//! forward in layer order, backward in reverse, accumulation, optimizer step, checks recorded
//! in three phases per micro-step.
//!
//! Files: [`crate::scenario::ir`] (the data, lowered by the scenario language), [`init`] (parameter and input draws), [`graph`] (one
//! computation of a graph through a backend), [`graph_scenario`] (validation, preparation and the
//! `Scenario` implementation), [`outer_loop`] (DiLoCo's outer loop around the executor's
//! inner step), `memory` (a bound on one seed-run's memory).

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
