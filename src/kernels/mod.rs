//! Exact IEEE floating-point kernels in stated orders.
//!
//! Every function in this module computes its result in one documented order of
//! IEEE-754 binary32/binary64 operations, so a result is a fact about that order
//! rather than an accident of the compiler or the CPU. The orders and their
//! sources are collected in `shared/docs/numerics.md`.
//!
//! - [`isa`]: the one CPU dispatch: which compilation of the vector kernels runs, detected
//!   once, forced by tests and capped by `SEEDSWEEP_ISA`.
//! - [`round`]: f32 -> bf16 / f16 / TF32 roundings and XLA's bf16 splits.
//! - [`dot`]: scalar reference dot products (the specification the fast kernels
//!   are tested against).
//! - [`matmul`]: K-split / accumulation / pass models and the fast matmul kernels.
//! - [`allreduce`]: ring, rank-order and tree all-reduce sums, with f32 or bf16 wire.
//! - [`exp_slice`]: the f64 exp of a slice, bit for bit libm's, vectorized.
//! - [`tanh64_slice`]: the f64 tanh of a slice, bit for bit libm's, vectorized.
//! - [`tanh_slice`]: the f32 tanh of a slice, a proven fast path beside the exact kernel.
//! - `avx512`: lane helpers (block loads with a zero-filled tail) for the AVX-512 kernels,
//!   and the block loop of the elementwise f64 kernels.
//! - [`revealed`]: per-element summation trees revealed from a framework (FPRev), executed.
//! - [`mkl_sgemm`]: torch's f32 matmuls as MKL orders them at one thread, for every shape (a
//!   generative model of the orders [`revealed`] measures per shape).
//! - [`mkl_sqrt`]: torch's f32 `sqrt` (MKL's `vsSqrt` on the measured CPU), bit for bit.
//!
//! This module uses only `std`, `half` and `libm`; it depends on no other part of
//! the crate.

pub mod allreduce;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod dot;
pub mod exp_slice;
pub mod isa;
pub mod matmul;
pub mod mkl_sgemm;
pub mod mkl_sqrt;
pub mod revealed;
pub mod round;
pub mod tanh64_slice;
pub mod tanh_slice;
pub mod torch_ops;
