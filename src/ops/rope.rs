//! Rotary position embeddings (RoPE) in the HF/Llama `rotate_half` style, forward and
//! backward, as torch 2.15's eager CPU ops compute them, and the float32 cos/sin tables the
//! tests build.
//!
//! **The op.** On a `[batch, seq, heads·head_dim]` tensor viewed `[batch, seq, heads,
//! head_dim]`, with `h = head_dim / 2`, the position of row `r` is `offset + r mod seq` and
//! `cos`, `sin` are that position's `[head_dim]` rows of the tables:
//!
//! ```text
//! out = (x * cos) + (rotate_half(x) * sin),   rotate_half(x) = cat(-x[h..], x[..h])
//! ```
//!
//! three eager kernels, so each element is `fl(fl(x[i]·cos[i]) + fl(rh[i]·sin[i]))` (no
//! contraction); the negation is exact.
//!
//! **Positions.** Positions are global sequence positions: the kernels take an explicit
//! `offset`, the position of the tensor's first row. Unsharded (and under head-sharded TP,
//! where every rank holds whole sequences) it is 0; under sequence sharding a rank's rows start
//! at its offset.
//!
//! **The tables** (float32, [`RopeTables::new`]), as the tests write them:
//! `inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))`,
//! `freqs = torch.outer(t, inv_freq)`, `emb = torch.cat((freqs, freqs), -1)`,
//! `cos, sin = emb.cos(), emb.sin()`. Measured kernels (`scripts/rope_tables.py`, torch 2.15.0,
//! `ATEN_CPU_CAPABILITY=avx2`, 1 and 2 threads): the exponent's division, `1.0 / t` (which is
//! `t.reciprocal() * 1.0`) and the outer product are one IEEE operation each; `theta ** e` is
//! `torch.pow(Scalar, Tensor)` (SLEEF `powf_u10` on ATen's vector body, the platform's `powf`
//! on its scalar tail) and `cos`/`sin` are ATen's `vml::vcos`/`vsin`, MKL's `vmsCos`/`vmsSin`
//! with `VML_HA`: none of these three is correctly rounded. Each is modelled as the correctly
//! rounded value (`libm` in f64, rounded once) corrected by a measured table of torch's
//! deviations (`src/kernels/data/rope_*.bin`), the way `tanh_mkl_f32` models MKL's tanh.
//! The tables cover a measured domain only: `theta` in [`THETAS`], `head_dim` in
//! [`HEAD_DIMS`], positions below [`MAX_POS`]; [`check_domain`] refuses anything else.
//! The float64 truth takes `1 / theta^(2j/dim)`, its products with the positions and their
//! cos and sin in float64 (`libm`), with no f32 rounding.
//!
//! The interleaved (complex, `torch.view_as_complex` / `torch.polar`) style is not modelled:
//! `torch.polar` uses other cos/sin kernels and the complex product its own order.

use std::sync::OnceLock;

use crate::ops::real::Real;

/// The `theta` values whose `pow` was measured.
pub const THETAS: [f64; 4] = [10000.0, 100000.0, 500000.0, 1000000.0];
/// The head dims whose tables were measured: every even one up to 32, and 48, 64, 80, 96, 128.
pub const HEAD_DIMS: [usize; 21] = [
    2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 48, 64, 80, 96, 128,
];
/// Positions measured: `0..MAX_POS` (`offset + seq <= MAX_POS`).
pub const MAX_POS: usize = 4096;

static POW_BIN: &[u8] = include_bytes!("../kernels/data/rope_pow_f32.bin");
static COS_BIN: &[u8] = include_bytes!("../kernels/data/rope_cos_f32.bin");
static SIN_BIN: &[u8] = include_bytes!("../kernels/data/rope_sin_f32.bin");
static NEAR_BIN: &[u8] = include_bytes!("../kernels/data/rope_trig_near_f32.bin");

fn words(b: &'static [u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

struct Measured {
    /// (theta bits, dim, j, torch's pow bits), sorted.
    pow: Vec<[u32; 4]>,
    /// Argument bits (bit 31: torch is the correctly rounded bits + 1, else - 1), sorted.
    cos: Vec<u32>,
    sin: Vec<u32>,
    /// (argument bits, torch's cos bits, torch's sin bits), sorted.
    near: Vec<[u32; 3]>,
}

fn measured() -> &'static Measured {
    static M: OnceLock<Measured> = OnceLock::new();
    M.get_or_init(|| Measured {
        pow: words(POW_BIN)
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect(),
        cos: words(COS_BIN),
        sin: words(SIN_BIN),
        near: words(NEAR_BIN)
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect(),
    })
}

/// Why `(theta, head_dim, offset + seq)` is outside the measured domain, if it is: the key
/// named first (`theta`, `head_dim`, or `seq`).
pub fn check_domain(
    theta: f64,
    head_dim: usize,
    offset: usize,
    seq: usize,
) -> Result<(), (&'static str, String)> {
    if !head_dim.is_multiple_of(2) {
        return Err((
            "head_dim",
            format!("head_dim {head_dim} is odd; rotate_half pairs the two halves of a head: allowed: an even head_dim"),
        ));
    }
    if !THETAS.contains(&theta) {
        return Err((
            "theta",
            format!(
                "theta = {theta} is outside the measured tables; allowed: one of {THETAS:?} (torch's pow was measured for these only)"
            ),
        ));
    }
    if !HEAD_DIMS.contains(&head_dim) {
        return Err((
            "head_dim",
            format!(
                "head_dim {head_dim} is outside the measured tables; allowed: one of {HEAD_DIMS:?}"
            ),
        ));
    }
    if offset + seq > MAX_POS {
        return Err((
            "seq",
            format!(
                "positions {offset}..{} reach past the measured tables; allowed: positions below {MAX_POS} (torch's cos and sin were measured on these arguments only)",
                offset + seq
            ),
        ));
    }
    Ok(())
}

/// Correctly rounded f32 of an f64 value computed to within a few f64 ulps (callers only use
/// it away from rounding midpoints: the measured tables hold every argument near one).
fn round32(v: f64) -> f32 {
    v as f32
}

/// torch's `theta ** e` at index `j` of a `dim / 2`-element exponent tensor: the correctly
/// rounded pow unless the measured table holds torch's bits.
fn pow_torch(theta: f32, dim: usize, j: usize, e: f32) -> f32 {
    let key = [theta.to_bits(), dim as u32, j as u32];
    let m = measured();
    match m.pow.binary_search_by(|r| [r[0], r[1], r[2]].cmp(&key)) {
        Ok(i) => f32::from_bits(m.pow[i][3]),
        Err(_) => round32(libm::pow(theta as f64, e as f64)),
    }
}

/// torch's `cos(a)` or `sin(a)` (MKL `vmsCos`/`vmsSin`, VML_HA) for a measured argument `a`:
/// the near-midpoint table, else the correctly rounded value moved one ulp where the deviation
/// table says.
fn trig_torch(a: f32, sin: bool) -> f32 {
    let m = measured();
    let bits = a.to_bits();
    if let Ok(i) = m.near.binary_search_by(|r| r[0].cmp(&bits)) {
        return f32::from_bits(m.near[i][if sin { 2 } else { 1 }]);
    }
    let v = if sin {
        libm::sin(a as f64)
    } else {
        libm::cos(a as f64)
    };
    let cr = round32(v).to_bits();
    let dev = if sin { &m.sin } else { &m.cos };
    match dev.binary_search_by(|k| (k & 0x7fff_ffff).cmp(&bits)) {
        Ok(i) if dev[i] & 0x8000_0000 != 0 => f32::from_bits(cr + 1),
        Ok(_) => f32::from_bits(cr - 1),
        Err(_) => f32::from_bits(cr),
    }
}

/// torch's float32 `inv_freq` for `(theta, dim)` (in the measured domain): per `j < dim/2`,
/// `e = f32(2j) / f32(dim)`, `p = pow(theta, e)` (measured), `1 / p`, one rounding each.
pub fn inv_freq_f32(theta: f64, dim: usize) -> Vec<f32> {
    let th = theta as f32;
    (0..dim / 2)
        .map(|j| {
            let e = (2 * j) as f32 / dim as f32;
            1.0f32 / pow_torch(th, dim, j, e)
        })
        .collect()
}

/// The cos and sin tables of positions `offset..offset + seq`, `[seq, head_dim]` row-major
/// (`cat(freqs, freqs)`: each row's halves are equal), in float32 as torch builds them and in
/// float64 for the truth. Built once per scenario; independent of the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTables {
    /// Features per head.
    pub head_dim: usize,
    /// Positions in the table.
    pub seq: usize,
    /// The first row's position.
    pub offset: usize,
    /// torch's float32 cos.
    pub cos32: Vec<f32>,
    /// torch's float32 sin.
    pub sin32: Vec<f32>,
    /// float64 cos of `pos / theta^(2j/dim)`.
    pub cos64: Vec<f64>,
    /// float64 sin.
    pub sin64: Vec<f64>,
}

impl RopeTables {
    /// Tables for `theta`, `head_dim`, positions `offset..offset + seq` ([`check_domain`]
    /// must accept them). f32: `a = f32(pos) · inv_freq[j]` (one rounding), then the measured
    /// cos and sin. f64: `inv = 1 / pow(theta, 2j / dim)`, `pos · inv`, cos, sin, each in f64.
    pub fn new(theta: f64, head_dim: usize, offset: usize, seq: usize) -> Result<Self, String> {
        check_domain(theta, head_dim, offset, seq).map_err(|(_, m)| m)?;
        let h = head_dim / 2;
        let inv32 = inv_freq_f32(theta, head_dim);
        let inv64: Vec<f64> = (0..h)
            .map(|j| 1.0 / libm::pow(theta, (2 * j) as f64 / head_dim as f64))
            .collect();
        let n = seq * head_dim;
        let mut t = RopeTables {
            head_dim,
            seq,
            offset,
            cos32: Vec::with_capacity(n),
            sin32: Vec::with_capacity(n),
            cos64: Vec::with_capacity(n),
            sin64: Vec::with_capacity(n),
        };
        for p in offset..offset + seq {
            for _half in 0..2 {
                for j in 0..h {
                    let a = p as f32 * inv32[j];
                    t.cos32.push(trig_torch(a, false));
                    t.sin32.push(trig_torch(a, true));
                    let a64 = p as f64 * inv64[j];
                    t.cos64.push(libm::cos(a64));
                    t.sin64.push(libm::sin(a64));
                }
            }
        }
        Ok(t)
    }
}

/// Scalar types with a view of the tables: f32 torch's, f64 the truth's.
pub trait RopeReal: Real {
    /// `(cos, sin)`, `[seq, head_dim]` each.
    fn rope_tables(t: &RopeTables) -> (&[Self], &[Self]);
}

impl RopeReal for f32 {
    fn rope_tables(t: &RopeTables) -> (&[f32], &[f32]) {
        (&t.cos32, &t.sin32)
    }
}

impl RopeReal for f64 {
    fn rope_tables(t: &RopeTables) -> (&[f64], &[f64]) {
        (&t.cos64, &t.sin64)
    }
}

/// `y = x·cos + rotate_half(x)·sin` on rows of `width` (whole heads of `t.head_dim`), row `r`
/// at table row `r mod t.seq`. Per head, `i < h = head_dim/2`:
/// `y[i] = fl(fl(x[i]·c[i]) + fl((-x[i+h])·s[i]))`,
/// `y[i+h] = fl(fl(x[i+h]·c[i+h]) + fl(x[i]·s[i+h]))`.
pub fn rope_forward<R: RopeReal>(x: &[R], width: usize, t: &RopeTables, y: &mut [R]) {
    per_head(x, width, t, y, |xh, yh, c, s, h| {
        for i in 0..h {
            yh[i] = xh[i] * c[i] + (-xh[i + h]) * s[i];
            yh[i + h] = xh[i + h] * c[i + h] + xh[i] * s[i + h];
        }
    });
}

/// The walk [`rope_forward`] and [`rope_backward`] share: for every head of the rows of
/// `width` in `a` (whole heads of `t.head_dim`), `f(a's head, b's head, cos, sin, head_dim/2)`
/// with row `r`'s table row `r mod t.seq`.
fn per_head<R: RopeReal>(
    a: &[R],
    width: usize,
    t: &RopeTables,
    b: &mut [R],
    mut f: impl FnMut(&[R], &mut [R], &[R], &[R], usize),
) {
    assert_eq!(a.len(), b.len(), "rope: lengths");
    let hd = t.head_dim;
    assert!(
        hd.is_multiple_of(2) && width.is_multiple_of(hd),
        "rope: whole heads"
    );
    let (cos, sin) = R::rope_tables(t);
    for (r, (ar, br)) in a
        .chunks_exact(width)
        .zip(b.chunks_exact_mut(width))
        .enumerate()
    {
        let row = (r % t.seq) * hd;
        let (c, s) = (&cos[row..row + hd], &sin[row..row + hd]);
        for (ah, bh) in ar.chunks_exact(hd).zip(br.chunks_exact_mut(hd)) {
            f(ah, bh, c, s, hd / 2);
        }
    }
}

/// The gradient of [`rope_forward`] w.r.t. `x`, in autograd's order for
/// `(x * cos) + (rotate_half(x) * sin)`: `gc = fl(g·c)`, `gs = fl(g·s)` (the two
/// MulBackward0s); x's input buffer receives the slice `x[..., h:]`'s gradient `[0, -gs[..h]]`
/// first (its node has the highest sequence number of the three), then `x[..., :h]`'s
/// `[gs[h..], 0]`, then `gc` (the first product, created first, runs last). So per head, `i < h`:
/// `dx[i] = fl(fl(0 + gs[i+h]) + gc[i])`, `dx[i+h] = fl(fl(-gs[i] + 0) + gc[i+h])`
/// (the zero additions matter only for the sign of a zero).
pub fn rope_backward<R: RopeReal>(dy: &[R], width: usize, t: &RopeTables, dx: &mut [R]) {
    per_head(dy, width, t, dx, |g, d, c, s, h| {
        for i in 0..h {
            d[i] = (R::ZERO + g[i + h] * s[i + h]) + g[i] * c[i];
            d[i + h] = (-(g[i] * s[i]) + R::ZERO) + g[i + h] * c[i + h];
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_errors_name_the_key() {
        assert_eq!(check_domain(10000.0, 7, 0, 4).unwrap_err().0, "head_dim");
        assert_eq!(check_domain(10000.0, 34, 0, 4).unwrap_err().0, "head_dim");
        assert_eq!(check_domain(20000.0, 8, 0, 4).unwrap_err().0, "theta");
        assert_eq!(check_domain(10000.0, 8, 4000, 97).unwrap_err().0, "seq");
        assert!(check_domain(10000.0, 8, 4000, 96).is_ok());
    }

    #[test]
    fn measured_tables_are_sorted_and_one_ulp() {
        let m = measured();
        assert!(m.pow.windows(2).all(|w| w[0] < w[1]));
        assert!(m.near.windows(2).all(|w| w[0][0] < w[1][0]));
        for dev in [&m.cos, &m.sin] {
            assert!(dev
                .windows(2)
                .all(|w| (w[0] & 0x7fff_ffff) < (w[1] & 0x7fff_ffff)));
        }
        // Every pow entry lies within one ulp of the correctly rounded value.
        for r in &m.pow {
            let e = (2 * r[2]) as f32 / r[1] as f32;
            let cr = round32(libm::pow(f32::from_bits(r[0]) as f64, e as f64)).to_bits();
            assert!(cr.abs_diff(r[3]) <= 1, "{r:?}");
        }
    }

    /// Forward and backward against a direct float64 evaluation of the formula (rotation by
    /// the angle: exact arithmetic gives `x·cos + rh·sin`, and the gradient is the transposed
    /// rotation `g·cos - rh(g)·sin` written out): the f64 kernels round each operation, so they
    /// agree to a few f64 ulps; 1e-13 relative to the inputs' scale (|x|, |g| <= 1) bounds that.
    #[test]
    fn f64_kernels_rotate() {
        let t = RopeTables::new(10000.0, 8, 3, 5).unwrap();
        let width = 16;
        let x: Vec<f64> = (0..2 * 5 * width)
            .map(|i| ((i * 37 % 101) as f64 / 101.0) - 0.5)
            .collect();
        let mut y = vec![0.0; x.len()];
        rope_forward(&x, width, &t, &mut y);
        let mut dx = vec![0.0; x.len()];
        rope_backward(&x, width, &t, &mut dx);
        for (r, (xr, (yr, dr))) in x
            .chunks(width)
            .zip(y.chunks(width).zip(dx.chunks(width)))
            .enumerate()
        {
            let pos = 3 + r % 5;
            for hh in 0..2 {
                for j in 0..4 {
                    let ang = pos as f64 / libm::pow(10000.0, (2 * j) as f64 / 8.0);
                    let (a, b) = (xr[hh * 8 + j], xr[hh * 8 + j + 4]);
                    let (c, s) = (libm::cos(ang), libm::sin(ang));
                    assert!((yr[hh * 8 + j] - (a * c - b * s)).abs() < 1e-13);
                    assert!((yr[hh * 8 + j + 4] - (b * c + a * s)).abs() < 1e-13);
                    assert!((dr[hh * 8 + j] - (a * c + b * s)).abs() < 1e-13);
                    assert!((dr[hh * 8 + j + 4] - (b * c - a * s)).abs() < 1e-13);
                }
            }
        }
    }
}
