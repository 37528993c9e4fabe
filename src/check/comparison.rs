//! What a check compares: the sharded computation, the unsharded fp32 reference and the
//! float64 truth, two at a time.

/// One of the three comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Comparison {
    /// Sharded vs unsharded fp32.
    ShardedVsRef,
    /// Unsharded fp32 vs float64.
    RefVsF64,
    /// Sharded fp32 vs float64.
    ShardedVsF64,
}

impl Comparison {
    /// All three, in output order.
    pub const ALL: [Comparison; 3] = [Self::ShardedVsRef, Self::RefVsF64, Self::ShardedVsF64];

    /// The name used in CSV files and flags.
    pub fn name(self) -> &'static str {
        match self {
            Self::ShardedVsRef => "sharded-vs-ref",
            Self::RefVsF64 => "ref-vs-f64",
            Self::ShardedVsF64 => "sharded-vs-f64",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Whether both sides are fp32 tensors (torch's messages then compute in f32).
    pub fn both_f32(self) -> bool {
        self == Self::ShardedVsRef
    }
}
