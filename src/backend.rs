//! Backends: the arithmetic one computation of a scenario runs in.
//!
//! A scenario's model code is written once, generic over [`Backend`], and run three times:
//! with [`F64Backend`] (the float64 ground truth), and with [`F32Backend`] for the unsharded
//! reference (TP degree 1) and for the sharded computation (TP degree N). The backend decides
//! how every matmul and every all-reduce rounds; elementwise code rounds as written.

use crate::fp::allreduce::{all_reduce_sum, AllReduceAlgo, Wire};
use crate::fp::matmul::{matmul_f64, matmul_nt_f64, matmul_tn_f64, MatmulModel, MatmulScratch};
use crate::profile::Profile;
use crate::real::Real;

/// The matmul and collective arithmetic of one computation.
pub trait Backend {
    /// Scalar type of the computation.
    type R: Real;
    /// `c (m×n) = a (m×k) · b (k×n)`, all row-major.
    fn matmul(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    );
    /// `c (m×n) = a (m×k) · bᵀ` with `b` stored `n×k` (torch's `F.linear(a, b)`).
    fn matmul_nt(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    );
    /// `c (m×n) = aᵀ · b` with `a` stored `k×m` (weight gradients `dYᵀ · X`).
    fn matmul_tn(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    );
    /// Sums `n_ranks` buffers stored rank-major in `parts` into `out`, as the profile's
    /// collective does. Every rank holds the same result, so one copy is returned. With one
    /// rank there is no collective and `out` is a plain copy.
    fn all_reduce(&mut self, parts: &[Self::R], n_ranks: usize, out: &mut [Self::R]);
}

/// Float64 ground truth: sequential `c = c + a·b` matmuls (see [`matmul_f64`]) and rank-order
/// all-reduce. Only the unsharded model runs in it.
#[derive(Debug, Default, Clone, Copy)]
pub struct F64Backend;

impl Backend for F64Backend {
    type R = f64;
    fn matmul(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        matmul_f64(a, b, c, m, k, n);
    }
    fn matmul_nt(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        matmul_nt_f64(a, b, c, m, k, n);
    }
    fn matmul_tn(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        matmul_tn_f64(a, b, c, m, k, n);
    }
    /// Rank order: `((x0 + x1) + x2) + …`, in f64.
    fn all_reduce(&mut self, parts: &[f64], n_ranks: usize, out: &mut [f64]) {
        let len = out.len();
        out.copy_from_slice(&parts[..len]);
        for r in 1..n_ranks {
            for (o, x) in out.iter_mut().zip(&parts[r * len..(r + 1) * len]) {
                *o += *x;
            }
        }
    }
}

/// fp32 arithmetic in a numerics profile: its matmul model for every matmul (forward and
/// backward, as XLA applies a precision to every f32 dot), and its all-reduce model.
pub struct F32Backend<'a> {
    /// How every matmul rounds.
    pub matmul: MatmulModel,
    /// All-reduce reduction order.
    pub algo: AllReduceAlgo,
    /// All-reduce buffer dtype.
    pub wire: Wire,
    /// Reusable matmul buffers.
    pub scratch: &'a mut MatmulScratch,
}

impl<'a> F32Backend<'a> {
    /// The backend of `profile`, borrowing a thread's scratch buffers.
    pub fn new(profile: &Profile, scratch: &'a mut MatmulScratch) -> Self {
        Self {
            matmul: profile.matmul,
            algo: profile.allreduce,
            wire: profile.wire,
            scratch,
        }
    }
}

impl Backend for F32Backend<'_> {
    type R = f32;
    fn matmul(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        self.matmul.matmul(a, b, c, m, k, n, self.scratch);
    }
    fn matmul_nt(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        self.matmul.matmul_nt(a, b, c, m, k, n, self.scratch);
    }
    fn matmul_tn(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        self.matmul.matmul_tn(a, b, c, m, k, n, self.scratch);
    }
    fn all_reduce(&mut self, parts: &[f32], n_ranks: usize, out: &mut [f32]) {
        if n_ranks == 1 {
            // One rank has no collective: nothing goes on the wire.
            out.copy_from_slice(parts);
        } else {
            all_reduce_sum(self.algo, self.wire, parts, n_ranks, out);
        }
    }
}
