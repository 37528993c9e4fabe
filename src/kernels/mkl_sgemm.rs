//! torch 2.15's CPU f32 matmuls at one thread as MKL's `sgemm` orders them, for every shape: a
//! generative model of the order of every output element, from the shape and the position of
//! the element alone (no per-shape table); and at two threads (section "Two threads").
//!
//! # Which code computes the product
//!
//! torch calls one BLAS routine for all four matmul roles of `F.linear` ([`Role`]): `mm` and
//! `addmm` reach `addmm_impl_cpu_` (ATen `aten/src/ATen/native/LinearAlgebra.cpp`), which
//! makes the row-major result a column-major `C` by swapping the operands (`transpose_c`) and
//! calls `at::native::cpublas::gemm` (`aten/src/ATen/native/CPUBlas.cpp`); for f32 that calls
//! MKL's `sgemm_` whenever `use_blas_gemm` holds (it does for contiguous and transposed
//! operands), oneDNN only in the reduced-precision f32 modes (`mkldnn_reduced_f32_gemm`; off by
//! default), and ATen's own `gemm_stub` never. So the three products are, column-major:
//!
//! | role | torch | `sgemm` | `m`, `n`, `k` |
//! |---|---|---|---|
//! | forward (`matmul_nt`) | `addmm(b, x, W.t())` / `mm(x, W.t())` | `('T', 'N')`, `A` = W, `B` = x | cols, rows, red |
//! | grad-input (`matmul`) | `mm(dy, W)` | `('N', 'N')`, `A` = W, `B` = dy | cols, rows, red |
//! | grad-weight (`matmul_tn`) | `mm(dy.t(), x)` | `('N', 'T')`, `A` = x, `B` = dy | cols, rows, red |
//!
//! and `addmm`'s bias is `C` on entry, `beta = 1` (`rows`, `red`, `cols` are the output rows,
//! the reduction length and the output columns of [`Role`]).
//!
//! # The orders (measured)
//!
//! MKL's kernels are closed and dispatch on the CPU they run on; the orders below were
//! measured with torch 2.15.0+cu132 (MKL 2024.2), `torch.set_num_threads(1)`,
//! `ATEN_CPU_CAPABILITY=avx2`, eager, on an AMD EPYC (Zen 4, family 25 model 17, AVX-512), every
//! operand freshly allocated by torch (64-byte aligned, as in training), with
//! `scripts/reveal_order.py` (FPRev: the summation tree of every element) and random inputs
//! against this model's programs (`scripts/mkl_order_model.py`). A product is a tree over the
//! reduction terms `t`; every accumulator starts at `+0`; "rounded" terms are `fl(a_t·b_t)`
//! added with one rounding, "fused" terms enter an FMA.
//!
//! The kernel is chosen by role and shape ([`MklKernel`]):
//! - **Main** (`rows >= 4` and `cols >= 12`, every role): the FMA chain of `cpu-fma` — K cut
//!   by [`KSplit::Mkl`], each block an FMA chain from `+0`, blocks added left to right. The
//!   bias of `addmm` joins after the first block: `((blk0 + bias) + blk1) + …` (with one block,
//!   `blk0 + bias`).
//! - **GemvRows** (forward with `rows == 1` or `cols == 1`; grad-input with `cols == 1 <
//!   rows`): one operand is a vector `v` at a 16-byte boundary and every output element is
//!   the dot of `v` with one contiguous row of the other operand (`u_j`, at float offset
//!   `j·red`). Rows go in groups of four: the group of rows `4g..4g+3` peels
//!   `p = 4 − ((4g + 3)·red mod 4)` terms (1 to 4: to the 16-byte boundary of the group's
//!   fourth row, at least one), then runs [`vdot`] with 4 lanes and steps of 4. The last
//!   `count mod 4` rows peel `p = 4` (4 − the vector's float offset mod 4), the first and
//!   third of them by [`vdot`] with 8 lanes and steps of 8, the second with 4 lanes and steps
//!   of 8.
//! - **DotTn** (forward otherwise): element `(i, j)` is the dot of x's row `i` (float offset
//!   `i·red`) and W's row `j`, peeling `p = (−i·red) mod 4` terms (0 to 3, to the next 16-byte
//!   boundary of x's row); the columns in whole groups of four (`j < 4⌊cols/4⌋`) by [`vdot`]
//!   with 4 lanes and steps of 4, the rest with 8 lanes and steps of 8.
//! - **ChainNn** (grad-input and grad-weight otherwise): the rounded chain
//!   `c = +0; c = c + fl(a_t·b_t)`, t ascending; except, in an output row `i` (float offset
//!   `i·cols` of C's row), the first `p = (−i·cols) mod 4` elements when `p > 0` and
//!   `cols − p >= 4` (the elements before C's row reaches a 16-byte boundary, where a vector
//!   loop over the row follows): [`p8`].
//! - **Chain** (grad-input 1 × 1): the rounded chain.
//!
//! [`vdot`] (`p` peeled terms, `L` lanes, steps of `S`): `s = +0; s = s + fl(a_t·b_t)` for
//! `t < p`; then lane `l` (lane 0 starting from `s`, the others from `+0`) adds the rounded
//! terms `p + l + L·q` for `q = 0, 1, …` over whole steps of `S` terms; the lanes are folded
//! in halves (`l_i + l_{i+L/2}`) down to four, then `(l0 + l2) + (l1 + l3)`; then the rest of
//! the terms are added one by one, rounded. When fewer than `S` terms follow the peel, all
//! terms are one rounded chain from `+0`.
//!
//! A bias (`F.linear(x, W, b)`) is added last, `y = fl(dot + b)`, except on **Main** with more
//! than one K block (above).
//!
//! Which pointer each peel follows was measured by starting the operands 0 to 8 floats past a
//! 64-byte boundary. Conditions: the thread count, the CPU (MKL picks other kernels on other
//! CPUs), and where the operands start: the rules are stated for operands at 16-byte
//! boundaries (torch's CPU allocator gives 64), rows packed (contiguous tensors). Signed zeros follow the `+0`
//! starts above; that MKL's accumulators start at `+0` is assumed, not measured (it matters
//! only when every term is `−0`). The model reproduces every program of
//! `configs/revealed/mkl-threads-1.toml` element for element (`tests`), and torch's outputs on
//! a held-out grid (`tests/suite/mkl_order_model.rs`).
//!
//! # Two threads
//!
//! At `torch.set_num_threads(2)` ([`OrderModel::MklSgemm2t`]; measured as above with two
//! threads) MKL runs a gemv (**GemvRows**, **Chain**) and a small product (`k <= 4`, or
//! `k <= 16` and `cols <= 16`; `k` the reduction without an `addmm` bias) on one thread, in the
//! one-thread order. Every other product is split between the two threads by output rows (MKL's
//! `n`): rows `0..r1` and `r1..rows`, `r1 = 4⌈⌈rows/2⌉/4⌉` (no split when `r1 >= rows`), no
//! split of K. Each part is computed as a product of its own rows by the one-thread gemm kernels
//! — **Main** when the part has 4 or more rows and `cols >= 12`, else the role's narrow kernel
//! (**DotTn** for the forward, **ChainNn** for the gradients), never a gemv, so a single-row
//! part is narrow too — with the peels of the absolute rows (`r1` is a multiple of 4, so a
//! part's row offsets are the sub-product's mod 4). A split changes an element's order only
//! where a part's kernel differs from the whole product's: the second part when it has 1 to 3
//! rows and `cols >= 12` ([`narrow_tail_2t`]: `rows` 5-7 and 9-11), whose elements are
//! narrow-kernel elements instead of **Main**'s FMA chains; every other element is in the
//! one-thread order. How the threads split wider products that both parts compute with
//! **Main** cannot be seen in the results (the order of each element is its own FMA chain over
//! the same K blocks either way) and is not modelled.
//!
//! Found with `scripts/mkl_order_model.py` (the same rules in Python) and random inputs against
//! torch at two threads: row counts 5-7, 9-11 and 13 against every `k` and `cols` in 1..40
//! (which elements leave the one-thread order, hence the threshold), random shapes with 5-7
//! and 9-11 rows (`k` < 600, `cols` < 1500), with 1-3 rows or 1-11 columns (`k` < 600, the
//! other dim < 2000), and reductions of 400-6000 (no K split); the model writes every
//! program of `configs/revealed/mkl-threads-2.toml` (84 matmuls of the built-in scenarios,
//! FPRev), and reproduces a held-out set drawn after it was fixed
//! (`tests/suite/mkl_order_model.rs`).
//!
//! The fast entry points compute **Main** and **ChainNn** with the vectorized kernels of
//! [`super::matmul`] (then the few [`p8`] elements), and the dot kernels four outputs at a
//! time; [`element`] is the scalar definition of one element, and [`element_program`] the
//! order of one element in the program syntax of [`super::revealed`] (a description; it
//! allocates). The entry points allocate nothing beyond the scratch buffers.

use super::isa::Isa;
use super::matmul::{Accum, KSplit, Mat, MatMut, MatmulModel, MatmulScratch, Passes};
use super::revealed::Role;
use std::fmt::Write as _;

/// The order models a profile can name (`order_model` in profiles.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderModel {
    /// MKL `sgemm` at one thread as torch 2.15 calls it (this module).
    MklSgemm1t,
    /// MKL `sgemm` at two threads as torch 2.15 calls it (this module, "Two threads").
    MklSgemm2t,
}

impl OrderModel {
    /// Every model, for listing.
    pub const ALL: [OrderModel; 2] = [Self::MklSgemm1t, Self::MklSgemm2t];

    /// Parses the profiles.toml name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The profiles.toml name.
    pub fn name(self) -> &'static str {
        match self {
            Self::MklSgemm1t => "mkl-sgemm-1t",
            Self::MklSgemm2t => "mkl-sgemm-2t",
        }
    }

    /// The thread count (`torch.set_num_threads`) whose orders the model gives.
    pub fn threads(self) -> usize {
        match self {
            Self::MklSgemm1t => 1,
            Self::MklSgemm2t => 2,
        }
    }
}

/// The torch thread count a profile mirrors, from what computes its matmuls: the order
/// model's, else the revealed orders' (`revealed_threads`), else 1. ATen's threaded kernels
/// (LayerNorm's weight and bias gradients) split their work by it, and the exactness report
/// names it.
pub fn torch_threads(model: Option<OrderModel>, revealed_threads: Option<u32>) -> usize {
    match (model, revealed_threads) {
        (Some(m), _) => m.threads(),
        (None, Some(t)) => t as usize,
        (None, None) => 1,
    }
}

/// MKL's main kernel: FMA chains over [`KSplit::Mkl`] blocks (`cpu-fma`'s matmul model).
pub const MAIN: MatmulModel = MatmulModel {
    split: KSplit::Mkl,
    accum: Accum::Fma,
    passes: Passes::F32,
};

/// The rounded chain of the narrow kernels: one block, `c = c + fl(a·b)`.
const CHAIN: MatmulModel = MatmulModel {
    split: KSplit::Single,
    accum: Accum::MulAdd,
    passes: Passes::F32,
};

/// Which of MKL's kernels computes a product (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MklKernel {
    /// FMA chains over K blocks.
    Main,
    /// Dots of a vector with the rows of the other operand.
    GemvRows,
    /// Forward's narrow dot kernel.
    DotTn,
    /// Rounded chains, with [`p8`] before C's row is aligned.
    ChainNn,
    /// One rounded chain.
    Chain,
}

/// The kernel of `role` for an output of `rows × cols` (module doc). `ForwardBias` is
/// `Forward`'s.
pub fn kernel(role: Role, rows: usize, cols: usize) -> MklKernel {
    match role {
        Role::Forward | Role::ForwardBias if rows == 1 || cols == 1 => MklKernel::GemvRows,
        Role::GradInput if cols == 1 => {
            if rows == 1 {
                MklKernel::Chain
            } else {
                MklKernel::GemvRows
            }
        }
        _ if rows >= 4 && cols >= 12 => MklKernel::Main,
        Role::Forward | Role::ForwardBias => MklKernel::DotTn,
        Role::GradInput | Role::GradWeight => MklKernel::ChainNn,
    }
}

/// The rows MKL at two threads computes with the narrow kernel of the role although the
/// one-thread kernel of the shape is **Main** ("Two threads" in the module doc): the second
/// thread's part `r1..rows`, `r1 = 4⌈⌈rows/2⌉/4⌉`, when it has 1 to 3 rows, the output has 12
/// or more columns and the product is threaded (`k > 4`, and `k > 16` or `cols > 16`; `k` the
/// reduction without an `addmm` bias). `None` for every other shape (all of its elements are in
/// the one-thread order). Only `rows` 5-7 and 9-11 can have such a part.
pub fn narrow_tail_2t(rows: usize, k: usize, cols: usize) -> Option<usize> {
    if cols < 12 || k <= 4 || (k <= 16 && cols <= 16) {
        return None;
    }
    let r1 = rows.div_ceil(2).div_ceil(4) * 4;
    (r1 < rows && rows - r1 < 4).then_some(r1)
}

/// The kernel that computes element row `i` of `role` under `model` for an output of
/// `rows × cols` over `red` terms (`ForwardBias`: the bias is term `red − 1`): [`kernel`], or at
/// two threads in the rows of [`narrow_tail_2t`] the role's narrow kernel (**DotTn** for the
/// forward, **ChainNn** for the gradients).
pub fn element_kernel(
    model: OrderModel,
    role: Role,
    (rows, red, cols): (usize, usize, usize),
    i: usize,
) -> MklKernel {
    let k = if role == Role::ForwardBias {
        red - 1
    } else {
        red
    };
    match (model, narrow_tail_2t(rows, k, cols)) {
        (OrderModel::MklSgemm2t, Some(r1)) if i >= r1 => narrow(role),
        _ => kernel(role, rows, cols),
    }
}

/// The narrow kernel of `role` (the one of an output with fewer than 4 rows and more than one
/// column).
fn narrow(role: Role) -> MklKernel {
    match role {
        Role::Forward | Role::ForwardBias => MklKernel::DotTn,
        Role::GradInput | Role::GradWeight => MklKernel::ChainNn,
    }
}

/// Peel of the group of four rows holding row `j` of a **GemvRows** product whose rows are
/// `red` floats apart: `4 − ((j | 3)·red mod 4)`, 1 to 4.
#[inline]
fn gemv_group_peel(j: usize, red: usize) -> usize {
    4 - ((j | 3) * red) % 4
}

/// Peel of **DotTn**'s row `i` (x's row at float offset `i·red`): `(−i·red) mod 4`.
#[inline]
fn dot_tn_peel(i: usize, red: usize) -> usize {
    (4 - (i * red) % 4) % 4
}

/// How many leading elements of C's row `i` run [`p8`] in **ChainNn** (`cols` wide): the
/// elements before the row's 16-byte boundary, if four or more follow it; else none.
#[inline]
pub fn chain_nn_peel(i: usize, cols: usize) -> usize {
    let p = (4 - (i * cols) % 4) % 4;
    if p > 0 && cols >= p + 4 {
        p
    } else {
        0
    }
}

/// The vectorized dot of MKL's narrow kernels over terms `a(t)·b(t)`, `t < red` (module
/// doc): `peel` terms chained into `s`, `L` lanes (lane 0 from `s`) over whole steps of `S`
/// terms, the lanes folded to `(l0 + l2) + (l1 + l3)`, the tail chained on. One rounded chain
/// when fewer than `S` terms follow the peel. Every product is rounded before it is added.
/// `L` is a power of two from 4 on and `S` a multiple of it (checked at compile time).
#[inline(always)]
pub fn vdot<const L: usize, const S: usize>(
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    red: usize,
    peel: usize,
) -> f32 {
    const { assert!(L >= 4 && L.is_power_of_two() && S.is_multiple_of(L)) };
    if peel >= red || red - peel < S {
        return chain(a, b, red);
    }
    let mut s = 0.0f32;
    for t in 0..peel {
        s += a(t) * b(t);
    }
    let mut acc = [0.0f32; L];
    acc[0] = s;
    let end = peel + (red - peel) / S * S;
    let mut t = peel;
    while t < end {
        for (l, x) in acc.iter_mut().enumerate() {
            *x += a(t + l) * b(t + l);
        }
        t += L;
    }
    let mut w = L;
    while w > 4 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    let mut h = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for t in end..red {
        h += a(t) * b(t);
    }
    h
}

/// [`vdot`] with 4 lanes and steps of 4 of one vector `u` against four rows `v` at once (the
/// same peel): four independent dots, each exactly [`vdot`]`::<4, 4>`, interleaved.
#[inline(always)]
fn vdot4_x4(u: &[f32], v: [&[f32]; 4], peel: usize) -> [f32; 4] {
    let red = u.len();
    let v = v.map(|r| &r[..red]);
    if peel >= red || red - peel < 4 {
        let mut c = [0.0f32; 4];
        for t in 0..red {
            for r in 0..4 {
                c[r] += u[t] * v[r][t];
            }
        }
        return c;
    }
    let mut acc = [[0.0f32; 4]; 4];
    for t in 0..peel {
        for r in 0..4 {
            acc[r][0] += u[t] * v[r][t];
        }
    }
    let end = peel + (red - peel) / 4 * 4;
    let mut t = peel;
    while t < end {
        let x: [f32; 4] = u[t..t + 4].try_into().unwrap();
        for r in 0..4 {
            let y: [f32; 4] = v[r][t..t + 4].try_into().unwrap();
            for l in 0..4 {
                acc[r][l] += x[l] * y[l];
            }
        }
        t += 4;
    }
    let mut h = acc.map(|a| (a[0] + a[2]) + (a[1] + a[3]));
    for t in end..red {
        for r in 0..4 {
            h[r] += u[t] * v[r][t];
        }
    }
    h
}

/// The rounded chain `c = +0; c = c + fl(a(t)·b(t))`, t ascending.
#[inline]
fn chain(a: impl Fn(usize) -> f32, b: impl Fn(usize) -> f32, red: usize) -> f32 {
    let mut c = 0.0f32;
    for t in 0..red {
        c += a(t) * b(t);
    }
    c
}

/// The order of **ChainNn**'s peeled elements: per whole block of 8 terms, the first four
/// added one by one (rounded) to the accumulator, the next four chained apart from `+0` and
/// their sum added; the terms after the last whole block added one by one.
#[inline]
pub fn p8(a: impl Fn(usize) -> f32, b: impl Fn(usize) -> f32, red: usize) -> f32 {
    let full = red / 8 * 8;
    let mut acc = 0.0f32;
    let mut t = 0;
    while t < full {
        for u in t..t + 4 {
            acc += a(u) * b(u);
        }
        let mut tmp = 0.0f32;
        for u in t + 4..t + 8 {
            tmp += a(u) * b(u);
        }
        acc += tmp;
        t += 8;
    }
    for u in full..red {
        acc += a(u) * b(u);
    }
    acc
}

/// **Main**'s blocked FMA chain of one element, with the bias after the first block.
///
/// Dispatch: on a CPU with FMA ([`Isa::detected`] at AVX2 or above) the same body compiled
/// with the `fma` feature, so each `mul_add` is one instruction instead of a call to the
/// software `fmaf`; IEEE fma is exactly specified, so both give the same bits.
fn main_element(
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    red: usize,
    bias: Option<f32>,
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if Isa::detected().avx2() {
        // SAFETY: an `Isa` at AVX2 or above exists only on a CPU with AVX2 and FMA.
        return unsafe { main_element_fma(a, b, red, bias) };
    }
    main_element_body(a, b, red, bias)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn main_element_fma(
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    red: usize,
    bias: Option<f32>,
) -> f32 {
    main_element_body(a, b, red, bias)
}

/// [`main_element`]'s body: per block of [`KSplit::Mkl`], a chain `v = fma(a(t), b(t), v)`
/// from `+0` in ascending `t`; the blocks' values summed left to right, the bias added to
/// the first block's.
#[inline(always)]
fn main_element_body(
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    red: usize,
    bias: Option<f32>,
) -> f32 {
    let mut c: Option<f32> = None;
    for r in KSplit::Mkl.blocks(red) {
        let mut v = 0.0f32;
        for t in r {
            v = a(t).mul_add(b(t), v);
        }
        c = Some(match (c, bias) {
            (None, Some(bb)) => v + bb,
            (None, None) => v,
            (Some(x), _) => x + v,
        });
    }
    match (c, bias) {
        (Some(x), _) => x,
        (None, Some(bb)) => 0.0 + bb,
        (None, None) => 0.0,
    }
}

/// **GemvRows** element `j` of `count` rows (rows `red` floats apart), by [`vdot`].
#[inline]
fn gemv_element(
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    red: usize,
    count: usize,
    j: usize,
) -> f32 {
    let groups = count / 4 * 4;
    if j < groups {
        vdot::<4, 4>(a, b, red, gemv_group_peel(j, red))
    } else if (j - groups).is_multiple_of(2) {
        vdot::<8, 8>(a, b, red, 4)
    } else {
        vdot::<4, 8>(a, b, red, 4)
    }
}

/// The scalar definition of element `(i, j)` of `role` at one thread (module doc), with the
/// operands stored as [`Role`] says and `(rows, red, cols)` as there: for `ForwardBias`, `x` is
/// `rows × (red − 1)`, `w` is `cols × (red − 1)` and `bias` (required) is the last term. Every
/// element of the fast entry points equals this, bit for bit.
pub fn element(
    role: Role,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    dims: (usize, usize, usize),
    i: usize,
    j: usize,
) -> f32 {
    element_of(OrderModel::MklSgemm1t, role, a, b, bias, dims, i, j)
}

/// Element `(i, j)` of `role` at one thread (the module doc's kernels) over the terms
/// `a(t)·b(t)`, `t < red`, with the peels following where the operands really lie instead of
/// the packed layout [`element`] assumes: `x_row` is the float offset of x's row `i` (the
/// forward's **DotTn** peel, `(−x_row) mod 4`) and `c_row` that of C's row `i` (the
/// gradients' **ChainNn** peel, `(−c_row) mod 4`), each counted from a 16-byte boundary (only
/// the value mod 4 matters). With `x_row = i·red` and `c_row = i·cols` it is [`element`].
/// Used for the per-batch products of ATen's batched `bmm` (`crate::ops::attention`), whose
/// batch elements start `b·rows·red` (x) and `b·rows·cols` (C) floats into their tensors.
/// With `narrow`, the role's narrow kernel (**DotTn** or **ChainNn**) whatever the shape: a
/// row of [`narrow_tail_2t`] at two threads. **Main**, **DotTn** and **ChainNn** only
/// (`rows >= 2`, `cols >= 2`, no bias): panics on a gemv shape or `ForwardBias`.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn element_at(
    role: Role,
    a: impl Fn(usize) -> f32,
    b: impl Fn(usize) -> f32,
    (rows, red, cols): (usize, usize, usize),
    j: usize,
    x_row: usize,
    c_row: usize,
    narrow: bool,
) -> f32 {
    assert!(role != Role::ForwardBias, "element_at: no bias");
    let kern = if narrow {
        self::narrow(role)
    } else {
        kernel(role, rows, cols)
    };
    match kern {
        MklKernel::Main => main_element(a, b, red, None),
        MklKernel::DotTn => {
            let p = (4 - x_row % 4) % 4;
            if j < cols / 4 * 4 {
                vdot::<4, 4>(a, b, red, p)
            } else {
                vdot::<8, 8>(a, b, red, p)
            }
        }
        MklKernel::ChainNn => {
            let p = (4 - c_row % 4) % 4;
            if p > 0 && cols >= p + 4 && j < p {
                p8(a, b, red)
            } else {
                chain(a, b, red)
            }
        }
        k => panic!("element_at: {k:?} ({rows} x {cols}) is not modelled with offsets"),
    }
}

/// [`element`] under `model`: the element computed by [`element_kernel`]'s kernel.
#[allow(clippy::too_many_arguments)]
pub fn element_of(
    model: OrderModel,
    role: Role,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    (rows, red, cols): (usize, usize, usize),
    i: usize,
    j: usize,
) -> f32 {
    let kern = element_kernel(model, role, (rows, red, cols), i);
    let (k, bias) = match role {
        Role::ForwardBias => (red - 1, Some(bias.expect("forward-bias needs the bias")[j])),
        _ => (red, None),
    };
    let dot = match role {
        Role::Forward | Role::ForwardBias => {
            let (x, w) = (&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
            let (fa, fb) = (|t: usize| x[t], |t: usize| w[t]);
            match kern {
                MklKernel::Main => return main_element(fa, fb, k, bias),
                MklKernel::GemvRows if rows == 1 => gemv_element(fa, fb, k, cols, j),
                MklKernel::GemvRows => gemv_element(fa, fb, k, rows, i),
                _ if j < cols / 4 * 4 => vdot::<4, 4>(fa, fb, k, dot_tn_peel(i, k)),
                _ => vdot::<8, 8>(fa, fb, k, dot_tn_peel(i, k)),
            }
        }
        Role::GradInput | Role::GradWeight => {
            let fa = |t: usize| match role {
                Role::GradInput => a[i * k + t],
                _ => a[t * rows + i],
            };
            let fb = |t: usize| b[t * cols + j];
            match kern {
                MklKernel::Main => main_element(fa, fb, k, None),
                MklKernel::GemvRows => gemv_element(fa, fb, k, rows, i),
                MklKernel::ChainNn if j < chain_nn_peel(i, cols) => p8(fa, fb, k),
                _ => chain(fa, fb, k),
            }
        }
    };
    match bias {
        Some(bb) => dot + bb,
        None => dot,
    }
}

/// Every element of `role` by [`element`] (the scalar reference of the fast entry points).
pub fn product_scalar(
    role: Role,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    dims: (usize, usize, usize),
    c: &mut [f32],
) {
    product_scalar_of(OrderModel::MklSgemm1t, role, a, b, bias, dims, c);
}

/// Every element of `role` under `model` by [`element_of`].
pub fn product_scalar_of(
    model: OrderModel,
    role: Role,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    dims: (usize, usize, usize),
    c: &mut [f32],
) {
    let (rows, _, cols) = dims;
    assert_eq!(
        c.len(),
        rows * cols,
        "mkl_sgemm::product_scalar: c has the wrong length"
    );
    for i in 0..rows {
        for j in 0..cols {
            c[i * cols + j] = element_of(model, role, a, b, bias, dims, i, j);
        }
    }
}

/// `y (m×n) = x (m×k) · wᵀ (+ bias)`, `w` stored `n×k`: torch's `F.linear(x, w, bias)` at one
/// thread (module doc).
///
/// Panics unless the lengths agree.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    assert!(
        x.len() == m * k && w.len() == n * k && y.len() == m * n,
        "mkl_sgemm::forward: lengths do not agree"
    );
    assert!(
        bias.is_none_or(|b| b.len() == n),
        "mkl_sgemm::forward: bias length"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        y.fill(0.0);
    } else {
        forward_dot(x, w, bias, y, m, k, n, s);
        let bias_joined =
            kernel(Role::Forward, m, n) == MklKernel::Main && !KSplit::Mkl.is_one_block(k);
        if bias.is_some() && bias_joined {
            return;
        }
    }
    if let Some(bb) = bias {
        for row in y.chunks_exact_mut(n) {
            for (v, &b) in row.iter_mut().zip(bb) {
                *v += b;
            }
        }
    }
}

/// [`forward`]'s product for `k >= 1`, with the bias too where it joins after the first K block
/// of **Main**.
#[allow(clippy::too_many_arguments)]
fn forward_dot(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    match kernel(Role::Forward, m, n) {
        MklKernel::Main => {
            let (xm, wm, ym) = (Mat::new(x, m, k), Mat::new(w, n, k), MatMut::new(y, m, n));
            match bias {
                Some(bb) if !KSplit::Mkl.is_one_block(k) => {
                    MAIN.matmul_nt_bias_after_first_block(xm, wm, bb, ym, s)
                }
                _ => MAIN.matmul_nt(xm, wm, ym, s),
            }
        }
        MklKernel::GemvRows if m == 1 => gemv_rows(w, x, y, n, k),
        MklKernel::GemvRows => gemv_rows(x, w, y, m, k),
        _ => {
            for (i, (xi, yi)) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)).enumerate() {
                dot_tn_row(xi, w, yi, i, k, n);
            }
        }
    }
}

/// **DotTn**'s row `i` of `y` (`n` wide): x's row `xi` against every row of `w` (`n × k`).
fn dot_tn_row(xi: &[f32], w: &[f32], yi: &mut [f32], i: usize, k: usize, n: usize) {
    let groups = n / 4 * 4;
    let peel = dot_tn_peel(i, k);
    for j in (0..groups).step_by(4) {
        let r = |q: usize| &w[(j + q) * k..(j + q + 1) * k];
        yi[j..j + 4].copy_from_slice(&vdot4_x4(xi, [r(0), r(1), r(2), r(3)], peel));
    }
    for (j, v) in yi.iter_mut().enumerate().skip(groups) {
        let wj = &w[j * k..(j + 1) * k];
        *v = vdot::<8, 8>(|t| xi[t], |t| wj[t], k, peel);
    }
}

/// Scratch elements [`forward`] of this shape takes (with a bias), on the detected CPU: the
/// main kernel's, or its blocks' where the bias joins after the first of several K blocks. The
/// narrow kernels take none beyond the chain kernels' accumulators.
pub fn nt_scratch_elems(m: usize, k: usize, n: usize) -> usize {
    let main = MAIN.nt_scratch_elems(m, k, n);
    if kernel(Role::Forward, m, n) == MklKernel::Main && !KSplit::Mkl.is_one_block(k) {
        main.max(MAIN.nt_bias_scratch_elems(m, k, n))
    } else {
        main
    }
}

/// **GemvRows**: `out[j] = dot(v, u_j)` for the `count` rows `u_j` of `u` (`count × red`,
/// row-major) and the vector `v` (`red`), by groups of four rows, then the rest (module doc).
fn gemv_rows(u: &[f32], v: &[f32], out: &mut [f32], count: usize, red: usize) {
    let groups = count / 4 * 4;
    let v = &v[..red];
    for j in (0..groups).step_by(4) {
        let r = |q: usize| &u[(j + q) * red..(j + q + 1) * red];
        let peel = gemv_group_peel(j, red);
        out[j..j + 4].copy_from_slice(&vdot4_x4(v, [r(0), r(1), r(2), r(3)], peel));
    }
    for (j, o) in out.iter_mut().enumerate().take(count).skip(groups) {
        let uj = &u[j * red..(j + 1) * red];
        *o = if (j - groups).is_multiple_of(2) {
            vdot::<8, 8>(|t| v[t], |t| uj[t], red, 4)
        } else {
            vdot::<4, 8>(|t| v[t], |t| uj[t], red, 4)
        };
    }
}

/// `c (m×n) = a (m×k) · b (k×n)`, all row-major: torch's `dy @ W` at one thread (module doc).
///
/// Panics unless the lengths agree.
pub fn grad_input(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    let (am, bm) = (Mat::new(a, m, k), Mat::new(b, k, n));
    assert_eq!(c.len(), m * n, "mkl_sgemm: c has the wrong length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    match kernel(Role::GradInput, m, n) {
        MklKernel::Main => MAIN.matmul(am, bm, MatMut::new(c, m, n), s),
        // b is k × 1: its column is a contiguous vector.
        MklKernel::GemvRows => gemv_rows(a, b, c, m, k),
        _ => {
            CHAIN.matmul(am, bm, MatMut::new(&mut *c, m, n), s);
            chain_nn_fixups(|i, t| a[i * k + t], b, c, m, k, n);
        }
    }
}

/// `c (m×n) = aᵀ · b` with `a` stored `k×m` and `b` `k×n`: torch's `dy.t() @ x` at one
/// thread (module doc).
///
/// Panics unless the lengths agree.
pub fn grad_weight(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    let (am, bm) = (Mat::new(a, k, m), Mat::new(b, k, n));
    assert_eq!(c.len(), m * n, "mkl_sgemm: c has the wrong length");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.fill(0.0);
        return;
    }
    match kernel(Role::GradWeight, m, n) {
        MklKernel::Main => MAIN.matmul_tn(am, bm, MatMut::new(c, m, n), s),
        _ => {
            CHAIN.matmul_tn(am, bm, MatMut::new(&mut *c, m, n), s);
            chain_nn_fixups(|i, t| a[t * m + i], b, c, m, k, n);
        }
    }
}

/// [`forward`] at two threads (module doc, "Two threads"): the one-thread product, then the rows
/// of [`narrow_tail_2t`] by **DotTn**, the bias added last.
///
/// Panics unless the lengths agree.
#[allow(clippy::too_many_arguments)]
pub fn forward_2t(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    forward(x, w, bias, y, m, k, n, s);
    let Some(r1) = narrow_tail_2t(m, k, n) else {
        return;
    };
    for i in r1..m {
        let yi = &mut y[i * n..(i + 1) * n];
        dot_tn_row(&x[i * k..(i + 1) * k], w, yi, i, k, n);
        if let Some(bb) = bias {
            for (v, &b) in yi.iter_mut().zip(bb) {
                *v += b;
            }
        }
    }
}

/// [`grad_input`] at two threads (module doc, "Two threads"): the one-thread product, then the
/// rows of [`narrow_tail_2t`] by **ChainNn**.
///
/// Panics unless the lengths agree.
pub fn grad_input_2t(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    grad_input(a, b, c, m, k, n, s);
    if let Some(r1) = narrow_tail_2t(m, k, n) {
        chain_nn_rows(|i, t| a[i * k + t], b, c, r1..m, k, n);
    }
}

/// [`grad_weight`] at two threads (module doc, "Two threads"): the one-thread product, then the
/// rows of [`narrow_tail_2t`] by **ChainNn**.
///
/// Panics unless the lengths agree.
pub fn grad_weight_2t(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    s: &mut MatmulScratch,
) {
    grad_weight(a, b, c, m, k, n, s);
    if let Some(r1) = narrow_tail_2t(m, k, n) {
        chain_nn_rows(|i, t| a[t * m + i], b, c, r1..m, k, n);
    }
}

/// **ChainNn** for the output rows `rows` of `c` (m×n): [`p8`] before C's row reaches a 16-byte
/// boundary ([`chain_nn_peel`], of the absolute row), the rounded chain after; `a(i, t)` is row
/// i's term t, `b` is `k×n` row-major.
fn chain_nn_rows(
    a: impl Fn(usize, usize) -> f32,
    b: &[f32],
    c: &mut [f32],
    rows: std::ops::Range<usize>,
    k: usize,
    n: usize,
) {
    for i in rows {
        let p = chain_nn_peel(i, n);
        for j in 0..n {
            let (fa, fb) = (|t: usize| a(i, t), |t: usize| b[t * n + j]);
            c[i * n + j] = if j < p {
                p8(fa, fb, k)
            } else {
                chain(fa, fb, k)
            };
        }
    }
}

/// `role`'s product under `model` by the fast entry points ([`forward`], [`grad_input`],
/// [`grad_weight`] and their two-thread forms), the operands and `(m, k, n)` as those take them
/// (`k` without the bias; `bias` is `ForwardBias`'s).
#[allow(clippy::too_many_arguments)]
pub fn product(
    model: OrderModel,
    role: Role,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    c: &mut [f32],
    (m, k, n): (usize, usize, usize),
    s: &mut MatmulScratch,
) {
    match (model, role) {
        (OrderModel::MklSgemm1t, Role::Forward | Role::ForwardBias) => {
            forward(a, b, bias, c, m, k, n, s)
        }
        (OrderModel::MklSgemm2t, Role::Forward | Role::ForwardBias) => {
            forward_2t(a, b, bias, c, m, k, n, s)
        }
        (OrderModel::MklSgemm1t, Role::GradInput) => grad_input(a, b, c, m, k, n, s),
        (OrderModel::MklSgemm2t, Role::GradInput) => grad_input_2t(a, b, c, m, k, n, s),
        (OrderModel::MklSgemm1t, Role::GradWeight) => grad_weight(a, b, c, m, k, n, s),
        (OrderModel::MklSgemm2t, Role::GradWeight) => grad_weight_2t(a, b, c, m, k, n, s),
    }
}

/// Rewrites **ChainNn**'s peeled elements of `c` (m×n) by [`p8`]; `a(i, t)` is row i's term t,
/// `b` is `k×n` row-major.
fn chain_nn_fixups(
    a: impl Fn(usize, usize) -> f32,
    b: &[f32],
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    for i in 0..m {
        for j in 0..chain_nn_peel(i, n) {
            c[i * n + j] = p8(|t| a(i, t), |t| b[t * n + j], k);
        }
    }
}

/// The order of element `(i, j)` of `role` for an output of `rows × cols` over `red` terms
/// (`ForwardBias`: the bias is term `red − 1`), in the program syntax of
/// [`super::revealed`], written the way `scripts/reveal_order.py` writes what it measures
/// (so that the two compare as text).
pub fn element_program(role: Role, dims: (usize, usize, usize), i: usize, j: usize) -> String {
    element_program_of(OrderModel::MklSgemm1t, role, dims, i, j)
}

/// [`element_program`] under `model` ([`element_kernel`]'s kernel).
pub fn element_program_of(
    model: OrderModel,
    role: Role,
    (rows, red, cols): (usize, usize, usize),
    i: usize,
    j: usize,
) -> String {
    let k = if role == Role::ForwardBias {
        red - 1
    } else {
        red
    };
    let mut fused = vec![false; red];
    let mut tree = match (element_kernel(model, role, (rows, red, cols), i), role) {
        (MklKernel::Main, _) => {
            let mut blocks = Vec::new();
            KSplit::Mkl.for_each_block(k, |r| blocks.push(r));
            let mut node: Option<Tree> = None;
            for (bi, r) in blocks.into_iter().enumerate() {
                fused[r.start + 1..r.end].fill(true);
                let blk = Tree::chain(r, None);
                node = Some(match node {
                    None => blk,
                    Some(n) => Tree::add(n, blk),
                });
                if bi == 0 && role == Role::ForwardBias {
                    node = node.map(|n| Tree::add(n, Tree::Leaf(k)));
                }
            }
            let tree = node.expect("k >= 1");
            return render_top(&tree, &fused);
        }
        (MklKernel::GemvRows, _) => {
            let (count, e) = if rows == 1 && role != Role::GradInput {
                (cols, j)
            } else {
                (rows, i)
            };
            let groups = count / 4 * 4;
            if e < groups {
                Tree::vdot(k, gemv_group_peel(e, k), 4, 4)
            } else if (e - groups).is_multiple_of(2) {
                Tree::vdot(k, 4, 8, 8)
            } else {
                Tree::vdot(k, 4, 4, 8)
            }
        }
        (MklKernel::DotTn, _) if j < cols / 4 * 4 => Tree::vdot(k, dot_tn_peel(i, k), 4, 4),
        (MklKernel::DotTn, _) => Tree::vdot(k, dot_tn_peel(i, k), 8, 8),
        (MklKernel::ChainNn, _) if j < chain_nn_peel(i, cols) => Tree::p8(k),
        _ => Tree::chain(0..k, None),
    };
    if role == Role::ForwardBias {
        tree = Tree::add(tree, Tree::Leaf(k));
    }
    render_top(&tree, &fused)
}

/// A summation tree over term indices (for [`element_program`]).
enum Tree {
    Leaf(usize),
    Add(Box<Tree>, Box<Tree>),
}

impl Tree {
    fn add(x: Tree, y: Tree) -> Tree {
        Tree::Add(Box::new(x), Box::new(y))
    }

    /// The terms of `r` added one by one onto `start` (or from the first term).
    fn chain(r: std::ops::Range<usize>, start: Option<Tree>) -> Tree {
        let mut node = start;
        for t in r {
            node = Some(match node {
                None => Tree::Leaf(t),
                Some(n) => Tree::add(n, Tree::Leaf(t)),
            });
        }
        node.expect("a chain of at least one term")
    }

    /// [`vdot`]'s tree.
    fn vdot(red: usize, peel: usize, lanes: usize, step: usize) -> Tree {
        if peel >= red || red - peel < step {
            return Tree::chain(0..red, None);
        }
        let s = (peel > 0).then(|| Tree::chain(0..peel, None));
        let per_lane = (red - peel) / step * step / lanes;
        let mut s = s;
        let mut ls: Vec<Tree> = (0..lanes)
            .map(|l| {
                let start = if l == 0 { s.take() } else { None };
                let mut node = start;
                for q in 0..per_lane {
                    let leaf = Tree::Leaf(peel + l + lanes * q);
                    node = Some(match node {
                        None => leaf,
                        Some(n) => Tree::add(n, leaf),
                    });
                }
                node.expect("a lane of at least one term")
            })
            .collect();
        while ls.len() > 4 {
            let h = ls.len() / 2;
            let hi = ls.split_off(h);
            ls = ls
                .into_iter()
                .zip(hi)
                .map(|(x, y)| Tree::add(x, y))
                .collect();
        }
        let mut it = ls.into_iter();
        let (l0, l1, l2, l3) = (
            it.next().unwrap(),
            it.next().unwrap(),
            it.next().unwrap(),
            it.next().unwrap(),
        );
        let h = Tree::add(Tree::add(l0, l2), Tree::add(l1, l3));
        let end = peel + per_lane * lanes;
        if end < red {
            Tree::chain(end..red, Some(h))
        } else {
            h
        }
    }

    /// [`p8`]'s tree.
    fn p8(red: usize) -> Tree {
        let full = red / 8 * 8;
        let mut acc: Option<Tree> = None;
        for t in (0..full).step_by(8) {
            let first = Tree::chain(t..t + 4, acc.take());
            acc = Some(Tree::add(first, Tree::chain(t + 4..t + 8, None)));
        }
        if full < red {
            Tree::chain(full..red, acc)
        } else {
            acc.expect("red >= 1")
        }
    }
}

/// [`render`] of a whole program.
fn render_top(t: &Tree, fused: &[bool]) -> String {
    let mut out = String::new();
    render(t, fused, &mut out);
    out
}

/// Writes `t` as `scripts/reveal_order.py`'s `render` does: a left-leaning run of consecutive
/// leaves `lo..hi` with the same flag on every leaf after the first (and the first rounded)
/// as `[lo..hi]f`/`r`, a leaf as `tf`/`tr`, anything else as `(X Y)`.
fn render(t: &Tree, fused: &[bool], out: &mut String) {
    let flag = |x: bool| if x { 'f' } else { 'r' };
    let mut seq = Vec::new();
    let mut cur = t;
    let mut chain = true;
    while let Tree::Add(x, y) = cur {
        match (&**x, &**y) {
            (Tree::Leaf(p), Tree::Leaf(q)) => {
                seq.extend([*p.max(q), *p.min(q)]);
                break;
            }
            (_, Tree::Leaf(q)) => {
                seq.push(*q);
                cur = x;
            }
            (Tree::Leaf(p), _) => {
                seq.push(*p);
                cur = y;
            }
            _ => {
                chain = false;
                break;
            }
        }
    }
    if chain && !seq.is_empty() {
        seq.reverse();
        let (lo, n) = (seq[0], seq.len());
        let consecutive = seq.iter().enumerate().all(|(q, &v)| v == lo + q);
        let same = seq[1..].iter().all(|&v| fused[v] == fused[seq[1]]);
        if consecutive && same && !fused[lo] {
            let _ = write!(out, "[{lo}..{}]{}", lo + n, flag(fused[seq[1]]));
            return;
        }
    }
    match t {
        Tree::Leaf(v) => {
            let _ = write!(out, "{v}{}", flag(fused[*v]));
        }
        Tree::Add(x, y) => {
            out.push('(');
            render(x, fused, out);
            out.push(' ');
            render(y, fused, out);
            out.push(')');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::isa::{Isa, Level};
    use crate::kernels::revealed::Program;

    /// Deterministic inputs with varied exponents and no zeros (signed zeros are outside the
    /// measured conditions): `(u − 2^23)·2^(e − 26)`-like values from a SplitMix64 stream.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                let u = ((z >> 40) as f64 - 8_388_608.0).abs() + 1.0;
                let sign = if z & 1 == 0 { 1.0 } else { -1.0 };
                (sign * u * 2f64.powi(((z >> 8) & 7) as i32 - 26)) as f32
            })
            .collect()
    }

    /// The operands of `role` for (rows, red, cols) as the fast entry points take them, and
    /// the fast result.
    fn fast(
        model: OrderModel,
        role: Role,
        (rows, red, cols): (usize, usize, usize),
        seed: u64,
        isa: Isa,
    ) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>, Vec<f32>) {
        let mut s = MatmulScratch::with_isa(isa);
        let mut c = vec![f32::NAN; rows * cols];
        let k = if role == Role::ForwardBias {
            red - 1
        } else {
            red
        };
        let (a, b, bias) = match role {
            Role::Forward | Role::ForwardBias => (
                values(seed, rows * k),
                values(seed + 1, cols * k),
                (role == Role::ForwardBias).then(|| values(seed + 2, cols)),
            ),
            Role::GradInput => (values(seed, rows * red), values(seed + 1, red * cols), None),
            Role::GradWeight => (values(seed, red * rows), values(seed + 1, red * cols), None),
        };
        product(
            model,
            role,
            &a,
            &b,
            bias.as_deref(),
            &mut c,
            (rows, k, cols),
            &mut s,
        );
        (a, b, bias, c)
    }

    /// Element (i, j) by its program text, run by the revealed-order executor.
    #[allow(clippy::too_many_arguments)]
    fn by_program(
        model: OrderModel,
        role: Role,
        dims: (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        i: usize,
        j: usize,
    ) -> f32 {
        let (rows, red, cols) = dims;
        let p = Program::parse(&element_program_of(model, role, dims, i, j), red).unwrap();
        let k = if role == Role::ForwardBias {
            red - 1
        } else {
            red
        };
        let mut stack = Vec::new();
        match role {
            Role::Forward | Role::ForwardBias => p.eval(
                |t| if t < k { a[i * k + t] } else { 1.0 },
                |t| {
                    if t < k {
                        b[j * k + t]
                    } else {
                        bias.unwrap()[j]
                    }
                },
                &mut stack,
            ),
            Role::GradInput => p.eval(|t| a[i * red + t], |t| b[t * cols + j], &mut stack),
            Role::GradWeight => p.eval(|t| a[t * rows + i], |t| b[t * cols + j], &mut stack),
        }
    }

    const ROLES: [Role; 4] = [
        Role::Forward,
        Role::ForwardBias,
        Role::GradInput,
        Role::GradWeight,
    ];

    /// The fast entry points, the scalar definition and the program text executed by
    /// [`super::super::revealed`] agree bit for bit on every element of every kernel's shapes,
    /// under both models: all of rows 1..=6 × cols 1..=14 at reductions around the vector
    /// steps, shapes with several K blocks, long reductions and wide outputs, and the two-thread
    /// model's narrow rows (5-7 and 9-11 rows).
    #[test]
    fn fast_scalar_and_program_agree() {
        for model in OrderModel::ALL {
            fast_scalar_and_program_agree_under(model);
        }
    }

    fn fast_scalar_and_program_agree_under(model: OrderModel) {
        let mut dims = Vec::new();
        for rows in 1..=6 {
            for cols in 1..=14 {
                for red in [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 21, 30] {
                    dims.push((rows, red, cols));
                }
            }
        }
        dims.extend([
            (1, 700, 67),
            (3, 200, 40),
            (2, 33, 300),
            (70, 19, 5),
            (13, 385, 20),
            (5, 193, 12),
            (300, 9, 3),
            (9, 64, 129),
            (20, 200, 13),
            (40, 400, 30),
            (5, 17, 12),
            (7, 35, 67),
            (9, 6, 17),
            (10, 250, 33),
            (11, 21, 13),
            (6, 400, 20),
        ]);
        let (mut n, mut narrow_tail) = (0, 0);
        for &d in &dims {
            for role in ROLES {
                if role == Role::ForwardBias && d.1 < 2 {
                    continue;
                }
                let (a, b, bias, c) = fast(
                    model,
                    role,
                    d,
                    (d.0 * 1000 + d.1 * 10 + d.2) as u64,
                    Isa::detected(),
                );
                for i in 0..d.0 {
                    narrow_tail += d.2
                        * usize::from(element_kernel(model, role, d, i) != kernel(role, d.0, d.2));
                    for j in 0..d.2 {
                        let e = element_of(model, role, &a, &b, bias.as_deref(), d, i, j);
                        let p = by_program(model, role, d, &a, &b, bias.as_deref(), i, j);
                        let f = c[i * d.2 + j];
                        assert!(
                            f.to_bits() == e.to_bits() && e.to_bits() == p.to_bits(),
                            "{model:?} {role:?} {d:?} ({i}, {j}): fast {f:e}, scalar {e:e}, \
                             program {p:e} ({})",
                            element_program_of(model, role, d, i, j)
                        );
                        n += 1;
                    }
                }
            }
        }
        assert!(n > 100_000, "{n} elements");
        // The two-thread model's own rows are among them (and only its).
        assert_eq!(
            narrow_tail > 1000,
            model == OrderModel::MklSgemm2t,
            "{narrow_tail}"
        );
    }

    /// Every compilation of the vector kernels the fast entry points use (forced per level the
    /// CPU has) gives the scalar definition's bits, on a shape of every kernel, with the bias
    /// joining after the first of several K blocks both where the few-rows kernel reads the
    /// weight in place (16 rows or fewer, AVX-512) and where the blocks are copied.
    /// Under both models; the two-thread one also on shapes with its narrow rows (one, two and
    /// three of them, with the bias after the first of several K blocks in the others).
    #[test]
    fn every_isa_level_gives_the_same_bits() {
        let mut levels = 0;
        for level in Level::ALL {
            let Some(isa) = Isa::new(level) else {
                continue;
            };
            levels += 1;
            for model in OrderModel::ALL {
                for d in [
                    (1, 37, 9),
                    (3, 21, 40),
                    (7, 13, 5),
                    (2, 9, 6),
                    (13, 385, 20),
                    (20, 200, 13),
                    (6, 40, 30),
                    (5, 300, 17),
                    (11, 23, 41),
                    (9, 8, 19),
                ] {
                    for role in ROLES {
                        let (a, b, bias, c) = fast(model, role, d, 7, isa);
                        for i in 0..d.0 {
                            for j in 0..d.2 {
                                let e = element_of(model, role, &a, &b, bias.as_deref(), d, i, j);
                                assert_eq!(
                                    c[i * d.2 + j].to_bits(),
                                    e.to_bits(),
                                    "{level:?} {model:?} {role:?} {d:?} ({i}, {j})"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert!(levels >= 1);
    }

    /// The two-thread split of the module doc: which shapes have narrow rows, and their orders
    /// on small cases worked by hand.
    #[test]
    fn two_thread_narrow_rows_and_orders() {
        // Rows 5-7 and 9-11 have a second part of 1-3 rows; 8, 12 and 13 do not.
        let tails: Vec<_> = (1..=16).map(|rows| narrow_tail_2t(rows, 40, 40)).collect();
        let want = [0, 0, 0, 0, 4, 4, 4, 0, 8, 8, 8, 0, 0, 0, 0, 0];
        assert_eq!(
            tails,
            want.map(|r| (r > 0).then_some(r)).to_vec(),
            "split rows"
        );
        // Not threaded: k <= 4, or k <= 16 and cols <= 16; narrow anyway below 12 columns.
        assert_eq!(narrow_tail_2t(6, 4, 100), None);
        assert_eq!(narrow_tail_2t(6, 5, 17), Some(4));
        assert_eq!(narrow_tail_2t(6, 16, 16), None);
        assert_eq!(narrow_tail_2t(6, 17, 12), Some(4));
        assert_eq!(narrow_tail_2t(6, 17, 11), None);
        let m2 = OrderModel::MklSgemm2t;
        let f = |role, d, i, j| element_program_of(m2, role, d, i, j);
        // 5 × 8 × 17: row 4 is a one-row part, by the narrow forward kernel (not the gemv).
        assert_eq!(
            f(Role::Forward, (5, 8, 17), 4, 0),
            "(((0r 4r) (2r 6r)) ((1r 5r) (3r 7r)))"
        );
        assert_eq!(f(Role::Forward, (5, 8, 17), 3, 0), "[0..8]f");
        // The bias is added last there, whatever the K blocks.
        assert_eq!(
            element_kernel(m2, Role::ForwardBias, (5, 201, 17), 4),
            MklKernel::DotTn
        );
        assert!(f(Role::ForwardBias, (5, 201, 17), 4, 0).ends_with(" 200r)"));
        // C's row 9 of 17 floats starts 153 floats in: three elements before its boundary.
        assert_eq!(
            f(Role::GradInput, (10, 9, 17), 9, 2),
            "(([0..4]r [4..8]r) 8r)"
        );
        assert_eq!(f(Role::GradInput, (10, 9, 17), 9, 3), "[0..9]r");
        assert_eq!(f(Role::GradWeight, (10, 9, 17), 7, 3), "[0..9]f");
        // The one-thread model is unchanged on those shapes.
        assert_eq!(
            element_program(Role::Forward, (5, 8, 17), 4, 0),
            element_program(Role::Forward, (5, 8, 17), 3, 0)
        );
    }

    /// [`element_at`] with the packed layout's offsets (`x_row = i·red`, `c_row = i·cols`) is
    /// [`element`], bit for bit, on every non-gemv shape of a small grid and every role it
    /// takes; and with `narrow` on [`narrow_tail_2t`]'s rows it is [`element_of`] at two
    /// threads.
    #[test]
    fn element_at_with_packed_offsets_is_element() {
        for (rows, red, cols) in [(7, 20, 24), (10, 9, 17), (6, 33, 12)] {
            let a = values(rows as u64 + 5, rows * red);
            let b = values(cols as u64 + 9, red * cols);
            let r1 = narrow_tail_2t(rows, red, cols).expect("a shape with a narrow tail");
            for i in 0..rows {
                for j in 0..cols {
                    let want = element_of(
                        OrderModel::MklSgemm2t,
                        Role::GradInput,
                        &a,
                        &b,
                        None,
                        (rows, red, cols),
                        i,
                        j,
                    );
                    let (fa, fb) = (|t: usize| a[i * red + t], |t: usize| b[t * cols + j]);
                    let got = element_at(
                        Role::GradInput,
                        fa,
                        fb,
                        (rows, red, cols),
                        j,
                        i * red,
                        i * cols,
                        i >= r1,
                    );
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{rows}x{red}x{cols} ({i}, {j})"
                    );
                }
            }
        }
        for (rows, red, cols) in [
            (2, 3, 2),
            (3, 9, 7),
            (5, 6, 13),
            (9, 7, 9),
            (4, 17, 12),
            (3, 33, 5),
        ] {
            let a = values(rows as u64 * 31 + red as u64, rows * red);
            let b = values(cols as u64 * 7 + red as u64, red * cols);
            for role in [Role::Forward, Role::GradInput, Role::GradWeight] {
                for i in 0..rows {
                    for j in 0..cols {
                        let want = element(role, &a, &b, None, (rows, red, cols), i, j);
                        let fa = |t: usize| match role {
                            Role::GradWeight => a[t * rows + i],
                            _ => a[i * red + t],
                        };
                        let fb = |t: usize| match role {
                            Role::Forward => b[j * red + t],
                            _ => b[t * cols + j],
                        };
                        let got = element_at(
                            role,
                            fa,
                            fb,
                            (rows, red, cols),
                            j,
                            i * red,
                            i * cols,
                            false,
                        );
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "{role:?} {rows}x{red}x{cols} ({i}, {j})"
                        );
                    }
                }
            }
        }
    }

    /// The kernels of the module doc, by shape, and the program texts of their orders on
    /// small cases worked by hand.
    #[test]
    fn kernels_and_orders_of_small_cases() {
        use MklKernel::*;
        assert_eq!(kernel(Role::Forward, 4, 12), Main);
        assert_eq!(kernel(Role::Forward, 4, 11), DotTn);
        assert_eq!(kernel(Role::Forward, 3, 500), DotTn);
        assert_eq!(kernel(Role::Forward, 1, 500), GemvRows);
        assert_eq!(kernel(Role::Forward, 500, 1), GemvRows);
        assert_eq!(kernel(Role::GradInput, 500, 1), GemvRows);
        assert_eq!(kernel(Role::GradInput, 1, 1), Chain);
        assert_eq!(kernel(Role::GradInput, 1, 500), ChainNn);
        assert_eq!(kernel(Role::GradWeight, 500, 1), ChainNn);
        assert_eq!(kernel(Role::GradWeight, 4, 12), Main);
        let f = |role, d, i, j| element_program(role, d, i, j);
        // x's row 3 of 5 floats starts 15 floats in: one term peeled, one step of 4 lanes.
        assert_eq!(f(Role::Forward, (4, 5, 8), 3, 0), "(([0..2]r 3r) (2r 4r))");
        assert_eq!(
            f(Role::Forward, (4, 8, 8), 0, 0),
            "(((0r 4r) (2r 6r)) ((1r 5r) (3r 7r)))"
        );
        assert_eq!(f(Role::Forward, (4, 16, 16), 2, 5), "[0..16]f");
        assert_eq!(f(Role::ForwardBias, (4, 17, 16), 2, 5), "([0..16]f 16r)");
        // Two K blocks: the bias joins after the first.
        assert_eq!(
            f(Role::ForwardBias, (4, 201, 16), 0, 0),
            "(([0..100]f 200r) [100..200]f)"
        );
        // The single-row gemv: groups of four peel 1..4, the rest peel 4.
        assert_eq!(
            f(Role::Forward, (1, 9, 5), 0, 0),
            "((([0..2]r 5r) (3r 7r)) ((2r 6r) (4r 8r)))"
        );
        assert_eq!(f(Role::Forward, (1, 9, 5), 0, 4), "[0..9]r");
        // C's row 1 of 6 floats: two elements before its 16-byte boundary.
        assert_eq!(
            f(Role::GradInput, (2, 9, 6), 1, 0),
            "(([0..4]r [4..8]r) 8r)"
        );
        assert_eq!(f(Role::GradInput, (2, 9, 6), 1, 2), "[0..9]r");
        assert_eq!(f(Role::GradWeight, (2, 9, 5), 1, 0), "[0..9]r");
    }
}
