//! Helpers shared by the suite's modules.

pub mod alone;
pub mod checkpoint;
pub mod digest;
pub mod legacy_graphs;
pub mod recorded;
pub mod splitmix;
