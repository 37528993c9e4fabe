//! `src/ops/activations.rs` against real PyTorch: the fixtures `tests/data/torch_activations_*.json`,
//! written by `scripts/activations_torch.py` (torch 2.15.0 on the CPU, one thread, eager,
//! glibc 2.36, an AVX-512 machine): `F.gelu` (exact and tanh), `F.silu` and their backward
//! kernels on contiguous tensors of 1 to 100 elements at three scales, 41 special values (±0,
//! subnormals, large |x|, ±inf, NaN) as a tensor, twice over, and each alone. Three
//! configurations: ATen's AVX2 build (`ATEN_CPU_CAPABILITY=avx2`, a scalar remainder after
//! 16 elements) and its AVX512 build (after 32), both with oneDNN on AVX-512; and the AVX2
//! build with oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`: the other exact-gelu forward
//! kernel).
//!
//! Every element is compared bit for bit, NaN with NaN: a NaN's sign and payload come from the
//! order in which the compiler put the operands of an instruction whose two operands are both
//! NaN, in torch's build and in ours (not a numeric difference; the fixtures' NaNs agree in
//! every bit today, the comparison just does not depend on it).

use std::ops::Range;

use seedsweep::kernels::torch_ops::OneDnnIsa;
use seedsweep::ops::activations::{
    gelu, gelu_backward, gelu_tanh, gelu_tanh_backward, silu, silu_backward, TorchLoop, TorchParts,
};
use serde_json::Value;

const FIXTURES: [&str; 3] = [
    "torch_activations_avx2.json",
    "torch_activations_avx512.json",
    "torch_activations_avx2_onednn_avx2.json",
];

const OPS: [&str; 6] = [
    "gelu",
    "gelu_tanh",
    "silu",
    "gelu_bwd",
    "gelu_tanh_bwd",
    "silu_bwd",
];

fn bits(v: &Value, key: &str) -> Vec<f32> {
    let h = v[key].as_str().unwrap_or_else(|| panic!("no {key}"));
    (0..h.len() / 8)
        .map(|i| f32::from_bits(u32::from_str_radix(&h[8 * i..8 * i + 8], 16).unwrap()))
        .collect()
}

/// Bit-identical, or both NaN (see the module doc).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// (meta, tensors) of one fixture.
fn load(name: &str) -> (Value, Vec<Value>) {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}; regenerate with scripts/activations_torch.py"));
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["meta"]["threads"], 1, "{name}");
    assert_eq!(json["meta"]["torch"], "2.15.0+cu132", "{name}");
    (
        json["meta"].clone(),
        json["tensors"].as_array().unwrap().clone(),
    )
}

/// The fixture's ATen block and oneDNN ISA.
fn config(meta: &Value) -> (usize, OneDnnIsa) {
    let block = meta["block"].as_u64().unwrap() as usize;
    let isa = match meta["onednn_isa"].as_u64() {
        Some(512) => OneDnnIsa::Avx512,
        Some(2) => OneDnnIsa::Avx2,
        other => panic!("onednn_isa {other:?}"),
    };
    (block, isa)
}

/// The six ops of `x` (as `[rows, width]` held in `parts`) with gradient `dy`, in [`OPS`]
/// order.
fn run_ops(x: &[f32], dy: &[f32], lp: &TorchLoop<'_>) -> [Vec<f32>; 6] {
    let n = x.len();
    let (mut a, mut b, mut c) = (x.to_vec(), x.to_vec(), x.to_vec());
    gelu(&mut a, lp);
    gelu_tanh(&mut b, lp);
    silu(&mut c, lp);
    let (mut d, mut e, mut f) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    gelu_backward(dy, x, &mut d, lp);
    gelu_tanh_backward(dy, x, &mut e, lp);
    silu_backward(dy, x, &mut f, lp);
    [a, b, c, d, e, f]
}

/// Every element of every tensor of all three fixtures: bit-exact for all six ops, in both
/// of torch's code paths of each (oneDNN or ATen's scalar lambda for the exact gelu; ATen's
/// vectorized lambda or its scalar remainder for the others).
#[test]
fn activations_match_torch_bit_for_bit() {
    for name in FIXTURES {
        let (meta, tensors) = load(name);
        let (block, onednn) = config(&meta);
        let mut compared = [0usize; 6];
        let mut scalar = 0;
        let mut nans = 0;
        for t in &tensors {
            let (x, dy) = (bits(t, "x"), bits(t, "dy"));
            let n = x.len();
            let lp = TorchLoop {
                onednn,
                ..TorchLoop::whole(block, n)
            };
            let got = run_ops(&x, &dy, &lp);
            for (k, op) in OPS.iter().enumerate() {
                let want = bits(t, op);
                assert_eq!(want.len(), n, "{name} {}: {op} length", t["name"]);
                for (i, (&g, &w)) in got[k].iter().zip(&want).enumerate() {
                    assert!(
                        same(g, w),
                        "{name} {} {op}[{i}] (x = {:e}, dy = {:e}): {:#010x}, torch {:#010x}",
                        t["name"],
                        x[i],
                        dy[i],
                        g.to_bits(),
                        w.to_bits()
                    );
                    nans += usize::from(w.is_nan());
                }
                compared[k] += n;
            }
            scalar += n % block;
        }
        // What was compared: all tensors, ATen's scalar remainders among them, and NaNs.
        assert!(compared.iter().all(|&c| c > 900), "{name}: {compared:?}");
        assert!(scalar > 200, "{name}: {scalar} scalar-remainder elements");
        assert!(nans > 0, "{name}: no NaN compared");
    }
}

/// The same tensors laid out as one sharded computation holds them: each torch tensor a block
/// of columns (a column-parallel output: rank r's `[rows, w_r]`) or of rows (sequence
/// parallelism) of one `[rows, width]` buffer. [`TorchParts`] must find every tensor's own
/// remainder (and one-element tensors) inside the buffer, so the result is the fixture's bit
/// for bit.
#[test]
fn sharded_layouts_keep_each_tensors_own_code_paths() {
    let (meta, tensors) = load("torch_activations_avx2.json");
    let (block, onednn) = config(&meta);
    let by_name = |n: &str| -> &Value {
        tensors
            .iter()
            .find(|t| t["name"] == n)
            .unwrap_or_else(|| panic!("no tensor {n}"))
    };
    // (parts, buffer rows, buffer width, [(tensor, its rows, its columns or rows)]).
    type Layout<'a> = (bool, usize, usize, Vec<(&'a str, Range<usize>)>);
    let layouts: Vec<Layout> = vec![
        // Columns of a [1, 10] buffer: tensors of 1, 2 and 7 elements.
        (
            true,
            1,
            10,
            vec![("n1-s2", 0..1), ("n2-s2", 1..3), ("n7-s2", 3..10)],
        ),
        // Columns of a [3, 19] buffer: [3, 5], [3, 3] and [3, 11] tensors (15, 9 and 33
        // elements: one remainder of 15, one of 9, one of 1).
        (
            true,
            3,
            19,
            vec![("n15-s8", 0..5), ("n9-s8", 5..8), ("n33-s8", 8..19)],
        ),
        // Rows of a [7, 8] buffer: [1, 8], [2, 8] and [4, 8] tensors.
        (
            false,
            7,
            8,
            vec![("n8-s0.5", 0..1), ("n16-s0.5", 1..3), ("n32-s0.5", 3..7)],
        ),
    ];
    for (by_cols, rows, width, parts) in layouts {
        let mut x = vec![0.0f32; rows * width];
        let mut dy = vec![0.0f32; rows * width];
        let mut want: [Vec<f32>; 6] = Default::default();
        for w in &mut want {
            w.resize(rows * width, 0.0);
        }
        // Buffer index of element k of a tensor placed at `r`.
        let place = |r: &Range<usize>, k: usize| -> usize {
            if by_cols {
                (k / r.len()) * width + r.start + k % r.len()
            } else {
                r.start * width + k
            }
        };
        for (name, r) in &parts {
            let t = by_name(name);
            let tx = bits(t, "x");
            assert_eq!(
                tx.len(),
                if by_cols { rows } else { width } * r.len(),
                "{name}"
            );
            let tdy = bits(t, "dy");
            for k in 0..tx.len() {
                x[place(r, k)] = tx[k];
                dy[place(r, k)] = tdy[k];
            }
            for (o, op) in OPS.iter().enumerate() {
                for (k, v) in bits(t, op).into_iter().enumerate() {
                    want[o][place(r, k)] = v;
                }
            }
        }
        let ranges: Vec<Range<usize>> = parts.iter().map(|(_, r)| r.clone()).collect();
        let held = if by_cols {
            TorchParts::Columns(ranges)
        } else {
            TorchParts::Rows(ranges)
        };
        let lp = TorchLoop {
            block,
            width,
            parts: &held,
            onednn,
        };
        let got = run_ops(&x, &dy, &lp);
        for (o, op) in OPS.iter().enumerate() {
            for i in 0..rows * width {
                assert!(
                    same(got[o][i], want[o][i]),
                    "{held:?} {op}[{i}]: {:#010x}, torch {:#010x}",
                    got[o][i].to_bits(),
                    want[o][i].to_bits()
                );
            }
        }
        // The same buffer as one whole tensor differs from torch's per-tensor bits somewhere
        // (the check above depends on the layout).
        let whole = TorchLoop {
            onednn,
            ..TorchLoop::whole(block, width)
        };
        let as_one = run_ops(&x, &dy, &whole);
        let differs = (0..6).any(|o| (0..rows * width).any(|i| !same(as_one[o][i], want[o][i])));
        assert!(differs, "{held:?}: the layout made no difference");
    }
}
