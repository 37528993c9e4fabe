//! Tolerances and what checks them: the usage kernels ([`usage`]), the comparisons
//! ([`comparison`]), Python's float repr ([`python_repr`]) and torch's mismatch report
//! ([`torch_message`]).
//!
//! **Usage** of one element is `|actual - expected| / (atol + rtol·|expected|)`, the criterion
//! of `torch.isclose` and numpy's `assert_allclose`, evaluated in f64 (both operands are
//! exactly representable there). The usage of a tensor is the maximum over its elements;
//! above 1 (100 %) the check fails. Special cases, in this order:
//! - `actual == expected` (including equal infinities) has usage 0, also when atol = rtol = 0;
//! - a NaN on either side, an infinity that differs, or any difference where the allowance is
//!   0 (atol = rtol = 0, or atol = 0 and expected = 0) has usage +∞ and counts as non-finite
//!   when a NaN or infinity is involved. Nothing is hidden: +∞ is written `inf`.

pub mod comparison;
pub mod python_repr;
pub mod torch_message;
pub mod usage;

/// An (atol, rtol) pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Tolerance {
    /// torch's fp32 default (`torch.testing.assert_close`): atol 1e-5, rtol 1.3e-6.
    pub const TORCH_FP32: Tolerance = Tolerance {
        atol: 1e-5,
        rtol: 1.3e-6,
    };

    /// `atol + rtol·|expected|`, in f64.
    #[inline]
    pub fn allowed(&self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }

    /// Usage of one element; see the module doc for the special cases.
    #[inline]
    pub fn usage(&self, actual: f64, expected: f64) -> f64 {
        if actual == expected {
            return 0.0;
        }
        let diff = (actual - expected).abs();
        if !diff.is_finite() {
            // A NaN, or an infinity on one side only (also when expected is infinite and the
            // allowance with it: inf/inf must not become NaN).
            return f64::INFINITY;
        }
        let allowed = self.allowed(expected);
        if allowed == 0.0 {
            return f64::INFINITY;
        }
        diff / allowed
    }
}

/// Where in a run a value was observed: an optimizer step, and for checks made at every
/// gradient-accumulation micro-step, the micro-step within it. Displayed `2` or `2.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StepLabel {
    /// Optimizer step, from 0 (or the 1-based step for scenarios whose test counts from 1).
    pub step: u32,
    /// Micro-step within the step, for per-micro-step checks.
    pub micro: Option<u32>,
}

impl StepLabel {
    /// A plain step.
    pub fn step(step: u32) -> Self {
        Self { step, micro: None }
    }
    /// A micro-step of a step.
    pub fn micro(step: u32, micro: u32) -> Self {
        Self {
            step,
            micro: Some(micro),
        }
    }
}

impl std::fmt::Display for StepLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.micro {
            None => write!(f, "{}", self.step),
            Some(m) => write!(f, "{}.{}", self.step, m),
        }
    }
}
