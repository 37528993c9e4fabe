//! `src/ops/attention.rs` above ATen's naive `bmm` size against real PyTorch:
//! `tests/data/torch_sdpa_bmm_avx2.json`, written by `scripts/sdpa_bmm_torch.py fixture`
//! (torch 2.15 on the CPU, eager, `ATEN_CPU_CAPABILITY=avx2`, one thread):
//! `F.scaled_dot_product_attention` (math backend) forward and backward on eleven shapes —
//! copied and viewed batch elements (batch 1, one head, several heads), batch elements that
//! start off a 16-byte boundary, MKL's main and narrow kernels, causal and not, two cases
//! split into head groups computed as separate calls (tensor-parallel ranks, one of them
//! uneven), one case below the naive size, and two of one batch element per call. Inputs are SplitMix64 draws
//! (`revealed_orders::draw`, scaled by 1/8), so the file holds torch's outputs only.
//!
//! `tests/data/torch_sdpa_bmm_avx2_t2.json` is the same at `torch.set_num_threads(2)`, with
//! two more cases (products of one batch element, which MKL splits between its threads).
//!
//! float32 is compared bit for bit under [`BmmOrder::Mkl1t`] (one thread) and
//! [`BmmOrder::Mkl2t`] (two). The control: the naive order
//! ([`BmmOrder::Naive`], what the op ran before MKL's order was modelled) must miss some
//! elements above the size, so that the cases can tell the two apart, and match below it.

use crate::common::splitmix::hex32;
use crate::revealed_orders::draw;
use seedsweep::ops::attention::{
    naive_bmm, sdpa_backward, sdpa_forward, AttnBufs, AttnShape, BmmOrder,
};
use serde_json::Value;

fn fixture(threads: usize) -> Value {
    let suffix = if threads == 1 {
        String::new()
    } else {
        format!("_t{threads}")
    };
    let path = format!(
        "{}/tests/data/torch_sdpa_bmm_avx2{suffix}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("regenerate with scripts/sdpa_bmm_torch.py");
    let json: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["threads"], threads);
    assert_eq!(json["cpu_capability"], "AVX2");
    assert!(json["torch"].as_str().unwrap().starts_with("2.15"));
    json
}

/// Per case: (shape, naive size, identical elements, elements) of out, dq, dk, dv together.
fn run(order: BmmOrder, threads: usize) -> Vec<(AttnShape, bool, usize, usize)> {
    let doc = fixture(threads);
    let mut res = Vec::new();
    for c in doc["cases"].as_array().unwrap() {
        let u = |k: &str| c[k].as_u64().unwrap() as usize;
        let sh = AttnShape {
            batch: u("batch"),
            seq: u("seq"),
            heads: u("heads"),
            head_dim: u("head_dim"),
        };
        let seeds: Vec<u64> = c["seeds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_u64().unwrap())
            .collect();
        let [q, k, v, g] = [0, 1, 2, 3].map(|n| {
            draw(seeds[n], sh.numel())
                .into_iter()
                .map(|x| x / 8.0)
                .collect::<Vec<f32>>()
        });
        // The ranks' column ranges of q from their head counts.
        let mut groups = Vec::new();
        let mut c0 = 0;
        for h in c["groups"].as_array().unwrap() {
            let w = h.as_u64().unwrap() as usize * sh.head_dim;
            groups.push(c0..c0 + w);
            c0 += w;
        }
        let scale = 1.0 / (sh.head_dim as f64).sqrt();
        let causal = c["causal"].as_bool().unwrap();
        let mut bf = AttnBufs::default();
        let mut out = vec![0.0f32; sh.numel()];
        sdpa_forward(
            &q, &k, &v, sh, causal, scale, 8, order, &groups, &mut out, &mut bf,
        );
        let (mut dq, mut dk, mut dv) = (out.clone(), out.clone(), out.clone());
        sdpa_backward(
            &g, &v, sh, scale, 8, threads, order, &groups, &mut dq, &mut dk, &mut dv, &mut bf,
        );
        let (mut same, mut total) = (0, 0);
        for (name, got) in [("out", &out), ("dq", &dq), ("dk", &dk), ("dv", &dv)] {
            let want = hex32(c[name].as_str().unwrap());
            assert_eq!(want.len(), got.len());
            same += want
                .iter()
                .zip(got.iter())
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            total += want.len();
        }
        res.push((sh, naive_bmm(sh), same, total));
    }
    res
}

#[test]
fn mkl_order_is_torchs_bit_for_bit() {
    for (order, threads) in [(BmmOrder::Mkl1t, 1), (BmmOrder::Mkl2t, 2)] {
        let res = run(order, threads);
        let bad: Vec<_> = res.iter().filter(|r| r.2 != r.3).collect();
        assert!(
            bad.is_empty(),
            "{threads} thread(s), cases not bit-exact: {bad:?}"
        );
        assert_eq!(res.len(), 11);
    }
}

/// At two threads the one-thread order misses the products of one batch element that MKL
/// splits between the threads (the last two cases), and only those.
#[test]
fn two_threads_split_single_products() {
    let res = run(BmmOrder::Mkl1t, 2);
    for (n, (sh, _, same, total)) in res.iter().enumerate() {
        if n < 9 {
            assert_eq!(
                same, total,
                "{sh:?}: several batch elements, one-thread order"
            );
        } else {
            assert!(same < total, "{sh:?}: the split rows do not show");
        }
    }
}

#[test]
fn naive_order_differs_above_the_size_only() {
    let res = run(BmmOrder::Naive, 1);
    for (sh, naive, same, total) in &res {
        if *naive {
            assert_eq!(
                same, total,
                "{sh:?}: below the size the naive order is torch's"
            );
        }
    }
    let missed: usize = res.iter().filter(|r| !r.1).map(|r| r.3 - r.2).sum();
    assert!(
        missed > 0,
        "the cases above the size do not tell the orders apart"
    );
}
