//! Mutants: deliberate bugs injected into the sharded computation, to check that a tolerance
//! still catches the bugs its test exists for. A mutant replaces the sharded computation of a
//! seed-run; the reference and float64 computations stay clean.

/// A bug a tensor-parallel, data-parallel or DiLoCo test should catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mutant {
    /// Row-parallel: every rank after the first multiplies its input slice with weight
    /// columns shifted left by one (forward and backward).
    WrongShardOffset,
    /// Row-parallel: no all-reduce of the partial outputs; each rank keeps its own partial
    /// (rank 0's is observed).
    MissingAllreduce,
    /// Tied/untied head: the head's weight-gradient contribution is dropped.
    DroppedHeadGrad,
    /// Tied head: the embedding-lookup contribution to the tied gradient is dropped.
    DroppedEmbeddingGrad,
    /// Tied head: the head and the embedding keep separate copies of the tied weight, each
    /// updated from its own gradient contribution only.
    TiedWeightsDrift,
    /// Row-parallel: the input gradient is not gathered; each rank keeps only its slice
    /// (rank 0's view: the other columns are zero).
    MissingInputGradGather,
    /// Row-parallel: the all-reduce inputs are rounded to bf16 (a precision regression).
    Bf16Allreduce,
    /// DiLoCo: the pseudo-gradient sum is not divided by the replica count.
    NoReplicaMean,
    /// DiLoCo: the pseudo-gradient has the wrong sign (inner - outer).
    PseudoGradSign,
    /// DiLoCo: the outer optimizer uses plain momentum instead of Nesterov.
    NoNesterov,
    /// DiLoCo: replicas are not reset to the new outer parameters after a sync.
    StaleOuterParams,
    /// Data parallelism: no gradient all-reduce / reduce-scatter; every rank keeps its own
    /// local gradient, undivided (DDP: rank 0's is observed; ZeRO-2 / FSDP: shard c is
    /// updated from rank c's own gradient rows).
    MissingGradReduce,
    /// Data parallelism: the gradient collective runs on a bf16 wire (inputs and every
    /// partial sum rounded to bf16, [`crate::kernels::allreduce::Wire::Bf16`]), a precision
    /// regression such as FSDP's `reduce_dtype=torch.bfloat16`.
    Bf16GradReduce,
    /// Data parallelism: the last rank skips the parameter all-gather after every optimizer
    /// step, so all its later forwards and backwards run on the initial parameters.
    StaleParams,
}

impl Mutant {
    /// Every mutant, in output order.
    pub const ALL: [Mutant; 14] = [
        Self::WrongShardOffset,
        Self::MissingAllreduce,
        Self::DroppedHeadGrad,
        Self::DroppedEmbeddingGrad,
        Self::TiedWeightsDrift,
        Self::MissingInputGradGather,
        Self::Bf16Allreduce,
        Self::NoReplicaMean,
        Self::PseudoGradSign,
        Self::NoNesterov,
        Self::StaleOuterParams,
        Self::MissingGradReduce,
        Self::Bf16GradReduce,
        Self::StaleParams,
    ];

    /// The name used on the command line and in CSV files.
    pub fn name(self) -> &'static str {
        match self {
            Self::WrongShardOffset => "wrong-shard-offset",
            Self::MissingAllreduce => "missing-allreduce",
            Self::DroppedHeadGrad => "dropped-head-grad",
            Self::DroppedEmbeddingGrad => "dropped-embedding-grad",
            Self::TiedWeightsDrift => "tied-weights-drift",
            Self::MissingInputGradGather => "missing-input-grad-gather",
            Self::Bf16Allreduce => "bf16-allreduce",
            Self::NoReplicaMean => "no-replica-mean",
            Self::PseudoGradSign => "pseudo-grad-sign",
            Self::NoNesterov => "no-nesterov",
            Self::StaleOuterParams => "stale-outer-params",
            Self::MissingGradReduce => "missing-grad-reduce",
            Self::Bf16GradReduce => "bf16-grad-reduce",
            Self::StaleParams => "stale-params",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether the mutant changes structure (moves values by far more than rounding) rather
    /// than precision. `bf16-allreduce` and `bf16-grad-reduce` are the precision mutants.
    pub fn structural(self) -> bool {
        !matches!(self, Self::Bf16Allreduce | Self::Bf16GradReduce)
    }
}

/// Tensor-parallel faults a mutant injects into the row-parallel layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpFaults {
    /// Skip the all-reduce: rank 0's partial is the output.
    pub no_allreduce: bool,
    /// Round every partial to bf16 before the all-reduce.
    pub bf16_inputs: bool,
    /// Skip the input-gradient gather: only rank 0's columns are filled, the rest are zero.
    pub no_input_grad_gather: bool,
    /// Shift the weight columns of every rank after the first left by one.
    pub shifted_weights: bool,
}

impl TpFaults {
    /// The faults of `mutant` (none for mutants that act elsewhere).
    pub fn of(mutant: Option<Mutant>) -> Self {
        let mut f = Self::default();
        match mutant {
            Some(Mutant::MissingAllreduce) => f.no_allreduce = true,
            Some(Mutant::Bf16Allreduce) => f.bf16_inputs = true,
            Some(Mutant::MissingInputGradGather) => f.no_input_grad_gather = true,
            Some(Mutant::WrongShardOffset) => f.shifted_weights = true,
            _ => {}
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        for m in Mutant::ALL {
            assert_eq!(Mutant::parse(m.name()), Some(m));
        }
        let mut names: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Mutant::ALL.len());
    }
}
