//! Process plumbing: the allocator counters, interrupt handling, progress bars, memory limits
//! and the input-error type.

pub mod alloc;
pub mod error;
pub mod interrupt;
pub mod limits;
pub mod progress;
