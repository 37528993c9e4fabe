//! Process plumbing: the allocator counters, atomic file writes, interrupt handling, progress
//! bars, memory limits and the input-error type.

pub mod alloc;
pub mod atomic_write;
pub mod error;
pub mod interrupt;
pub mod limits;
pub mod progress;
