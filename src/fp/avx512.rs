//! Lane helpers shared by the AVX-512F kernels that read (actual, expected) slices eight
//! elements at a time (`check::pair_avx512`, `stats::frontier::avx512`).

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
