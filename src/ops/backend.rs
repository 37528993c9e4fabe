//! Backends: the arithmetic one computation of a scenario runs in.
//!
//! A scenario's model code is written once, generic over [`Backend`], and run three times:
//! with [`F64Backend`] (the float64 ground truth), and with [`F32Backend`] for the unsharded
//! reference (TP degree 1) and for the sharded computation (TP degree N). The backend decides
//! how every matmul and every all-reduce rounds; elementwise code rounds as written.

use crate::kernels::allreduce::{all_reduce_sum, AllReduceAlgo, Wire};
use crate::kernels::dot::dot_blocked;
use crate::kernels::isa::Isa;
use crate::kernels::matmul::{
    matmul_f64, matmul_nt_abs_f64, matmul_nt_and_abs_f64, matmul_nt_f64, matmul_tn_f64,
    matmul_tn_f64_rows, Accum, Mat, MatMut, MatmulModel, MatmulScratch, Passes,
};
use crate::kernels::mkl_sgemm::{self, OrderModel};
use crate::kernels::mkl_sqrt::{sqrt_mkl_f32, SqrtKernel};
use crate::kernels::revealed::Role;
use crate::kernels::torch_ops::{
    log_softmax_cross_entropy_f32_isa, tanh_slice_with, OneDnnIsa, TanhKernel, TorchIsa,
};
use crate::scenario::profile::Profile;
use crate::scenario::revealed_file::RevealedOrders;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Matmul calls of a profile with revealed orders whose role and shape the orders do not
/// reveal, so that the profile's `matmul` model computed them (process-wide, for tests and
/// diagnostics).
pub static UNREVEALED_MATMULS: AtomicU64 = AtomicU64::new(0);

/// The distinct (role, rows, red, cols) of the calls [`UNREVEALED_MATMULS`] counts
/// (process-wide), so that `repro` can name the shapes a revealed-order file lacks.
static UNREVEALED_SHAPES: Mutex<BTreeSet<(Role, usize, usize, usize)>> =
    Mutex::new(BTreeSet::new());

/// Counts a matmul call of a profile with revealed orders that the orders do not cover, and
/// remembers its shape (a miss path: the profile's own kernel then does the matmul's work).
fn note_unrevealed(role: Role, rows: usize, red: usize, cols: usize) {
    UNREVEALED_MATMULS.fetch_add(1, Ordering::Relaxed);
    thread_local! {
        /// The shapes this thread has already put in [`UNREVEALED_SHAPES`]: the global
        /// set is locked once per (thread, shape), not once per matmul call of a sweep.
        static SEEN: std::cell::RefCell<Vec<(Role, usize, usize, usize)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    let key = (role, rows, red, cols);
    CAPTURE.with(|c| {
        if let Some(v) = c.borrow_mut().as_mut() {
            if !v.contains(&key) {
                v.push(key);
            }
        }
    });
    let first = SEEN.with(|seen| {
        let mut seen = seen.borrow_mut();
        let new = !seen.contains(&key);
        if new {
            seen.push(key);
        }
        new
    });
    if first {
        if let Ok(mut set) = UNREVEALED_SHAPES.lock() {
            set.insert(key);
        }
    }
}

/// A matmul's role and shape: (role, output rows, reduction length, output cols).
pub type MatmulShape = (Role, usize, usize, usize);

thread_local! {
    /// While [`unrevealed_shapes_of`] runs its closure on this thread: the shapes that
    /// missed, in order of first miss.
    static CAPTURE: std::cell::RefCell<Option<Vec<MatmulShape>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` on this thread and returns the matmul shapes (role, output rows, reduction
/// length, output cols) that missed a profile's revealed orders during it, in order of first
/// miss (the calls `f` makes on other threads are not seen).
pub fn unrevealed_shapes_of(f: impl FnOnce()) -> Vec<MatmulShape> {
    let outer = CAPTURE.with(|c| c.borrow_mut().replace(Vec::new()));
    f();
    CAPTURE.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer).unwrap_or_default())
}

/// The shapes (role, output rows, reduction length, output cols) that missed a profile's
/// revealed orders in this process so far, in order.
pub fn unrevealed_shapes() -> Vec<(Role, usize, usize, usize)> {
    UNREVEALED_SHAPES
        .lock()
        .map(|s| s.iter().copied().collect())
        .unwrap_or_default()
}
use crate::ops::real::Real;

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
    /// `c (m×n) = |a| · |b|ᵀ` with `b` stored `n×k`: [`Backend::matmul_nt`] of the absolute
    /// values (the condition `Σ|a·b|` of a linear layer's outputs). The default copies the
    /// absolute values first; the float64 backend, the one that records conditions, takes
    /// them while it transposes `b`.
    fn matmul_nt_abs(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    ) {
        let abs = |v: &[Self::R]| -> Vec<Self::R> {
            v.iter()
                .map(|&x| if x < Self::R::ZERO { -x } else { x })
                .collect()
        };
        let (a, b) = (abs(a), abs(b));
        self.matmul_nt(&a, &b, c, m, k, n);
    }
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
    /// Rows `rows` of [`Backend::matmul_tn`]'s `c` (m×n) into `c_rows` (`rows.len()`×n), each
    /// element exactly as `matmul_tn` of the whole product computes it, and true; or false,
    /// with nothing written, when this backend computes the product only whole (then the
    /// caller calls `matmul_tn`). The default is false.
    #[allow(clippy::too_many_arguments)]
    fn matmul_tn_rows(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c_rows: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
        rows: std::ops::Range<usize>,
    ) -> bool {
        let _ = (a, b, c_rows, m, k, n, rows);
        false
    }
    /// [`Backend::matmul_nt`] with `b` the columns `cols` of `w` (n × `width`: a rank's shard
    /// of a row-parallel weight) read in place, and true; or false, with nothing written,
    /// when this backend takes the shard only as its own matrix (then the caller gathers
    /// the columns and calls `matmul_nt`). Either way the product of the gathered columns,
    /// bit for bit. The default is false.
    #[allow(clippy::too_many_arguments)]
    fn matmul_nt_cols(
        &mut self,
        a: &[Self::R],
        w: &[Self::R],
        width: usize,
        cols: std::ops::Range<usize>,
        c: &mut [Self::R],
        m: usize,
        n: usize,
    ) -> bool {
        let _ = (a, w, width, cols, c, m, n);
        false
    }
    /// [`Backend::matmul_nt`] into `c` and [`Backend::matmul_nt_abs`] into `cabs` (a linear
    /// layer's outputs and their condition) from one pass over `b`, each bit for bit what
    /// its own call gives, and true; or false, with nothing written, where this backend
    /// computes them only apart. The default is false.
    #[allow(clippy::too_many_arguments)]
    fn matmul_nt_and_abs(
        &mut self,
        a: &[Self::R],
        b: &[Self::R],
        c: &mut [Self::R],
        cabs: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        let _ = (a, b, c, cabs, m, k, n);
        false
    }
    /// Whether every element of [`Backend::matmul`] and [`Backend::matmul_tn`] is computed
    /// from its own row of `a` and column of `b` alone, in an order that depends on the
    /// reduction length but not on the number of columns: then columns `cols` of a product
    /// equal, bit for bit, the product with only `b`'s columns `cols`, and a row-parallel
    /// layer's backward computes its ranks' column shards as one product. The default is
    /// false.
    fn columns_independent(&self) -> bool {
        false
    }
    /// `y (m×n) = x (m×k) · wᵀ + bias` as torch's `addmm` computes `F.linear(x, w, bias)`: by
    /// default the matmul, then `y[t][o] = y[t][o] + bias[o]` with one rounding (MKL's
    /// one-thread order while K is one block); a profile with revealed orders or an order model
    /// may place the bias elsewhere (MKL adds it after the first of several K blocks:
    /// [`crate::kernels::mkl_sgemm`]).
    #[allow(clippy::too_many_arguments)]
    fn linear_bias(
        &mut self,
        x: &[Self::R],
        w: &[Self::R],
        bias: &[Self::R],
        y: &mut [Self::R],
        m: usize,
        k: usize,
        n: usize,
    ) {
        self.matmul_nt(x, w, y, m, k, n);
        for row in y.chunks_exact_mut(n) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v = *v + b;
            }
        }
    }
    /// Sums `n_ranks` buffers stored rank-major in `parts` into `out`, as the profile's
    /// collective does. Every rank holds the same result, so one copy is returned. With one
    /// rank there is no collective and `out` is a plain copy.
    fn all_reduce(&mut self, parts: &[Self::R], n_ranks: usize, out: &mut [Self::R]);
    /// [`Backend::all_reduce`] on a bf16 wire (the bf16-grad-reduce mutant): the profile's
    /// order with every input and partial sum rounded to bf16
    /// ([`crate::kernels::allreduce::Wire::Bf16`]). A backend without a wire type (float64, which
    /// never runs a mutant) sums as [`Backend::all_reduce`] does.
    fn all_reduce_bf16(&mut self, parts: &[Self::R], n_ranks: usize, out: &mut [Self::R]) {
        self.all_reduce(parts, n_ranks, out);
    }
    /// A buffer sent over the profile's wire by an all-to-all (expert parallelism's token
    /// dispatch and return, [`crate::ops::moe`]): rounded to the wire dtype, bf16 round to
    /// nearest even on a bf16 wire, unchanged on an f32 wire. The float64 backend (which never
    /// runs a sharded computation) leaves it unchanged, the default.
    fn wire_round(&self, x: &mut [Self::R]) {
        let _ = x;
    }
    /// Mean cross-entropy and its gradient ([`crate::ops::layers::cross_entropy`]): the
    /// scalar type's kernel by default.
    fn cross_entropy(
        &mut self,
        logits: &[Self::R],
        labels: &[i64],
        n: usize,
        scale: Self::R,
        dlogits: &mut [Self::R],
    ) -> Self::R {
        <Self::R as Real>::cross_entropy(logits, labels, n, scale, dlogits)
    }
    /// `x = tanh(x)` as the mirrored framework computes it
    /// ([`crate::ops::layers::tanh_torch`]): the scalar type's tanh by default.
    fn tanh(&mut self, x: &mut [Self::R]) {
        <Self::R as Real>::tanh_slice(x)
    }
    /// Elements per iteration of torch's vectorized elementwise loop, whose remainder runs
    /// the op's scalar lambda ([`crate::ops::activations::TorchLoop::block`]); 0 (no
    /// remainder) by default.
    fn elementwise_block(&self) -> usize {
        0
    }
    /// The ISA oneDNN's kernels run on (the exact gelu,
    /// [`crate::ops::activations::TorchLoop::onednn`]): AVX-512 by default.
    fn onednn_isa(&self) -> OneDnnIsa {
        OneDnnIsa::Avx512
    }
    /// ATen's intra-op thread count (`torch.get_num_threads()`) that the kernels which split
    /// work over threads mirror (the LayerNorm weight and bias gradients,
    /// [`crate::ops::norm::layer_norm_backward_threads`]): 1 by default.
    fn aten_threads(&self) -> usize {
        1
    }
    /// The order of attention's `bmm`s at or above ATen's naive size
    /// ([`crate::ops::attention::BmmOrder`]): the naive kernel's by default.
    fn bmm_order(&self) -> crate::ops::attention::BmmOrder {
        crate::ops::attention::BmmOrder::Naive
    }
    /// The square root of Adam's update (`exp_avg_sq.sqrt()`, [`crate::ops::optim::step`]):
    /// the correctly rounded one by default.
    fn adam_sqrt(&self) -> fn(Self::R) -> Self::R {
        crate::ops::optim::sqrt::<Self::R>
    }
}

/// Float64 ground truth: sequential `c = c + a·b` matmuls (see [`matmul_f64`]) and rank-order
/// all-reduce. Only the unsharded model runs in it.
#[derive(Debug, Default, Clone)]
pub struct F64Backend {
    /// Transpose buffer, reused.
    scratch: Vec<f64>,
    /// The compilation the products run on ([`Isa::detected`] by default).
    isa: Isa,
}

impl F64Backend {
    /// A backend whose products run on `isa` (tests force each path with it).
    pub fn with_isa(isa: Isa) -> Self {
        Self {
            scratch: Vec::new(),
            isa,
        }
    }
}

impl Backend for F64Backend {
    type R = f64;
    fn matmul(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        let (a, b) = (Mat::new(a, m, k), Mat::new(b, k, n));
        matmul_f64(a, b, MatMut::new(c, m, n), self.isa);
    }
    fn matmul_nt(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        let (a, b, c) = (Mat::new(a, m, k), Mat::new(b, n, k), MatMut::new(c, m, n));
        matmul_nt_f64(a, b, c, &mut self.scratch, self.isa);
    }
    fn matmul_nt_abs(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        let (a, b, c) = (Mat::new(a, m, k), Mat::new(b, n, k), MatMut::new(c, m, n));
        matmul_nt_abs_f64(a, b, c, &mut self.scratch, self.isa);
    }
    /// Where the few-rows kernel runs ([`matmul_nt_and_abs_f64`]): a V = 32,000 head's
    /// logits and their condition read the 131 MB weight once instead of twice.
    fn matmul_nt_and_abs(
        &mut self,
        a: &[f64],
        b: &[f64],
        c: &mut [f64],
        cabs: &mut [f64],
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        let (a, b) = (Mat::new(a, m, k), Mat::new(b, n, k));
        let (c, cabs) = (MatMut::new(c, m, n), MatMut::new(cabs, m, n));
        matmul_nt_and_abs_f64(a, b, c, cabs, &mut self.scratch, self.isa)
    }
    fn matmul_tn(&mut self, a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
        let (a, b) = (Mat::new(a, k, m), Mat::new(b, k, n));
        matmul_tn_f64(a, b, MatMut::new(c, m, n), self.isa);
    }
    /// Every element of `matmul_f64` and `matmul_tn_f64` is the chain over the reduction
    /// from +0, whatever the width.
    fn columns_independent(&self) -> bool {
        true
    }
    fn matmul_tn_rows(
        &mut self,
        a: &[f64],
        b: &[f64],
        c_rows: &mut [f64],
        m: usize,
        k: usize,
        n: usize,
        rows: std::ops::Range<usize>,
    ) -> bool {
        let (a, b) = (Mat::new(a, k, m), Mat::new(b, k, n));
        let c_rows = MatMut::new(c_rows, rows.len(), n);
        matmul_tn_f64_rows(a, b, c_rows, rows, self.isa);
        true
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

/// How the fp32 backend evaluates its matmuls. Both give bit-identical results (every element
/// is the same chain in the same order); only the speed differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// The vectorized kernels of [`crate::kernels::matmul`] (on the scratch's
    /// [`Isa`](crate::kernels::isa::Isa): AVX-512F, AVX2 and FMA, or portable).
    #[default]
    Fast,
    /// The straightforward implementation: one scalar [`dot_blocked`] per output element.
    /// The benchmark's baseline, and an independent check of the fast kernels.
    ScalarReference,
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
    /// Which kernels evaluate the matmuls.
    pub kernels: Kernels,
    /// Transpose buffer of the scalar reference kernels.
    pub transposed: Vec<f32>,
    /// The torch CPU kernel build the cross-entropy and ATen's elementwise loops mirror.
    pub torch_isa: TorchIsa,
    /// The ISA of oneDNN's kernels (torch's exact gelu).
    pub onednn_isa: OneDnnIsa,
    /// The f32 tanh of the torch scenarios.
    pub tanh: TanhKernel,
    /// The f32 square root of Adam's update.
    pub sqrt: SqrtKernel,
    /// Revealed per-element orders; a matmul whose role and shape they hold runs by them.
    pub orders: Option<Arc<RevealedOrders>>,
    /// The generative order model: every matmul `orders` does not reveal runs by it.
    pub order_model: Option<OrderModel>,
    /// Evaluation stack of the revealed programs, reused.
    stack: Vec<f32>,
}

impl<'a> F32Backend<'a> {
    /// The backend of `profile`, borrowing a thread's scratch buffers.
    pub fn new(profile: &Profile, scratch: &'a mut MatmulScratch) -> Self {
        Self {
            matmul: profile.matmul,
            algo: profile.allreduce,
            wire: profile.wire,
            scratch,
            kernels: Kernels::Fast,
            transposed: Vec::new(),
            torch_isa: profile.torch_isa,
            onednn_isa: profile.onednn_isa,
            tanh: profile.tanh,
            sqrt: profile.sqrt,
            orders: profile.orders.clone(),
            order_model: profile.order_model,
            stack: Vec::new(),
        }
    }

    /// Whether the profile's own matmul computes every element as one FMA chain over all of
    /// `k` from +0 (the plain order of [`crate::kernels::revealed::Program::is_plain`]).
    fn plain_is_native(&self, k: usize) -> bool {
        self.matmul.split.is_one_block(k)
            && self.matmul.accum == Accum::Fma
            && self.matmul.passes == Passes::F32
    }

    /// Runs `role` by its revealed programs when the profile has orders for this shape;
    /// returns false (nothing written) otherwise, counting the miss in
    /// [`UNREVEALED_MATMULS`]. When the profile's own kernels compute the plain order, they
    /// compute every element and only the exceptions run as programs (the same bits, faster).
    #[allow(clippy::too_many_arguments)]
    fn revealed(
        &mut self,
        role: Role,
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        let Some(orders) = self.orders.clone() else {
            return false;
        };
        match orders.get(role, m, k, n) {
            Some(r) if self.plain_is_native(k) && self.kernels == Kernels::Fast => {
                let cm = MatMut::new(&mut *c, m, n);
                match role {
                    Role::Forward | Role::ForwardBias => {
                        let (am, bm) = (Mat::new(a, m, k), Mat::new(b, n, k));
                        self.matmul.matmul_nt(am, bm, cm, self.scratch)
                    }
                    Role::GradInput => {
                        let (am, bm) = (Mat::new(a, m, k), Mat::new(b, k, n));
                        self.matmul.matmul(am, bm, cm, self.scratch)
                    }
                    Role::GradWeight => {
                        let (am, bm) = (Mat::new(a, k, m), Mat::new(b, k, n));
                        self.matmul.matmul_tn(am, bm, cm, self.scratch)
                    }
                }
                let isa = self.scratch.isa();
                r.run_exceptions(isa, role, a, b, None, c, &mut self.stack);
                true
            }
            Some(r) => {
                r.run(role, a, b, c, &mut self.stack);
                true
            }
            None => {
                // Every role's call is c (m×n) over a reduction of k (see [`Role`]). With an
                // order model the miss is the model's, not the profile's matmul model's.
                if self.order_model.is_none() {
                    note_unrevealed(role, m, k, n);
                }
                false
            }
        }
    }

    /// Runs `role` by the profile's order model when it has one ([`OrderModel`]); returns
    /// false (nothing written) otherwise. The scalar reference kernels evaluate every element
    /// by [`mkl_sgemm::element`], the fast ones by the model's vectorized entry points (the
    /// same bits). `bias` is `ForwardBias`'s.
    #[allow(clippy::too_many_arguments)]
    fn modelled(
        &mut self,
        role: Role,
        a: &[f32],
        b: &[f32],
        bias: Option<&[f32]>,
        c: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        let Some(model) = self.order_model else {
            return false;
        };
        if self.kernels == Kernels::ScalarReference {
            let red = if role == Role::ForwardBias { k + 1 } else { k };
            mkl_sgemm::product_scalar_of(model, role, a, b, bias, (m, red, n), c);
            return true;
        }
        mkl_sgemm::product(model, role, a, b, bias, c, (m, k, n), self.scratch);
        true
    }

    /// Uses `kernels` for the matmuls.
    pub fn with_kernels(mut self, kernels: Kernels) -> Self {
        self.kernels = kernels;
        self
    }

    /// The scalar reference applies when asked for and when the model has no input-precision
    /// passes (the scalar dot products model f32 inputs only).
    fn scalar(&self) -> bool {
        self.kernels == Kernels::ScalarReference && self.matmul.passes == Passes::F32
    }

    /// `c[i][j] = dot_blocked(a row i, bt row j)` with `bt` (n×k) holding `b`'s columns.
    fn scalar_nt(&self, a: &[f32], bt: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = dot_blocked(
                    &a[i * k..(i + 1) * k],
                    &bt[j * k..(j + 1) * k],
                    self.matmul.split,
                    self.matmul.accum,
                );
            }
        }
    }
}

/// `dst (cols×rows) = srcᵀ` for `src` (rows×cols).
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(rows * cols, 0.0);
    for r in 0..rows {
        for c in 0..cols {
            dst[c * rows + r] = src[r * cols + c];
        }
    }
}

impl Backend for F32Backend<'_> {
    type R = f32;
    fn matmul(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        if self.revealed(Role::GradInput, a, b, c, m, k, n)
            || self.modelled(Role::GradInput, a, b, None, c, m, k, n)
        {
            return;
        }
        if self.scalar() {
            let mut bt = std::mem::take(&mut self.transposed);
            transpose_into(b, k, n, &mut bt);
            self.scalar_nt(a, &bt, c, m, k, n);
            self.transposed = bt;
        } else {
            let (a, b, c) = (Mat::new(a, m, k), Mat::new(b, k, n), MatMut::new(c, m, n));
            self.matmul.matmul(a, b, c, self.scratch);
        }
    }
    fn matmul_nt(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        if self.revealed(Role::Forward, a, b, c, m, k, n)
            || self.modelled(Role::Forward, a, b, None, c, m, k, n)
        {
            return;
        }
        if self.scalar() {
            self.scalar_nt(a, b, c, m, k, n);
        } else {
            let (a, b, c) = (Mat::new(a, m, k), Mat::new(b, n, k), MatMut::new(c, m, n));
            self.matmul.matmul_nt(a, b, c, self.scratch);
        }
    }
    fn matmul_tn(&mut self, a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
        if self.revealed(Role::GradWeight, a, b, c, m, k, n)
            || self.modelled(Role::GradWeight, a, b, None, c, m, k, n)
        {
            return;
        }
        if self.scalar() {
            // aᵀ (m×k) as rows, b's columns as rows of bᵀ (n×k).
            let mut at = std::mem::take(&mut self.transposed);
            transpose_into(a, k, m, &mut at);
            let mut bt = Vec::new();
            transpose_into(b, k, n, &mut bt);
            self.scalar_nt(&at, &bt, c, m, k, n);
            self.transposed = at;
        } else {
            let (a, b, c) = (Mat::new(a, k, m), Mat::new(b, k, n), MatMut::new(c, m, n));
            self.matmul.matmul_tn(a, b, c, self.scratch);
        }
    }
    /// Only by the profile's own kernels: a profile with revealed orders (which are per
    /// shape of the whole product) or the scalar reference computes the product whole.
    fn matmul_tn_rows(
        &mut self,
        a: &[f32],
        b: &[f32],
        c_rows: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
        rows: std::ops::Range<usize>,
    ) -> bool {
        if self.orders.is_some() || self.order_model.is_some() || self.kernels != Kernels::Fast {
            return false;
        }
        let (a, b) = (Mat::new(a, k, m), Mat::new(b, k, n));
        let c_rows = MatMut::new(c_rows, rows.len(), n);
        self.matmul.matmul_tn_rows(a, b, c_rows, rows, self.scratch);
        true
    }
    /// Only by the profile's own fast kernels, and only where the few-rows kernel runs
    /// ([`MatmulModel::matmul_nt_cols`]): revealed orders are per shape of the product, and
    /// the scalar reference takes the shard as a matrix.
    #[allow(clippy::too_many_arguments)]
    fn matmul_nt_cols(
        &mut self,
        a: &[f32],
        w: &[f32],
        width: usize,
        cols: std::ops::Range<usize>,
        c: &mut [f32],
        m: usize,
        n: usize,
    ) -> bool {
        if self.orders.is_some() || self.order_model.is_some() || self.kernels != Kernels::Fast {
            return false;
        }
        let a = Mat::new(a, m, cols.len());
        let w = Mat::new(w, n, width).columns(cols);
        self.matmul
            .matmul_nt_cols(a, w, MatMut::new(c, m, n), self.scratch)
    }
    /// The model's kernels and the scalar reference compute each element as its own chain
    /// (or pairwise tree) over the reduction, and the input roundings are per element;
    /// revealed orders are per shape of the whole product, and an order model's kernel
    /// depends on the width, so not with them.
    fn columns_independent(&self) -> bool {
        self.orders.is_none() && self.order_model.is_none()
    }
    /// By the revealed `forward-bias` programs when the profile has them for this shape, else
    /// by the order model when the profile has one, else the default (matmul, then the bias
    /// added).
    fn linear_bias(
        &mut self,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        y: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
    ) {
        if let Some(orders) = self.orders.clone() {
            if let Some(r) = orders.get(Role::ForwardBias, m, k + 1, n) {
                if self.plain_is_native(k) && self.kernels == Kernels::Fast {
                    let (xm, wm) = (Mat::new(x, m, k), Mat::new(w, n, k));
                    self.matmul
                        .matmul_nt(xm, wm, MatMut::new(&mut *y, m, n), self.scratch);
                    for row in y.chunks_exact_mut(n) {
                        for (v, &b) in row.iter_mut().zip(bias) {
                            *v += b;
                        }
                    }
                    let isa = self.scratch.isa();
                    r.run_exceptions(isa, Role::ForwardBias, x, w, Some(bias), y, &mut self.stack);
                } else {
                    r.run_bias(x, w, bias, y, &mut self.stack);
                }
                return;
            }
            if self.order_model.is_none() {
                note_unrevealed(Role::ForwardBias, m, k + 1, n);
            }
        }
        if self.modelled(Role::ForwardBias, x, w, Some(bias), y, m, k, n) {
            return;
        }
        self.matmul_nt(x, w, y, m, k, n);
        for row in y.chunks_exact_mut(n) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        }
    }
    /// torch's CPU `log_softmax` + `nll_loss`, forward and backward, bit for bit, in the
    /// profile's kernel build ([`crate::kernels::torch_ops::log_softmax_cross_entropy_f32_isa`]).
    fn cross_entropy(
        &mut self,
        logits: &[f32],
        labels: &[i64],
        n: usize,
        scale: f32,
        dlogits: &mut [f32],
    ) -> f32 {
        log_softmax_cross_entropy_f32_isa(logits, labels, n, scale, dlogits, self.torch_isa)
    }
    /// The profile's f32 tanh ([`tanh_slice_with`]): MKL's `vmsTanh` bit for bit, or the
    /// correctly rounded tanh.
    fn tanh(&mut self, x: &mut [f32]) {
        tanh_slice_with(x, self.tanh);
    }
    /// The profile's torch build: 16 (AVX2) or 32 (AVX512).
    fn elementwise_block(&self) -> usize {
        self.torch_isa.elementwise_block()
    }
    /// The profile's `onednn_isa`.
    fn onednn_isa(&self) -> OneDnnIsa {
        self.onednn_isa
    }
    /// The torch thread count the profile's matmuls mirror (`cpu-fma+mkl-threads-N`: N, from
    /// its order model or revealed orders), else 1 (the profiles that mirror no torch build):
    /// [`crate::kernels::mkl_sgemm::torch_threads`].
    /// MKL's one-thread batched order under the one-thread order model (measured at one
    /// thread only; every other profile keeps the naive order).
    fn bmm_order(&self) -> crate::ops::attention::BmmOrder {
        crate::ops::attention::BmmOrder::of(self.order_model)
    }
    fn aten_threads(&self) -> usize {
        crate::kernels::mkl_sgemm::torch_threads(
            self.order_model,
            self.orders.as_ref().map(|o| o.meta.threads),
        )
    }
    /// The profile's `sqrt`: MKL's `vsSqrt` bit for bit ([`sqrt_mkl_f32`]), or the correctly
    /// rounded root.
    fn adam_sqrt(&self) -> fn(f32) -> f32 {
        match self.sqrt {
            SqrtKernel::Mkl => sqrt_mkl_f32,
            SqrtKernel::CorrectlyRounded => crate::ops::optim::sqrt::<f32>,
        }
    }
    fn all_reduce(&mut self, parts: &[f32], n_ranks: usize, out: &mut [f32]) {
        if n_ranks == 1 {
            // One rank has no collective: nothing goes on the wire.
            out.copy_from_slice(parts);
        } else {
            all_reduce_sum(self.algo, self.wire, parts, n_ranks, out);
        }
    }
    fn all_reduce_bf16(&mut self, parts: &[f32], n_ranks: usize, out: &mut [f32]) {
        all_reduce_sum(self.algo, Wire::Bf16, parts, n_ranks, out);
    }
    fn wire_round(&self, x: &mut [f32]) {
        if self.wire == Wire::Bf16 {
            for v in x {
                *v = crate::kernels::round::bf16_rne(*v);
            }
        }
    }
}
