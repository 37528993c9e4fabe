//! `check::py_repr` against Python's own `repr(float)`: the fixture `tests/data/py_repr.txt`
//! from `scripts/py_repr_fixture.py` (CPython 3, standard library only) holds random bit
//! patterns, values at every decimal exponent from 1e-25 to 1e25, and 200 exact ties at the
//! 17th significant digit, where Python rounds half to even.

use seedsweep::check::python_repr::py_repr;

#[test]
fn py_repr_equals_python_repr_on_the_fixture() {
    let text = include_str!("../data/py_repr.txt");
    let mut n = 0;
    for line in text.lines() {
        let (hex, want) = line.split_once(' ').expect("`bits repr` per line");
        let x = f64::from_bits(u64::from_str_radix(hex, 16).expect("hex bit pattern"));
        assert_eq!(py_repr(x), want, "bits {hex}");
        n += 1;
    }
    // The script writes 2,727 values; a truncated fixture would test less than it claims.
    assert_eq!(n, 2727);
}
