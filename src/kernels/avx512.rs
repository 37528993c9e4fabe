//! Lane helpers shared by the AVX-512F kernels that read (actual, expected) slices eight
//! elements at a time (`check::pair_avx512`, `stats::frontier::avx512`), and the block loop of
//! the elementwise f64 kernels (`exp_slice`, `tanh64_slice`).

use std::arch::x86_64::*;

/// Elements `i .. i + 8` of `a` and of `b` (`n`: the length both have). A block past the
/// end loads zeros in its missing lanes, with a masked load that reads only elements within
/// the slices; full blocks use plain loads, as masked loads are slow on some CPUs.
///
/// # Safety
/// The CPU must support AVX-512F, `i < n`, and both slices must hold at least `n` elements.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn load_pair(a: &[f64], b: &[f64], i: usize, n: usize) -> (__m512d, __m512d) {
    debug_assert!(i < n && a.len() >= n && b.len() >= n);
    if n - i >= 8 {
        // SAFETY: i + 8 <= n <= both lengths.
        (
            _mm512_loadu_pd(a.as_ptr().add(i)),
            _mm512_loadu_pd(b.as_ptr().add(i)),
        )
    } else {
        let live: __mmask8 = (1u8 << (n - i)) - 1;
        // SAFETY: the `live` lanes are elements i .. n of both slices.
        (
            _mm512_maskz_loadu_pd(live, a.as_ptr().add(i)),
            _mm512_maskz_loadu_pd(live, b.as_ptr().add(i)),
        )
    }
}

/// The eight lanes of `v`, lowest first.
///
/// # Safety
/// The CPU must support AVX-512F.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn lanes(v: __m512d) -> [f64; 8] {
    let mut out = [0.0f64; 8];
    // SAFETY: `out` holds eight f64.
    _mm512_storeu_pd(out.as_mut_ptr(), v);
    out
}

/// The body of an elementwise f64 slice kernel, `$xs[i] = f($xs[i])`, inside an AVX-512F
/// function: eight elements at a time (a short last block masked), `$lanes(x)` giving the
/// eight results and the mask of the lanes it covers. A block wholly covered is stored as
/// computed; otherwise each other lane is recomputed by `$scalar` (the definition) from its
/// input, which is still in the slice. Plain loads and stores for full blocks (masked ones
/// are slow on some CPUs). A macro, so that `$lanes` is inlined into the loop.
macro_rules! map_blocks {
    ($xs:expr, $lanes:ident, $scalar:path) => {{
        use std::arch::x86_64::*;
        for block in $xs.chunks_mut(8) {
            let mask = ((1u16 << block.len()) - 1) as __mmask8;
            let p = block.as_mut_ptr();
            let x = if mask == 0xff {
                _mm512_loadu_pd(p)
            } else {
                _mm512_maskz_loadu_pd(mask, p)
            };
            let (y, inside) = $lanes(x);
            if inside & mask == mask {
                if mask == 0xff {
                    _mm512_storeu_pd(p, y);
                } else {
                    _mm512_mask_storeu_pd(p, mask, y);
                }
            } else {
                let y = $crate::kernels::avx512::lanes(y);
                for (l, v) in block.iter_mut().enumerate() {
                    *v = if inside & (1 << l) == 0 {
                        $scalar(*v)
                    } else {
                        y[l]
                    };
                }
            }
        }
    }};
}
pub(crate) use map_blocks;
