//! Building blocks of the mirrored models, written once and generic over the [`Real`] type
//! and the [`Backend`](crate::ops::backend::Backend) that decides how matmuls and collectives
//! round. Each function states its order of operations; elementwise operations round once
//! per written operation (Rust never fuses on its own).
//!
//! [`Real`]: crate::ops::real::Real

pub mod activations;
pub mod attention;
pub mod backend;
pub mod layers;
pub mod loss;
pub mod moe;
pub mod norm;
pub mod optim;
pub mod real;
pub mod ring;
pub mod rope;
pub mod softmax;
pub mod tp;
pub mod vocab_parallel;
pub mod xla;
