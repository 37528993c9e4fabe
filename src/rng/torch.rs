//! Bit-exact port of PyTorch's CPU random generator (`CPUGeneratorImpl`) and the ATen CPU
//! distribution kernels the harness needs.
//!
//! Sources of truth (ported, not copied; every operation order below is stated on the method):
//!
//! * `aten/src/ATen/core/MT19937RNGEngine.h`: MT19937 seeding, twist and tempering.
//! * `aten/src/ATen/CPUGeneratorImpl.cpp`: `random()` (one MT draw) and `random64()` (two draws,
//!   the first one is the high half).
//! * `aten/src/ATen/core/TransformationHelper.h` and `DistributionsHelper.h`: `uniform_real`,
//!   `uniform_int_from_to` and the scalar Box-Muller `normal_distribution<double>` with its cached
//!   second sample.
//! * `aten/src/ATen/native/cpu/DistributionTemplates.h`: `normal_fill_AVX2` and
//!   `normal_fill_16_AVX2` (contiguous `f32` tensors with at least 16 elements).
//! * `aten/src/ATen/native/cpu/avx_mathfun.h`: the Cephes-derived single-precision `log256_ps`
//!   and `sincos256_ps`, emulated lane by lane with scalar `f32` operations. PyTorch compiles
//!   them with GCC and `-ffp-contract=fast`, so GCC fuses some multiply/add pairs into FMAs; the
//!   fused pairs are reproduced with [`f32::mul_add`] (IEEE fused multiply-add, exactly
//!   specified, hence identical on every machine). The list of fused pairs is in the
//!   documentation of [`TorchGenerator::normal_`]. The fixture settles the log Horner steps,
//!   the `e * q1` placement, `z * 0.5` in the cosine and all sine fusions; the reduction
//!   (`DP1..DP3`) and cosine Horner fusions never change a fixture bit and follow what GCC 12
//!   emits for the same operation sequence (`-O3 -mavx2 -mfma -ffp-contract=fast`).
//!
//! Verified element by element against PyTorch 2.15 draws in `tests/suite/rng_torch_fixtures.rs`.

use crate::kernels::isa::Isa;

/// MT19937 state size.
const MT_N: usize = 624;
/// MT19937 middle word offset.
const MT_M: usize = 397;
const MT_MATRIX_A: u32 = 0x9908_b0df;
const MT_UPPER_MASK: u32 = 0x8000_0000;
const MT_LOWER_MASK: u32 = 0x7fff_ffff;

/// Words per block of the vectorized twist ([`TorchGenerator::twist`]).
const TWIST_BLOCK: usize = 16;

/// MT19937 tempering of one state word: `y ^= y >> 11; y ^= (y << 7) & 0x9d2c5680;
/// y ^= (y << 15) & 0xefc60000; y ^= y >> 18`.
#[inline(always)]
fn temper(mut y: u32) -> u32 {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c_5680;
    y ^= (y << 15) & 0xefc6_0000;
    y ^= y >> 18;
    y
}

/// 2^-24 (exact in f64).
const TWO_POW_M24: f64 = 1.0 / 16_777_216.0;
/// 2^-53 (exact in f64).
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// PyTorch's CPU generator: an MT19937 engine plus the cached second Box-Muller sample of the
/// scalar `normal_distribution<double>` path (`next_double_normal_sample`).
///
/// The float cache (`next_float_normal_sample`) is never used by the kernels ported here, so it
/// is not stored.
#[derive(Clone)]
pub struct TorchGenerator {
    state: [u32; MT_N],
    /// Index of the next state word to temper; `MT_N` means "twist before the next draw".
    next: usize,
    /// `CPUGeneratorImpl::next_double_normal_sample_`.
    next_double_normal: Option<f64>,
    /// The compilation the twist and the bulk transforms run on (the same draws on every
    /// one).
    isa: Isa,
}

impl std::fmt::Debug for TorchGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchGenerator")
            .field("next", &self.next)
            .field("next_double_normal", &self.next_double_normal)
            .finish_non_exhaustive()
    }
}

impl TorchGenerator {
    /// `torch.manual_seed(seed)` on a fresh CPU generator.
    ///
    /// Order: `state[0] = seed & 0xffffffff` (the high 32 bits of the seed are dropped, as in
    /// torch), then for `j` in `1..624`:
    /// `state[j] = 1812433253 * (state[j-1] ^ (state[j-1] >> 30)) + j` in wrapping `u32`
    /// arithmetic. The twist happens lazily before the first draw. No cached normal.
    pub fn new(seed: u64) -> Self {
        let mut g = TorchGenerator {
            state: [0; MT_N],
            next: MT_N,
            next_double_normal: None,
            isa: Isa::detected(),
        };
        g.reseed(seed);
        g
    }

    /// This generator with its twist and bulk transforms ([`TorchGenerator::uniform_`],
    /// [`TorchGenerator::normal_`]) on the compilation `isa` names: the same draws on every
    /// one (tests force each path with it).
    pub fn on(mut self, isa: Isa) -> Self {
        self.isa = isa;
        self
    }

    /// `torch.manual_seed(seed)` in place: the same state as [`TorchGenerator::new`], without
    /// allocating. Also clears the cached scalar-path normal sample, as
    /// `CPUGeneratorImpl::set_current_seed` does.
    pub fn reseed(&mut self, seed: u64) {
        self.state[0] = (seed & 0xffff_ffff) as u32;
        for j in 1..MT_N {
            let prev = self.state[j - 1];
            self.state[j] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(j as u32);
        }
        self.next = MT_N;
        self.next_double_normal = None;
    }

    /// Regenerates all 624 state words (the standard MT19937 twist): for `i` in `0..624` in
    /// order, `y = (state[i] & 0x80000000) | (state[(i + 1) % 624] & 0x7fffffff)`, then
    /// `state[i] = state[(i + 397) % 624] ^ (y >> 1) ^ (y odd ? 0x9908b0df : 0)`.
    ///
    /// Run in three ranges so that each is a plain vectorizable loop over blocks of
    /// [`TWIST_BLOCK`] words: `i < 227` reads `state[i + 397]`, not yet rewritten;
    /// `227 ≤ i < 623` reads `state[i − 227]`, rewritten at least 227 words (more than a
    /// block) earlier; `i = 623` reads `state[0]` and `state[396]`, both rewritten. Within a
    /// block every word is read before any is written, and each word's own old value and its
    /// successor's are still the old ones there, as in the one-at-a-time loop.
    fn twist(&mut self) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.isa.avx512() {
                // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
                unsafe { twist_avx512(&mut self.state) };
                self.next = 0;
                return;
            }
        }
        twist_body(&mut self.state);
        self.next = 0;
    }

    /// Calls `f` with runs of consecutive draws, `n` in all, in draw order: the
    /// [`TorchGenerator::next_u32`] outputs, each run taken from the state words left before
    /// the next twist (the same words, tempered the same way, as one draw at a time).
    #[inline(always)]
    fn draw_runs(&mut self, mut n: usize, mut f: impl FnMut(&[u32])) {
        while n > 0 {
            if self.next >= MT_N {
                self.twist();
            }
            let k = n.min(MT_N - self.next);
            f(&self.state[self.next..self.next + k]);
            self.next += k;
            n -= k;
        }
    }

    /// Advances the generator by `n` draws, as `n` calls of [`TorchGenerator::next_u32`]
    /// would, without tempering or transforming any: the state twists where theirs would.
    pub fn discard(&mut self, n: usize) {
        self.draw_runs(n, |_| {});
    }

    /// Advances the generator as filling `len` f32 elements by [`TorchGenerator::uniform_`]
    /// (`normal: false`: one draw each) or by [`TorchGenerator::normal_`] (`normal: true`)
    /// would, without computing them where that is only a count: `normal_` of 16 or more
    /// draws `len`, then 16 more for the last block when `len` is not a multiple of 16.
    /// `normal_` of fewer than 16 elements draws pairs and keeps one sample cached, so
    /// there it runs (its mean and scale change no state; the values are dropped).
    pub fn discard_fill(&mut self, len: usize, normal: bool) {
        match (normal, len) {
            (false, _) => self.discard(len),
            (true, 16..) => self.discard(len + if len.is_multiple_of(16) { 0 } else { 16 }),
            (true, _) => self.normal_(&mut [0.0; 16][..len], 0.0, 1.0),
        }
    }

    /// `CPUGeneratorImpl::random()`: one MT19937 output.
    ///
    /// Order: twist if all 624 words are used, take the next state word `y`, then temper:
    /// `y ^= y >> 11; y ^= (y << 7) & 0x9d2c5680; y ^= (y << 15) & 0xefc60000; y ^= y >> 18`.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= MT_N {
            self.twist();
        }
        let y = self.state[self.next];
        self.next += 1;
        temper(y)
    }

    /// `CPUGeneratorImpl::random64()`: two draws, `hi = next_u32()` first, then
    /// `lo = next_u32()`; returns `(hi << 32) | lo`.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let hi = self.next_u32() as u64;
        let lo = self.next_u32() as u64;
        (hi << 32) | lo
    }

    /// One `uniform_real_distribution<float>(from, to)` sample, before the cast to f32:
    /// `x = (next_u32() & 0xffffff) as f64 * 2^-24` (exact), then
    /// `x * ((to - from) as f64) + from as f64` in f64, where `to - from` is an f32 subtraction.
    /// The product has at most 48 significant bits, so it is exact in f64 and a fused or
    /// unfused multiply-add give the same value: one rounding, at the f64 addition.
    #[cfg(test)]
    fn uniform_f32_sample(&mut self, from: f32, to: f32) -> f64 {
        let x = (self.next_u32() & 0x00ff_ffff) as f64 * TWO_POW_M24;
        x * ((to - from) as f64) + from as f64
    }

    /// One `uniform_real_distribution<double>(0, 1)` sample:
    /// `(next_u64() & (2^53 - 1)) as f64 * 2^-53` (exact; `* 1.0 + 0.0` is the identity).
    #[inline]
    fn uniform_f64_unit(&mut self) -> f64 {
        (self.next_u64() & ((1u64 << 53) - 1)) as f64 * TWO_POW_M53
    }

    /// `tensor.uniform_(lo, hi)` on a contiguous f32 tensor (`uniform_kernel`).
    ///
    /// Order: `from = lo as f32`, `to = hi as f32` (round to nearest). Then for each element in
    /// index order: `r = next_u32()`; `x = (r & 0xffffff) as f64 * 2^-24` (exact);
    /// `v = x * ((to - from) as f64) + from as f64` in f64, where `to - from` is computed in f32
    /// as in ATen's `transformation::uniform_real` (for `lo = -hi` and for `(0, 1)` it is exact,
    /// so this equals the f64 difference); store `v as f32` (round to nearest).
    ///
    /// The draws are taken a run of state words at a time ([`TorchGenerator::draw_runs`]),
    /// so the loop over a run has no per-draw branch and vectorizes; the values are the
    /// per-draw definition's (`uniform_f32_sample`, checked in the tests).
    pub fn uniform_(&mut self, out: &mut [f32], lo: f64, hi: f64) {
        let from = lo as f32;
        let to = hi as f32;
        let (span, base) = ((to - from) as f64, from as f64);
        let (mut done, isa) = (0, self.isa);
        self.draw_runs(out.len(), |words| {
            uniform_run(isa, &mut out[done..done + words.len()], words, span, base);
            done += words.len();
        });
    }

    /// `torch.rand(out.len())`: exactly [`TorchGenerator::uniform_`] with `lo = 0`, `hi = 1`,
    /// i.e. `out[i] = ((next_u32() & 0xffffff) as f64 * 2^-24) as f32`, one draw per element.
    pub fn rand(&mut self, out: &mut [f32]) {
        self.uniform_(out, 0.0, 1.0);
    }

    /// `tensor.normal_(mean, std)` on a contiguous f32 tensor (ATen `normal_kernel`).
    ///
    /// **`out.len() >= 16`** (`normal_fill_AVX2`), with `mean_f = mean as f32`,
    /// `std_f = std as f32`:
    /// 1. Fill every element, in index order, with `uniform(0, 1)` as in
    ///    [`TorchGenerator::rand`] (one `next_u32()` each).
    /// 2. For each full block of 16 at offset `i` (`i = 0, 16, ...` while `i + 16 <= len`), and
    ///    for each lane `j` in `0..8`, all in f32:
    ///    `u1 = 1 - d[i+j]`; `u2 = d[i+j+8]`; `radius = sqrt(-2 * log256(u1))` (IEEE sqrt);
    ///    `theta = two_pi * u2` with `two_pi = (2 * pi as f64) as f32`;
    ///    `(s, c) = sincos256(theta)`; `n1 = radius * c`; `n2 = radius * s`;
    ///    `d[i+j] = fma(n1, std_f, mean_f)`; `d[i+j+8] = fma(n2, std_f, mean_f)`.
    ///    Each block's transform reads and writes only its own 16 elements, so the blocks of
    ///    a big tensor ([`BOX_MULLER_PARALLEL_FROM`] elements or more) are transformed on the
    ///    current rayon pool's threads: the same values.
    /// 3. If `len % 16 != 0`: redraw the last 16 elements (`d[len-16..len]`) in index order
    ///    with fresh uniforms as in step 1 and apply the step-2 transform to that block again.
    ///
    /// `log256` and `sincos256` are lane-wise f32 emulations of `log256_ps` / `sincos256_ps`
    /// (their private docs give every step). GCC's `-ffp-contract=fast` fuses, and so do we:
    /// in `log256` the 8 Horner steps `y = fma(y, x, p_k)`, `y = fma(y, z, e * q1)` (the
    /// `e * q1` product stays separately rounded), `y = fma(-z, 0.5, y)` and
    /// `x = fma(e, q2, x + y)`; in `sincos256` the three reduction steps
    /// `x = fma(y, -DP_k, x)`, the cosine Horner steps `fma(c0, z, c1)`, `fma(yc, z, c2)`,
    /// then `fma(yc * z, z, -(z * 0.5))`, and the sine steps `fma(s0, z, s1)`,
    /// `fma(ys, z, s2)`, `fma(ys * z, x, x)`. Every other multiply is rounded on its own
    /// (`x * x`, `y * x` before `* z`, `x * FOPI`, `-2 * log`, `two_pi * u2`, `radius * c`).
    ///
    /// **`out.len() < 16`** (scalar `normal_distribution<double>(mean, std)` per element, in
    /// index order), all in f64: if a cached sample `c` exists, take it and clear the cache,
    /// `ret = c`; otherwise `u1 = uniform64()`, `u2 = uniform64()` (each
    /// `(next_u64() & (2^53-1)) * 2^-53`, so two `next_u32()` each, high half first),
    /// `r = sqrt(-2 * log1p(-u2))`, `theta = (2 * pi) * u1`, cache `r * sin(theta)`,
    /// `ret = r * cos(theta)`. Then `out[i] = fma(ret, std, mean) as f32` (GCC contracts
    /// `val * std + mean`; for `std = 1, mean = 0` fused and unfused agree). `log1p`, `sin`,
    /// `cos`, `sqrt` come from the `libm` crate. The cache survives across calls and is
    /// cleared only by [`TorchGenerator::reseed`] / [`TorchGenerator::new`].
    ///
    /// Works in place on `out`; allocates nothing.
    pub fn normal_(&mut self, out: &mut [f32], mean: f64, std: f64) {
        let len = out.len();
        if len >= 16 {
            let isa = self.isa;
            let mean_f = mean as f32;
            let std_f = std as f32;
            self.rand(out);
            let full = len - len % 16;
            if full >= BOX_MULLER_PARALLEL_FROM {
                // Every block's transform reads and writes its own 16 elements only: the
                // blocks in any order, on the pool's threads, give the same values.
                use rayon::prelude::*;
                out[..full].par_chunks_mut(BOX_MULLER_RUN).for_each(|run| {
                    for block in run.chunks_exact_mut(16) {
                        box_muller_block(isa, block, mean_f, std_f);
                    }
                });
            } else {
                for block in out[..full].chunks_exact_mut(16) {
                    box_muller_block(isa, block, mean_f, std_f);
                }
            }
            if !len.is_multiple_of(16) {
                let tail = &mut out[len - 16..];
                self.rand(tail);
                box_muller_block(isa, tail, mean_f, std_f);
            }
        } else {
            for o in out.iter_mut() {
                let ret = match self.next_double_normal.take() {
                    Some(cached) => cached,
                    None => {
                        let u1 = self.uniform_f64_unit();
                        let u2 = self.uniform_f64_unit();
                        let r = libm::sqrt(-2.0 * libm::log1p(-u2));
                        let theta = 2.0 * std::f64::consts::PI * u1;
                        self.next_double_normal = Some(r * libm::sin(theta));
                        r * libm::cos(theta)
                    }
                };
                *o = ret.mul_add(std, mean) as f32;
            }
        }
    }

    /// `torch.randn(out.len())`: [`TorchGenerator::normal_`] with `mean = 0`, `std = 1`.
    pub fn randn(&mut self, out: &mut [f32]) {
        self.normal_(out, 0.0, 1.0);
    }

    /// `torch.randint(n, shape)` for `1 <= n < 2^32` (`random_from_to` with `base = 0`): for each
    /// element in index order, `out[i] = (next_u32() as u64 % n) as i64` (one draw each).
    ///
    /// # Panics
    /// If `n == 0` or `n >= 2^32` (torch would switch to `random64()` there).
    pub fn randint(&mut self, n: u64, out: &mut [i64]) {
        assert!(
            n > 0 && n < (1u64 << 32),
            "randint: n = {n} must be in 1..2^32"
        );
        for o in out.iter_mut() {
            *o = (self.next_u32() as u64 % n) as i64;
        }
    }

    /// `nn.Linear` weight initialisation, `init.kaiming_uniform_(w, a=sqrt(5))`, fan_in mode,
    /// leaky_relu gain.
    ///
    /// Order, all in f64 exactly as Python evaluates it: `a = sqrt(5.0)`;
    /// `gain = sqrt(2.0 / (1.0 + a * a))`; `std = gain / sqrt(fan_in)`;
    /// `bound = sqrt(3.0) * std`; then [`TorchGenerator::uniform_`]`(weight, -bound, bound)`
    /// (one `next_u32()` per element, row-major order).
    pub fn kaiming_uniform_linear(&mut self, weight: &mut [f32], fan_in: usize) {
        let a = 5.0f64.sqrt();
        let gain = (2.0 / (1.0 + a * a)).sqrt();
        let std = gain / (fan_in as f64).sqrt();
        let bound = 3.0f64.sqrt() * std;
        self.uniform_(weight, -bound, bound);
    }

    /// `nn.Linear` bias initialisation: `bound = 1.0 / sqrt(fan_in)` in f64 (0 when
    /// `fan_in == 0`, as in torch), then [`TorchGenerator::uniform_`]`(bias, -bound, bound)`.
    pub fn linear_bias_uniform(&mut self, bias: &mut [f32], fan_in: usize) {
        let bound = if fan_in > 0 {
            1.0 / (fan_in as f64).sqrt()
        } else {
            0.0
        };
        self.uniform_(bias, -bound, bound);
    }
}

/// Elements from which [`TorchGenerator::normal_`] transforms its blocks on the current
/// rayon pool's threads (a 32,000 × 512 table: 16 million, about 18 ms on one core).
const BOX_MULLER_PARALLEL_FROM: usize = 1 << 18;

/// Elements per parallel run of blocks in [`TorchGenerator::normal_`] (a multiple of 16).
const BOX_MULLER_RUN: usize = 16 << 12;

/// [`TorchGenerator::twist`]'s loops (its doc gives the order), on the state words.
#[inline(always)]
fn twist_body(s: &mut [u32; MT_N]) {
    #[inline(always)]
    fn word(cur: u32, succ: u32, far: u32) -> u32 {
        let y = (cur & MT_UPPER_MASK) | (succ & MT_LOWER_MASK);
        far ^ (y >> 1) ^ ((y & 1).wrapping_neg() & MT_MATRIX_A)
    }
    /// `state[i..i + TWIST_BLOCK]` from the old words at `i..=i + TWIST_BLOCK` and the
    /// words at `far..far + TWIST_BLOCK`.
    #[inline(always)]
    fn block(s: &mut [u32; MT_N], i: usize, far: usize) {
        let cur: [u32; TWIST_BLOCK + 1] = s[i..=i + TWIST_BLOCK].try_into().unwrap();
        let f: [u32; TWIST_BLOCK] = s[far..far + TWIST_BLOCK].try_into().unwrap();
        let mut out = [0u32; TWIST_BLOCK];
        for l in 0..TWIST_BLOCK {
            out[l] = word(cur[l], cur[l + 1], f[l]);
        }
        s[i..i + TWIST_BLOCK].copy_from_slice(&out);
    }
    let mut i = 0;
    while i + TWIST_BLOCK <= MT_N - MT_M {
        block(s, i, i + MT_M);
        i += TWIST_BLOCK;
    }
    while i < MT_N - MT_M {
        s[i] = word(s[i], s[i + 1], s[i + MT_M]);
        i += 1;
    }
    while i + TWIST_BLOCK < MT_N {
        block(s, i, i + MT_M - MT_N);
        i += TWIST_BLOCK;
    }
    while i < MT_N - 1 {
        s[i] = word(s[i], s[i + 1], s[i + MT_M - MT_N]);
        i += 1;
    }
    s[MT_N - 1] = word(s[MT_N - 1], s[0], s[MT_M - 1]);
}

/// [`twist_body`] compiled for AVX-512F (integer operations: the same words on every
/// machine).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn twist_avx512(s: &mut [u32; MT_N]) {
    twist_body(s);
}

/// `out[i] = (((temper(words[i]) & 0xffffff) as f64 * 2^-24) * span + base) as f32`, the
/// uniform transform of [`TorchGenerator::uniform_`] over a run of state words; compiled
/// for AVX-512F as well where the CPU has it (the same IEEE operations lane by lane: a
/// conversion that is exact, one exact product, one rounded addition, one rounding to f32,
/// and no contraction, so the results are the portable loop's on every machine).
#[inline]
fn uniform_run(isa: Isa, out: &mut [f32], words: &[u32], span: f64, base: f64) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx512() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports AVX-512F.
            unsafe { uniform_run_avx512(out, words, span, base) };
            return;
        }
    }
    let _ = isa;
    uniform_run_body(out, words, span, base);
}

/// [`uniform_run_body`] compiled for AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn uniform_run_avx512(out: &mut [f32], words: &[u32], span: f64, base: f64) {
    uniform_run_body(out, words, span, base);
}

/// The loop of [`uniform_run`].
#[inline(always)]
fn uniform_run_body(out: &mut [f32], words: &[u32], span: f64, base: f64) {
    for (o, &w) in out.iter_mut().zip(words) {
        let x = (temper(w) & 0x00ff_ffff) as f64 * TWO_POW_M24;
        *o = (x * span + base) as f32;
    }
}

// ---------------------------------------------------------------------------------------------
// normal_fill_16_AVX2 emulation
// ---------------------------------------------------------------------------------------------

/// Box-Muller on one block of 16 (`normal_fill_16_AVX2`), dispatching to a body compiled with
/// hardware FMA where `isa` has it ([`Level::Avx2`](crate::kernels::isa::Level::Avx2)). Both
/// bodies perform the identical IEEE operations
/// (`f32::mul_add` is the exactly specified fused multiply-add either way), so the choice only
/// affects speed, never bits.
#[inline]
fn box_muller_block(isa: Isa, d: &mut [f32], mean: f32, std: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.avx2() {
            // SAFETY: an `Isa` of this level exists only where the CPU supports FMA.
            unsafe { box_muller_block_fma(d, mean, std) };
            return;
        }
    }
    let _ = isa;
    box_muller_block_body(d, mean, std);
}

/// [`box_muller_block_body`] compiled with the `fma` target feature, so that every
/// `f32::mul_add` becomes one `vfmadd` instruction instead of a call to `fmaf`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn box_muller_block_fma(d: &mut [f32], mean: f32, std: f32) {
    box_muller_block_body(d, mean, std);
}

/// One `normal_fill_16_AVX2` call on `d[0..16]`, the 8 AVX lanes emulated one after the other
/// (lanes are independent, so the order of lanes does not matter). Per lane `j` in `0..8`, in
/// f32: `u1 = 1 - d[j]`; `u2 = d[j+8]`; `radius = sqrt(-2 * log256(u1))`;
/// `theta = two_pi * u2`; `(s, c) = sincos256(theta)`; `n1 = radius * c`; `n2 = radius * s`;
/// `d[j] = fma(n1, std, mean)`; `d[j+8] = fma(n2, std, mean)`.
#[inline(always)]
fn box_muller_block_body(d: &mut [f32], mean: f32, std: f32) {
    let (lo, hi) = d[..16].split_at_mut(8);
    for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
        let u1 = 1.0f32 - *a;
        let u2 = *b;
        let radius = (-2.0f32 * log256(u1)).sqrt();
        let theta = TWO_PI_F32 * u2;
        let (s, c) = sincos256(theta);
        let n1 = radius * c;
        let n2 = radius * s;
        *a = n1.mul_add(std, mean);
        *b = n2.mul_add(std, mean);
    }
}

/// Rounds an f64 constant to f32, as C does for `float x = <double literal>` (the C source
/// writes its constants as double literals stored into float arrays: decimal -> f64 -> f32).
const fn f32_from_f64(v: f64) -> f32 {
    v as f32
}

/// `_mm256_set1_ps(2.0f * c10::pi<double>)`: `2 * pi` in f64, rounded to f32.
const TWO_PI_F32: f32 = f32_from_f64(2.0 * std::f64::consts::PI);

// The decimal literals below are the ones in `avx_mathfun.h`, kept digit for digit so that the
// decimal -> f64 -> f32 rounding is the C compiler's; hence the lint exceptions.
#[allow(clippy::excessive_precision, clippy::approx_constant)]
const LOG_SQRTHF: f32 = f32_from_f64(0.707106781186547524);
const LOG_P0: f32 = f32_from_f64(7.0376836292E-2);
const LOG_P1: f32 = f32_from_f64(-1.1514610310E-1);
const LOG_P2: f32 = f32_from_f64(1.1676998740E-1);
const LOG_P3: f32 = f32_from_f64(-1.2420140846E-1);
const LOG_P4: f32 = f32_from_f64(1.4249322787E-1);
const LOG_P5: f32 = f32_from_f64(-1.6668057665E-1);
const LOG_P6: f32 = f32_from_f64(2.0000714765E-1);
const LOG_P7: f32 = f32_from_f64(-2.4999993993E-1);
const LOG_P8: f32 = f32_from_f64(3.3333331174E-1);
const LOG_Q1: f32 = f32_from_f64(-2.12194440e-4);
const LOG_Q2: f32 = f32_from_f64(0.693359375);

/// One lane of `log256_ps` (Cephes `logf` as vectorised in `avx_mathfun.h`), with GCC's
/// `-ffp-contract=fast` fusions. All arithmetic is f32.
///
/// 1. `invalid = x <= 0` (ordered compare); `x = max(x, FLT_MIN)` with `maxps` semantics
///    (`x > FLT_MIN ? x : FLT_MIN`).
/// 2. `imm0 = (bits(x) >> 23) - 127` (logical shift, so the sign bit would be kept in the
///    biased exponent, as in the vector code); `x = from_bits((bits(x) & !0x7f800000) |
///    bits(0.5))` (mantissa in [0.5, 1)); `e = (imm0 as f32) + 1`.
/// 3. `mask = x < SQRTHF`; `tmp = mask ? x : +0`; `x = x - 1`; `e = e - (mask ? 1 : +0)`;
///    `x = x + tmp`.
/// 4. `z = x * x` (unfused: its uses are multiplications).
/// 5. Horner, **fused**: `y = fma(p0, x, p1)`, then `y = fma(y, x, pk)` for `k = 2..=8`.
/// 6. `y = y * x` (unfused: its use is a multiplication).
/// 7. **Fused**: `y = fma(y, z, e * q1)` where `e * q1` is a separately rounded product (GCC
///    fuses the earlier multiplication `y * z` into the add; `e * q1` then feeds an FMA, not an
///    add, and stays a plain multiply).
/// 8. **Fused**: `y = fma(-z, 0.5, y)` (the product is exact, so this equals `y - z * 0.5`).
/// 9. `x = x + y`; then **fused** `x = fma(e, q2, x)` (exact product: `q2 = 355/512`).
/// 10. If `invalid`, all bits set (NaN).
#[inline(always)]
fn log256(x_in: f32) -> f32 {
    let invalid = x_in <= 0.0;
    let mut x = if x_in > f32::MIN_POSITIVE {
        x_in
    } else {
        f32::MIN_POSITIVE
    };
    let bits = x.to_bits();
    let imm0 = ((bits >> 23) as i32).wrapping_sub(0x7f);
    x = f32::from_bits((bits & !0x7f80_0000) | 0.5f32.to_bits());
    let mut e = imm0 as f32;
    e += 1.0;

    let mask = x < LOG_SQRTHF;
    let tmp = if mask { x } else { 0.0 };
    x -= 1.0;
    e -= if mask { 1.0 } else { 0.0 };
    x += tmp;

    let z = x * x;
    let mut y = LOG_P0.mul_add(x, LOG_P1);
    y = y.mul_add(x, LOG_P2);
    y = y.mul_add(x, LOG_P3);
    y = y.mul_add(x, LOG_P4);
    y = y.mul_add(x, LOG_P5);
    y = y.mul_add(x, LOG_P6);
    y = y.mul_add(x, LOG_P7);
    y = y.mul_add(x, LOG_P8);
    y *= x;
    y = y.mul_add(z, e * LOG_Q1);
    y = (-z).mul_add(0.5, y);
    x += y;
    x = e.mul_add(LOG_Q2, x);
    if invalid {
        f32::from_bits(u32::MAX)
    } else {
        x
    }
}

const MINUS_DP1: f32 = f32_from_f64(-0.78515625);
#[allow(clippy::excessive_precision)]
const MINUS_DP2: f32 = f32_from_f64(-2.4187564849853515625e-4);
#[allow(clippy::excessive_precision)]
const MINUS_DP3: f32 = f32_from_f64(-3.77489497744594108e-8);
const SINCOF_P0: f32 = f32_from_f64(-1.9515295891E-4);
const SINCOF_P1: f32 = f32_from_f64(8.3321608736E-3);
const SINCOF_P2: f32 = f32_from_f64(-1.6666654611E-1);
const COSCOF_P0: f32 = f32_from_f64(2.443315711809948E-005);
const COSCOF_P1: f32 = f32_from_f64(-1.388731625493765E-003);
const COSCOF_P2: f32 = f32_from_f64(4.166664568298827E-002);
/// 4 / pi, as written in the C source (rounded to f32).
const FOPI: f32 = f32_from_f64(1.27323954473516);

/// `_mm256_cvttps_epi32` on one lane: truncation toward zero, and the "integer indefinite"
/// value `i32::MIN` for NaN and out-of-range inputs (Rust's `as` would saturate instead).
#[inline(always)]
fn cvttps_epi32(v: f32) -> i32 {
    if v.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        i32::MIN
    } else {
        v as i32
    }
}

/// One lane of `sincos256_ps` (Cephes `sinf`/`cosf` as vectorised in `avx_mathfun.h`), with
/// GCC's `-ffp-contract=fast` fusions. Returns `(sin, cos)`. All arithmetic is f32; integer
/// steps are wrapping `i32`.
///
/// 1. `sign_sin = bits(x) & 0x80000000`; `x = |x|` (clear the sign bit).
/// 2. `y = x * FOPI` (unfused: feeds a conversion); `j = cvtt(y)` (truncation);
///    `j = (j + 1) & !1`; `y = j as f32`.
/// 3. `swap_sin = (j & 4) << 29`; `poly_mask = (j & 2) == 0`.
/// 4. Extended-precision reduction, each step **fused**: `x = fma(y, -DP1, x)`;
///    `x = fma(y, -DP2, x)`; `x = fma(y, -DP3, x)`.
/// 5. `sign_cos = (!(j - 2) & 4) << 29`; `sign_sin ^= swap_sin`.
/// 6. `z = x * x` (unfused).
/// 7. Cosine polynomial: **fused** `yc = fma(c0, z, c1)`, **fused** `yc = fma(yc, z, c2)`;
///    `yc = yc * z` (unfused); **fused** `yc = fma(yc, z, -(z * 0.5))` (GCC fuses the earlier
///    multiply `yc * z` with the subtraction; `z * 0.5` is a plain, exact, multiply);
///    `yc = yc + 1`.
/// 8. Sine polynomial: **fused** `ys = fma(s0, z, s1)`, **fused** `ys = fma(ys, z, s2)`;
///    `ys = ys * z` (unfused); **fused** `ys = fma(ys, x, x)`.
/// 9. Selection exactly as the vector code does it: `ysin2 = poly_mask ? ys : +0`;
///    `ysin1 = poly_mask ? +0 : yc`; `ys' = ys - ysin2`; `yc' = yc - ysin1`;
///    `sin = (ysin1 + ysin2) ^ sign_sin`; `cos = (yc' + ys') ^ sign_cos` (xor on the bits).
#[inline(always)]
fn sincos256(x_in: f32) -> (f32, f32) {
    let mut sign_sin = x_in.to_bits() & 0x8000_0000;
    let mut x = f32::from_bits(x_in.to_bits() & 0x7fff_ffff);

    let mut j = cvttps_epi32(x * FOPI);
    j = j.wrapping_add(1) & !1;
    let y = j as f32;
    let swap_sin = ((j & 4) as u32) << 29;
    let poly_mask = (j & 2) == 0;

    x = y.mul_add(MINUS_DP1, x);
    x = y.mul_add(MINUS_DP2, x);
    x = y.mul_add(MINUS_DP3, x);

    let sign_cos = ((!j.wrapping_sub(2) & 4) as u32) << 29;
    sign_sin ^= swap_sin;

    let z = x * x;
    let mut yc = COSCOF_P0.mul_add(z, COSCOF_P1);
    yc = yc.mul_add(z, COSCOF_P2);
    yc *= z;
    yc = yc.mul_add(z, -(z * 0.5));
    yc += 1.0;

    let mut ys = SINCOF_P0.mul_add(z, SINCOF_P1);
    ys = ys.mul_add(z, SINCOF_P2);
    ys *= z;
    ys = ys.mul_add(x, x);

    let ysin2 = if poly_mask { ys } else { 0.0 };
    let ysin1 = if poly_mask { 0.0 } else { yc };
    let ys_rest = ys - ysin2;
    let yc_rest = yc - ysin1;
    let s = ysin1 + ysin2;
    let c = yc_rest + ys_rest;
    (
        f32::from_bits(s.to_bits() ^ sign_sin),
        f32::from_bits(c.to_bits() ^ sign_cos),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `discard` and `discard_fill` leave the generator where the draws they stand for
    /// leave it: the next draws are the same words (counts across twists, uniform and
    /// normal fills of every remainder mod 16, and short normal fills with their cache).
    #[test]
    fn discarding_advances_as_drawing_does() {
        for n in [0usize, 1, 623, 624, 625, 1_300] {
            let (mut a, mut b) = (TorchGenerator::new(7), TorchGenerator::new(7));
            for _ in 0..n {
                a.next_u32();
            }
            b.discard(n);
            let next = |g: &mut TorchGenerator| (0..700).map(|_| g.next_u32()).collect::<Vec<_>>();
            assert_eq!(next(&mut a), next(&mut b), "{n} draws");
        }
        for (len, normal) in [
            (16, true),
            (17, true),
            (31, true),
            (2_345, true),
            (5, false),
            (2_345, false),
        ] {
            let (mut a, mut b) = (TorchGenerator::new(11), TorchGenerator::new(11));
            let mut buf = vec![0.0f32; len];
            if normal {
                a.normal_(&mut buf, 0.0, 1.0);
            } else {
                a.uniform_(&mut buf, -0.5, 0.5);
            }
            b.discard_fill(len, normal);
            let next = |g: &mut TorchGenerator| (0..700).map(|_| g.next_u32()).collect::<Vec<_>>();
            assert_eq!(next(&mut a), next(&mut b), "len {len} normal {normal}");
        }
        // Below 16 elements `normal_` keeps a cached sample: a fill of 3 and one of 2 after
        // it take 4 draws, not 6, and leave the cache as the drawing generator's.
        let (mut a, mut b) = (TorchGenerator::new(3), TorchGenerator::new(3));
        let mut buf = [0.0f32; 5];
        a.normal_(&mut buf[..3], 0.5, 2.0);
        a.normal_(&mut buf[3..], 0.5, 2.0);
        b.discard_fill(3, true);
        b.discard_fill(2, true);
        let (mut x, mut y) = ([0.0f32; 1], [0.0f32; 1]);
        a.normal_(&mut x, 0.0, 1.0);
        b.normal_(&mut y, 0.0, 1.0);
        assert_eq!(
            (x[0].to_bits(), a.next_u32()),
            (y[0].to_bits(), b.next_u32())
        );
    }

    /// The C++ standard's reference values for `std::mt19937` with its default seed 5489
    /// (`[rand.predef]` pins the 10000th output; 3499211612 is the well-known first output).
    /// The twist as the standard writes it: one word at a time, indices modulo 624.
    fn twist_by_definition(state: &mut [u32; MT_N]) {
        for i in 0..MT_N {
            let y = (state[i] & MT_UPPER_MASK) | (state[(i + 1) % MT_N] & MT_LOWER_MASK);
            let mag = if y & 1 == 1 { MT_MATRIX_A } else { 0 };
            state[i] = state[(i + MT_M) % MT_N] ^ (y >> 1) ^ mag;
        }
    }

    /// `normal_` of a big tensor (its blocks transformed on the pool's threads) equals the
    /// definition taken block after block on one thread, bit for bit, with and without a
    /// ragged last block, and leaves the generator where the definition leaves it.
    #[test]
    fn big_normal_fills_equal_the_blocks_in_order() {
        for len in [BOX_MULLER_PARALLEL_FROM, BOX_MULLER_PARALLEL_FROM + 37] {
            let (mut a, mut b) = (
                TorchGenerator::new(5).on(Isa::PORTABLE),
                TorchGenerator::new(5),
            );
            let mut got = vec![0.0f32; len];
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap();
            pool.install(|| a.normal_(&mut got, 0.25, 1.5));
            let mut want = vec![0.0f32; len];
            b.rand(&mut want);
            let (mean, std) = (0.25f64 as f32, 1.5f64 as f32);
            for block in want[..len - len % 16].chunks_exact_mut(16) {
                box_muller_block(Isa::PORTABLE, block, mean, std);
            }
            if len % 16 != 0 {
                let tail = &mut want[len - 16..];
                b.rand(tail);
                box_muller_block(Isa::PORTABLE, tail, mean, std);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&want), "len {len}");
            assert_eq!(a.next_u32(), b.next_u32(), "len {len}");
        }
    }

    /// The portable blocked twist against the one-word-at-a-time definition (the vector
    /// compilations against the portable one: `tests/isa_paths.rs`).
    #[test]
    fn blocked_twist_equals_the_definition() {
        for seed in [0u64, 1, 5489, 8173, 0xdead_beef] {
            let mut g = TorchGenerator::new(seed).on(Isa::PORTABLE);
            let (mut want, mut portable) = (g.state, g.state);
            for _ in 0..4 {
                twist_by_definition(&mut want);
                g.twist();
                twist_body(&mut portable);
                assert_eq!(g.state, want, "seed {seed}, portable generator");
                assert_eq!(portable, want, "seed {seed}, portable body");
            }
        }
    }

    /// `uniform_` takes its draws a run of state words at a time; every element must be the
    /// per-draw definition's, also for lengths and starting offsets that cross twists.
    #[test]
    fn bulk_uniform_equals_one_draw_at_a_time() {
        for (skip, len) in [
            (0, 0),
            (0, 1),
            (0, 624),
            (3, 621),
            (3, 622),
            (600, 1300),
            (1, 5000),
        ] {
            for (lo, hi) in [(0.0, 1.0), (-0.169, 0.169), (-1.0 / 3.0, 0.5)] {
                let mut bulk = TorchGenerator::new(8173).on(Isa::PORTABLE);
                let mut one = TorchGenerator::new(8173);
                for _ in 0..skip {
                    bulk.next_u32();
                    one.next_u32();
                }
                let mut got = vec![0.0f32; len];
                bulk.uniform_(&mut got, lo, hi);
                // The portable loop on the same words, where the run fits before a twist.
                if skip + len <= MT_N {
                    let mut g = TorchGenerator::new(8173);
                    g.twist();
                    let (from, to) = (lo as f32, hi as f32);
                    let mut portable = vec![0.0f32; len];
                    let words = &g.state[skip..skip + len];
                    uniform_run_body(&mut portable, words, (to - from) as f64, from as f64);
                    assert_eq!(portable, got, "portable, skip {skip} len {len}");
                }
                let (from, to) = (lo as f32, hi as f32);
                for (i, g) in got.iter().enumerate() {
                    let want = one.uniform_f32_sample(from, to) as f32;
                    assert_eq!(g.to_bits(), want.to_bits(), "skip {skip} len {len} i {i}");
                }
                assert_eq!(bulk.next_u32(), one.next_u32(), "skip {skip} len {len}");
            }
        }
    }

    #[test]
    fn mt19937_default_seed_matches_the_cpp_standard() {
        let mut g = TorchGenerator::new(5489);
        assert_eq!(g.next_u32(), 3_499_211_612);
        let mut g = TorchGenerator::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = g.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn seed_uses_only_the_low_32_bits() {
        let mut a = TorchGenerator::new(5489);
        let mut b = TorchGenerator::new((7u64 << 32) | 5489);
        for _ in 0..1000 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
    }

    #[test]
    fn reseed_equals_new_and_clears_the_cached_normal() {
        let mut g = TorchGenerator::new(3);
        let mut buf = [0f32; 3];
        g.randn(&mut buf); // odd count: leaves a cached second normal
        assert!(g.next_double_normal.is_some());
        for _ in 0..700 {
            g.next_u32(); // cross a twist boundary
        }
        g.reseed(8199);
        let mut fresh = TorchGenerator::new(8199);
        assert!(g.next_double_normal.is_none());
        assert_eq!(g.state, fresh.state);
        let mut a = [0f32; 37];
        let mut b = [0f32; 37];
        g.randn(&mut a[..5]);
        fresh.randn(&mut b[..5]);
        g.randn(&mut a);
        fresh.randn(&mut b);
        assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        for _ in 0..2000 {
            assert_eq!(g.next_u32(), fresh.next_u32());
        }
    }

    #[test]
    fn next_u64_puts_the_first_draw_in_the_high_half() {
        let mut a = TorchGenerator::new(11);
        let mut b = a.clone();
        let hi = b.next_u32() as u64;
        let lo = b.next_u32() as u64;
        assert_eq!(a.next_u64(), (hi << 32) | lo);
    }

    #[test]
    fn uniform_stays_inside_the_cast_bounds() {
        let mut g = TorchGenerator::new(1);
        let mut w = [0f32; 4096];
        g.kaiming_uniform_linear(&mut w, 35);
        let bound = (1.0 / 35f64.sqrt()) as f32;
        assert!(w.iter().all(|v| (-bound..=bound).contains(v)));
    }

    /// Sanity of the emulated polynomials against libm (not a bit-exactness claim): Cephes'
    /// single-precision log/sin/cos are accurate to a few ulp on these ranges.
    #[test]
    fn emulated_log_and_sincos_are_close_to_libm() {
        let mut g = TorchGenerator::new(9);
        for _ in 0..100_000 {
            let u = ((g.next_u32() & 0xff_ffff) as f64 * TWO_POW_M24) as f32;
            let u1 = 1.0 - u;
            let l = log256(u1) as f64;
            let want = libm::log(u1 as f64);
            assert!((l - want).abs() <= 4e-7 * want.abs().max(1e-1), "log({u1})");
            let t = TWO_PI_F32 * u;
            let (s, c) = sincos256(t);
            assert!((s as f64 - libm::sin(t as f64)).abs() < 3e-7, "sin({t})");
            assert!((c as f64 - libm::cos(t as f64)).abs() < 3e-7, "cos({t})");
        }
        assert!(log256(0.0).is_nan());
        assert!(log256(-1.0).is_nan());
    }
}
