//! Scenarios described as graphs: the resolved graph IR ([`ir`]) that the scenario language
//! lowers into, and the executor that runs any such graph as a [`crate::scenario::Scenario`]
//! ([`GraphScenario`]).
//!
//! See [`ir`] for the execution model: init in construction order, inputs per micro-step,
//! forward in layer order, backward in reverse, accumulation, optimizer step, checks recorded
//! in three phases per micro-step.
//!
//! Files: [`ir`] (the data), [`init`] (parameter and input draws), [`exec`] (one
//! computation of a graph through a backend), [`scenario`] (validation, preparation and the
//! `Scenario` implementation), [`outer_loop`] (DiLoCo's outer loop around the executor's
//! inner step), `memory` (a bound on one seed-run's memory).

pub mod exec;
pub mod init;
pub mod ir;
mod memory;
pub mod outer_loop;
pub mod scenario;

pub use scenario::GraphScenario;
