//! Values written in a file: an input's `values` (`draw = "fixed"`) and an outer loop's
//! `[init] values`. One reader for both: a list of numbers (row-major), or for an input a
//! generator table as tests write small tensors (`torch.range(0, 7).repeat(16, 4)`).
//!
//! The element type follows `torch.tensor`: a list of integers is int64, a list with a float
//! in it is float32 (every number rounded once to nearest-even, as `torch.tensor` stores a
//! Python float or int in a float32 tensor); a `dtype` overrides it. The generators take
//! integer arguments only, so every value they make is exact in both types.

use crate::scenario::ir::FixedValues;
use crate::sys::error::InputError;

use super::node::{type_name, Obj};

/// The element type of written values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// float32.
    F32,
    /// int64.
    I64,
}

/// Largest magnitude of a generator argument (so every value is exact in float32).
const MAX_ARG: i64 = 1 << 24;
/// Most elements written values may hold.
pub const MAX_VALUES: usize = 1 << 24;

enum Num {
    Int(i64),
    Float(f64),
}

/// Reads `o.key`: a list of numbers, or (with `generators`) a table `{ range = [..] }` /
/// `{ arange = [..] }` with an optional `repeat = [..]`. `want` is the element type (`None`:
/// as `torch.tensor` / the generator infers it). Errors name `key` or `key[i]`.
pub fn read_values(
    o: &Obj<'_>,
    key: &str,
    want: Option<ValueType>,
    generators: bool,
) -> Result<FixedValues, InputError> {
    let allowed = if generators {
        "a list of numbers (row-major), or { range = [start, end] } / { arange = [end] }, each with an optional repeat = [..]"
    } else {
        "a list of numbers (row-major)"
    };
    match o.table.get(key) {
        Some(toml::Value::Array(a)) => list(o, key, a, want),
        Some(toml::Value::Table(t)) if generators => generate(o, key, t, want),
        Some(v) => Err(o.err(
            key,
            format!("{} is not allowed; allowed: {allowed}", type_name(v)),
        )),
        None => Err(o.err(key, format!("required; allowed: {allowed}"))),
    }
}

fn list(
    o: &Obj<'_>,
    key: &str,
    a: &[toml::Value],
    want: Option<ValueType>,
) -> Result<FixedValues, InputError> {
    if a.is_empty() || a.len() > MAX_VALUES {
        return Err(o.err(
            key,
            format!(
                "a list of {} numbers is not allowed; allowed: 1..={MAX_VALUES}",
                a.len()
            ),
        ));
    }
    let mut nums = Vec::with_capacity(a.len());
    for (i, v) in a.iter().enumerate() {
        let n = match v {
            toml::Value::Integer(n) => Num::Int(*n),
            toml::Value::Float(f) if f.is_finite() => Num::Float(*f),
            v => {
                return Err(o.ctx.err(
                    &format!("{}[{i}]", o.key_path(key)),
                    format!("{} is not allowed; allowed: a finite number", describe(v)),
                ))
            }
        };
        nums.push(n);
    }
    let ty = want.unwrap_or(if nums.iter().all(|n| matches!(n, Num::Int(_))) {
        ValueType::I64
    } else {
        ValueType::F32
    });
    Ok(match ty {
        // torch.tensor's float32 store: the Python number rounded once to nearest-even.
        ValueType::F32 => FixedValues::F32(
            nums.iter()
                .map(|n| match *n {
                    Num::Int(i) => i as f32,
                    Num::Float(f) => f as f32,
                })
                .collect(),
        ),
        ValueType::I64 => {
            let mut out = Vec::with_capacity(nums.len());
            for (i, n) in nums.iter().enumerate() {
                match *n {
                    Num::Int(v) => out.push(v),
                    Num::Float(f) => {
                        return Err(o.ctx.err(
                            &format!("{}[{i}]", o.key_path(key)),
                            format!("{f} is not an integer; allowed: integers for an int64 input (write dtype = \"float32\" for a float input)"),
                        ))
                    }
                }
            }
            FixedValues::I64(out)
        }
    })
}

fn describe(v: &toml::Value) -> String {
    match v {
        toml::Value::Float(f) => f.to_string(),
        v => type_name(v).to_string(),
    }
}

/// `{ range = [start, end(, step)] }` (`torch.range`: the end included, float32),
/// `{ arange = [(start, )end(, step)] }` (`torch.arange`: the end excluded, int64 for integer
/// arguments), then `repeat = [r0, .., rk]` (`Tensor.repeat` of the 1-D result: shape
/// `[r0, .., r(k-1), rk·n]`, every row the sequence repeated rk times).
fn generate(
    o: &Obj<'_>,
    key: &str,
    t: &toml::Table,
    want: Option<ValueType>,
) -> Result<FixedValues, InputError> {
    let path = o.key_path(key);
    let g = Obj::new(o.ctx, path.clone(), t, &["range", "arange", "repeat"])?;
    let ints = |k: &str, lo: usize, hi: usize| -> Result<Vec<i64>, InputError> {
        let bad = || {
            g.err(
                k,
                format!("allowed: a list of {lo} to {hi} integers, each in -{MAX_ARG}..={MAX_ARG}"),
            )
        };
        let Some(toml::Value::Array(a)) = g.table.get(k) else {
            return Err(bad());
        };
        if a.len() < lo || a.len() > hi {
            return Err(bad());
        }
        a.iter()
            .map(|v| match v {
                toml::Value::Integer(n) if n.abs() <= MAX_ARG => Ok(*n),
                _ => Err(bad()),
            })
            .collect()
    };
    let (start, end, step, inclusive, ty) = match (g.has("range"), g.has("arange")) {
        (true, false) => {
            let a = ints("range", 2, 3)?;
            (a[0], a[1], a.get(2).copied().unwrap_or(1), true, ValueType::F32)
        }
        (false, true) => {
            let a = ints("arange", 1, 3)?;
            match a.len() {
                1 => (0, a[0], 1, false, ValueType::I64),
                _ => (a[0], a[1], a.get(2).copied().unwrap_or(1), false, ValueType::I64),
            }
        }
        _ => {
            return Err(o.err(
                key,
                "allowed: exactly one of range = [start, end(, step)] (torch.range) and arange = [(start, )end(, step)] (torch.arange)",
            ))
        }
    };
    let which = if inclusive { "range" } else { "arange" };
    if step == 0 || (end - start).signum() * step.signum() < 0 {
        return Err(g.err(
            which,
            format!("step {step} does not go from {start} towards {end}; allowed: a non-zero step of the sign of end - start"),
        ));
    }
    let span = (end - start) / step;
    let n = if inclusive {
        span + 1
    } else {
        // ceil((end - start) / step) for a step of either sign
        span + i64::from((end - start) % step != 0)
    };
    if n < 1 {
        return Err(g.err(which, "the sequence is empty; allowed: at least one value"));
    }
    let base: Vec<i64> = (0..n).map(|i| start + i * step).collect();
    let reps = if g.has("repeat") {
        ints("repeat", 1, 4)?
    } else {
        vec![1]
    };
    if reps.iter().any(|&r| r < 1) {
        return Err(g.err("repeat", "allowed: counts >= 1"));
    }
    let total = reps
        .iter()
        .try_fold(base.len(), |acc, &r| acc.checked_mul(r as usize))
        .filter(|&t| t <= MAX_VALUES);
    let Some(total) = total else {
        return Err(g.err(
            "repeat",
            format!("allowed: at most {MAX_VALUES} values in all"),
        ));
    };
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        out.extend_from_slice(&base);
    }
    Ok(match want.unwrap_or(ty) {
        ValueType::F32 => FixedValues::F32(out.iter().map(|&v| v as f32).collect()),
        ValueType::I64 => FixedValues::I64(out),
    })
}
