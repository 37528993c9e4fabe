//! Scenarios described as graphs: the resolved graph IR ([`ir`]) that the scenario language
//! lowers into, and the executor that runs any such graph as a [`crate::scenario::Scenario`].
//!
//! See [`ir`] for the execution model: init in construction order, inputs per micro-step,
//! forward in layer order, backward in reverse, accumulation, optimizer step, checks recorded
//! in three phases per micro-step.

pub mod ir;
