//! Python's `repr` of a float (the shortest round-trip digits, ties to even), as torch's
//! messages and the CSV files write numbers.

/// Formats a float the way Python's `repr(float)` does, which is how torch's messages print
/// numbers: the shortest string that round-trips, in fixed notation when the decimal exponent
/// is in `[-4, 16)` and in scientific notation with a signed two-digit exponent otherwise
/// (`1e-06`, `1.1173542588949203e-06`, `0.0001`, `1e+16`, `inf`, `nan`).
pub fn py_repr(x: f64) -> String {
    let mut out = Vec::with_capacity(24);
    py_repr_into(x, &mut out);
    String::from_utf8(out).expect("py_repr writes ASCII")
}

/// [`py_repr`] appended to `out`, without allocating (the digits come from a stack buffer).
pub fn py_repr_into(x: f64, out: &mut Vec<u8>) {
    if x.is_nan() {
        return out.extend_from_slice(b"nan");
    }
    if x.is_infinite() {
        return out.extend_from_slice(if x > 0.0 { b"inf" } else { b"-inf" });
    }
    if x == 0.0 {
        return out.extend_from_slice(if x.is_sign_negative() {
            b"-0.0"
        } else {
            b"0.0"
        });
    }
    let mut digits = [0u8; 17];
    let (nd, exp) = shortest_digits(x, &mut digits);
    let digits = &digits[..nd];
    if x < 0.0 {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.extend_from_slice(digits);
                out.extend(std::iter::repeat_n(b'0', point - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..point]);
                out.push(b'.');
                out.extend_from_slice(&digits[point..]);
            }
        }
    } else {
        out.push(digits[0]);
        if nd > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e >= 100 {
            out.push(b'0' + (e / 100) as u8);
        }
        out.push(b'0' + (e / 10 % 10) as u8);
        out.push(b'0' + (e % 10) as u8);
    }
}

/// The shortest decimal digits that round-trip to the finite, nonzero `x` (the closest such
/// string to x), with no leading or trailing zeros, into `digits`; returns their count n and
/// the decimal exponent E, so that |x| ≈ 0.d₁d₂…dₙ × 10^(E+1). The digits come from the `ryu`
/// crate (Adams, "Ryū: fast float-to-string conversion", PLDI 2018), whose output
/// ("1.5e-7", "0.0001", "123456.0", "1e16") is read back into digits and an exponent.
/// Where two shortest strings are equally close to x (an exact decimal tie, such as 2⁻²⁵ =
/// 2.98023223876953125e-8), ryu takes the even one, as Python's `repr` does (David Gay's
/// dtoa, mode 0), and Rust's `{:e}` takes the upper one: `tests/suite/py_repr_fixture.rs` checks
/// the strings against CPython's on random values and 200 such ties.
fn shortest_digits(x: f64, digits: &mut [u8; 17]) -> (usize, i32) {
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(x.abs()).as_bytes();
    let (mut nd, mut int_digits, mut point) = (0usize, 0i32, false);
    let mut rest: &[u8] = &[];
    for (i, &c) in text.iter().enumerate() {
        match c {
            b'.' => point = true,
            b'e' | b'E' => {
                rest = &text[i + 1..];
                break;
            }
            b'0' if nd == 0 => {
                // A leading zero: after the point it moves the exponent down.
                if point {
                    int_digits -= 1;
                }
            }
            _ => {
                digits[nd] = c;
                nd += 1;
                if !point {
                    int_digits += 1;
                }
            }
        }
    }
    while nd > 1 && digits[nd - 1] == b'0' {
        nd -= 1;
    }
    let (neg, exp_digits) = match rest.split_first() {
        Some((b'-', r)) => (true, r),
        _ => (false, rest),
    };
    let e10 = exp_digits
        .iter()
        .fold(0i32, |acc, &c| acc * 10 + i32::from(c - b'0'));
    (nd, int_digits - 1 + if neg { -e10 } else { e10 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The earlier, allocating `py_repr` (string splitting of `{:e}`): the reference the
    /// allocation-free one is checked against.
    fn py_repr_reference(x: f64) -> String {
        if x.is_nan() {
            return "nan".into();
        }
        if x.is_infinite() {
            return if x > 0.0 { "inf".into() } else { "-inf".into() };
        }
        if x == 0.0 {
            return if x.is_sign_negative() {
                "-0.0".into()
            } else {
                "0.0".into()
            };
        }
        let sci = format!("{:e}", x);
        let (mantissa, exp) = sci.split_once('e').unwrap();
        let exp: i32 = exp.parse().unwrap();
        if (-4..16).contains(&exp) {
            let neg = mantissa.starts_with('-');
            let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
            let mut out = String::new();
            if neg {
                out.push('-');
            }
            if exp < 0 {
                out.push_str("0.");
                out.push_str(&"0".repeat((-exp - 1) as usize));
                out.push_str(&digits);
            } else {
                let point = exp as usize + 1;
                if digits.len() <= point {
                    out.push_str(&digits);
                    out.push_str(&"0".repeat(point - digits.len()));
                    out.push_str(".0");
                } else {
                    out.push_str(&digits[..point]);
                    out.push('.');
                    out.push_str(&digits[point..]);
                }
            }
            out
        } else {
            let sign = if exp < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exp.abs())
        }
    }

    #[test]
    fn py_repr_into_matches_the_reference_on_random_bit_patterns() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut ties = 0;
        for i in 0..200_000u64 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Raw bit patterns, and values near every decimal exponent boundary.
            let x = if i % 2 == 0 {
                f64::from_bits(s)
            } else {
                (s >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((s % 41) as i32 - 20)
            };
            let (ours, reference) = (py_repr(x), py_repr_reference(x));
            if ours != reference {
                // Core's `{:e}` and ryu differ only where two shortest strings are equally
                // close to x (core rounds such ties up, Python and ryu to even; the fixture
                // test `tests/suite/py_repr_fixture.rs` pins Python's choice): both must round-trip
                // and be equally short.
                assert_eq!(ours.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{x:e}");
                assert_eq!(ours.len(), reference.len(), "{x:e}");
                ties += 1;
            }
        }
        // Ties come from the scaled half of the draws (multiples of 2⁻⁵³ times a power of
        // ten); which string is Python's at a tie is checked by tests/suite/py_repr_fixture.rs, not
        // here. A difference on more than a small fraction of the draws would not be a tie.
        assert!(ties < 1000, "{ties} differences from core's digits");
        for x in [
            1e16,
            9999999999999998.0,
            1e-4,
            9.999999999999999e-5,
            1e-5,
            5e-324,
            f64::MAX,
        ] {
            assert_eq!(py_repr(x), py_repr_reference(x), "{x:e}");
        }
    }

    #[test]
    fn py_repr_matches_python_for_known_values() {
        // Expected strings are what CPython 3 prints for repr() of these doubles.
        assert_eq!(py_repr(1e-6), "1e-06");
        assert_eq!(py_repr(1e-5), "1e-05");
        assert_eq!(py_repr(1.3e-6), "1.3e-06");
        assert_eq!(py_repr(1.1173542588949203e-06), "1.1173542588949203e-06");
        assert_eq!(py_repr(0.0001), "0.0001");
        assert_eq!(py_repr(0.00012), "0.00012");
        assert_eq!(py_repr(0.5), "0.5");
        assert_eq!(py_repr(13.75), "13.75");
        assert_eq!(py_repr(100.0), "100.0");
        assert_eq!(py_repr(1e16), "1e+16");
        assert_eq!(py_repr(123456789012345.0), "123456789012345.0");
        assert_eq!(py_repr(-2.5e-7), "-2.5e-07");
        assert_eq!(py_repr(f64::INFINITY), "inf");
        assert_eq!(py_repr(0.0), "0.0");
        // 2⁻²⁵ and 5·2⁻²³ (one fp32 ulp at 0.25 and at 5.0, common greatest differences)
        // are exact decimal ties at the 17th digit: Python rounds them half to even, where
        // Rust's `{:e}` rounds up (…313e-08, …063e-07).
        assert_eq!(py_repr(2f64.powi(-25)), "2.9802322387695312e-08");
        assert_eq!(py_repr(5.0 * 2f64.powi(-23)), "5.960464477539062e-07");
    }
}
