//! torch.testing's mismatch message, written as torch writes it.

use std::fmt::Write as _;

use crate::check::python_repr::py_repr;
use crate::check::Tolerance;

/// Formats a flat index as torch does in its messages: the bare integer for a 1-d tensor,
/// a tuple `(1, 1, 45)` for more dimensions, `()` for a 0-d tensor.
pub fn format_index(flat: usize, shape: &[usize]) -> String {
    match shape.len() {
        0 => "()".into(),
        1 => flat.to_string(),
        _ => {
            let mut idx = vec![0usize; shape.len()];
            let mut rest = flat;
            for (d, &n) in shape.iter().enumerate().rev() {
                idx[d] = rest % n.max(1);
                rest /= n.max(1);
            }
            let parts: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// torch's `assert_close` failure message for two fp32 tensors, as
/// `torch.testing._comparison.make_tensor_mismatch_msg` builds it:
/// the mismatch decision is the usage criterion above (> 1); the differences are computed as
/// torch computes them for float32 tensors, `|actual - expected|` rounded to f32 and
/// `abs_diff / |expected|` in f32, over the mismatched elements only, and printed with
/// Python's float repr. Returns `None` when nothing mismatches.
///
/// `actual`/`expected` are f64 copies of f32 tensors when `f32_inputs` is true; when the
/// expected side is the float64 ground truth, the differences are computed in f64 instead.
pub fn torch_mismatch_message(
    actual: &[f64],
    expected: &[f64],
    shape: &[usize],
    tol: Tolerance,
    f32_inputs: bool,
) -> Option<String> {
    let n = actual.len();
    let mut mismatched = 0usize;
    let (mut max_abs, mut max_abs_i) = (0.0f64, 0usize);
    let (mut max_rel, mut max_rel_i) = (0.0f64, 0usize);
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        if tol.usage(a, e) <= 1.0 {
            continue;
        }
        mismatched += 1;
        let (abs, rel) = if f32_inputs {
            let abs = ((a as f32) - (e as f32)).abs();
            (abs as f64, (abs / (e as f32).abs()) as f64)
        } else {
            let abs = (a - e).abs();
            (abs, abs / e.abs())
        };
        // torch.max propagates NaN: a NaN difference wins and is reported.
        if abs > max_abs || (abs.is_nan() && !max_abs.is_nan()) {
            max_abs = abs;
            max_abs_i = i;
        }
        if rel > max_rel || (rel.is_nan() && !max_rel.is_nan()) {
            max_rel = rel;
            max_rel_i = i;
        }
    }
    if mismatched == 0 {
        return None;
    }
    let equality = tol.atol == 0.0 && tol.rtol == 0.0;
    let mut msg = String::new();
    let _ = writeln!(
        msg,
        "Tensor-likes are not {}!\n",
        if equality { "equal" } else { "close" }
    );
    let _ = writeln!(
        msg,
        "Mismatched elements: {} / {} ({})",
        mismatched,
        n,
        python_percent_1(mismatched as f64 / n as f64)
    );
    let allowed = |t: f64| {
        if equality {
            String::new()
        } else {
            format!(" (up to {} allowed)", py_repr(t))
        }
    };
    let _ = writeln!(
        msg,
        "Greatest absolute difference: {} at index {}{}",
        py_repr(max_abs),
        format_index(max_abs_i, shape),
        allowed(tol.atol)
    );
    let _ = write!(
        msg,
        "Greatest relative difference: {} at index {}{}",
        py_repr(max_rel),
        format_index(max_rel_i, shape),
        allowed(tol.rtol)
    );
    Some(msg)
}

/// Python's `f"{x:.1%}"`: x·100 rounded to one decimal (round-half-even on the exact binary
/// value, which Rust's formatting also does), followed by `%`.
fn python_percent_1(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: Tolerance = Tolerance {
        atol: 1e-6,
        rtol: 1e-5,
    };

    #[test]
    fn mismatch_message_has_torch_layout() {
        let mut e = vec![0.25f64; 670];
        let mut a = e.clone();
        // One element off by 2^-20 (about 9.5e-7) on an expected value of 2^-10: the
        // allowance is 1e-6 + 1e-5·2^-10 ≈ 1.0098e-6, so the element passes; make it fail
        // with 2^-19 instead.
        let idx = 335 + 67 + 45;
        e[idx] = 2f64.powi(-10);
        a[idx] = 2f64.powi(-10) + 2f64.powi(-19);
        let msg = torch_mismatch_message(&a, &e, &[2, 5, 67], OLD, true).unwrap();
        let expected_abs = py_repr(2f64.powi(-19));
        let expected_rel = py_repr(2f64.powi(-9));
        assert_eq!(
            msg,
            format!(
                "Tensor-likes are not close!\n\n\
                 Mismatched elements: 1 / 670 (0.1%)\n\
                 Greatest absolute difference: {expected_abs} at index (1, 1, 45) (up to 1e-06 allowed)\n\
                 Greatest relative difference: {expected_rel} at index (1, 1, 45) (up to 1e-05 allowed)"
            )
        );
        assert!(torch_mismatch_message(&e, &e, &[670], OLD, true).is_none());
    }

    #[test]
    fn index_formatting_follows_torch() {
        assert_eq!(format_index(335 + 67 + 45, &[2, 5, 67]), "(1, 1, 45)");
        assert_eq!(format_index(45, &[670]), "45");
        assert_eq!(format_index(0, &[]), "()");
    }

    #[test]
    fn equality_message_says_equal_and_omits_allowance() {
        let exact = Tolerance {
            atol: 0.0,
            rtol: 0.0,
        };
        let msg = torch_mismatch_message(&[1.0, 2.5], &[1.0, 2.0], &[2], exact, false).unwrap();
        assert!(msg.starts_with("Tensor-likes are not equal!"));
        assert!(msg.contains("Mismatched elements: 1 / 2 (50.0%)"));
        assert!(msg.contains("Greatest absolute difference: 0.5 at index 1\n"));
        assert!(!msg.contains("allowed"));
    }
}
