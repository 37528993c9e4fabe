//! Megatron's vocab-parallel layers: `_VocabParallelCrossEntropy`
//! (`megatron/core/tensor_parallel/cross_entropy.py`) on logits whose vocabulary (last)
//! dimension is split over the tensor-parallel ranks, and `VocabParallelEmbedding`
//! (`megatron/core/tensor_parallel/layers.py`) on a table whose rows are split.
//!
//! Every rank's work is written out rank by rank on its column slice of the full logits
//! matrix (the executor keeps a vocab-sharded activation in its gathered layout, rank r's
//! block in columns `shards[r]`). The SUM all-reduces go through the backend
//! ([`Backend::all_reduce`], the profile's order); the MAX all-reduce is computed directly,
//! since a maximum is exact in any order.
//!
//! Numerics against torch (f32, [`ActReal`]): `torch.exp` and `torch.log` on CPU tensors are
//! MKL's `vmsExp` / `vmsLn`, which are not correctly rounded; they are modelled by the
//! correctly rounded exp and log ([`ActReal::exp_vml`], [`ActReal::ln_vml`]). Measured here
//! (torch 2.15 CPU, one thread, 2^22 uniform inputs each): MKL's exp agrees bit for bit with
//! the correctly rounded exp on 98.97 % of inputs in [-20, 0] (the range `logits - max`
//! takes), MKL's log on 95.59 % of inputs in [1, 32] (the range of a sum of exps over a
//! vocabulary slice). `tests/suite/builtin_fixtures.rs` reports what that gives end to end.

use std::ops::Range;

use crate::ops::activations::ActReal;
use crate::ops::backend::Backend;
use crate::ops::real::Real;

/// Reusable buffers of [`vocab_parallel_cross_entropy`].
#[derive(Debug, Default)]
pub struct VocabParallelBuffers<R> {
    /// Per token: the all-reduced max.
    max: Vec<R>,
    /// Rank-major per-rank partials (`tp × tokens`): predicted logits, then sums of exps.
    pred_parts: Vec<R>,
    sum_parts: Vec<R>,
    /// Per token: the all-reduced predicted logit and sum of exps, then the loss.
    pred: Vec<R>,
    sum: Vec<R>,
    loss: Vec<R>,
    /// Rank-major embedding partials (`tp × tokens × dim`).
    emb_parts: Vec<R>,
}

impl<R: Real> VocabParallelBuffers<R> {
    /// The per-token losses of the last [`vocab_parallel_cross_entropy`] (one per label,
    /// `ln(sum) - pred`, before the mean).
    pub fn token_losses(&self) -> &[R] {
        &self.loss
    }
}

fn sized<R: Real>(v: &mut Vec<R>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, R::ZERO);
    }
}

/// Megatron's `vocab_parallel_cross_entropy(logits, target)` followed by `loss.mean()`, forward
/// and backward, on `logits` (`tokens × v`, row-major, the gathered view of the vocab-sharded
/// logits) with rank r holding columns `shards[r]`. Returns the mean loss and writes
/// `d(scale · mean)/d logits` into `dlogits` (`tokens × v`). One shard is Megatron at a
/// model-parallel world of one (every collective the identity).
///
/// Order, per token t (every operation rounded to `R`):
/// 1. `max_r = max(logits[t, shards[r]])` per rank, then the MAX all-reduce over ranks (exact);
/// 2. per rank: `z = logits - max` elementwise (in place, Megatron's `logits -= max`);
///    `pred_r = z[t, label]` if the label lies in the rank's slice, else `0.0`;
///    `e = exp(z)` ([`ActReal::exp_vml`], `torch.exp(out=)`); `s_r = e[t, shards[r]].sum()`
///    ([`ActReal::row_sum_k`], ATen's `sum(dim=-1)`);
/// 3. `pred = all_reduce(pred_r)`, `sum = all_reduce(s_r)` (SUM, the backend's order);
/// 4. `loss[t] = ln(sum) - pred` ([`ActReal::ln_vml`]);
///
/// then `mean = row_sum_k(loss) / tokens` (`loss.mean()`: ATen's CPU mean is a sum, then a
/// division by the count). Backward (`_VocabParallelCrossEntropy.backward` with
/// `MeanBackward0`'s `grad_output = scale / tokens`): `d = e / sum` (`softmax`, Megatron's
/// `exp_logits.div_(sum_exp)`); `d = d - 1` at the label's column on the rank that holds it
/// (the other ranks subtract `0.0` at their first column, a no-op on a non-negative softmax,
/// skipped); `d = d · grad_output`.
#[allow(clippy::too_many_arguments)]
pub fn vocab_parallel_cross_entropy<B: Backend>(
    be: &mut B,
    logits: &[B::R],
    labels: &[i64],
    v: usize,
    shards: &[Range<usize>],
    scale: B::R,
    dlogits: &mut [B::R],
    buf: &mut VocabParallelBuffers<B::R>,
) -> B::R
where
    B::R: ActReal,
{
    let tokens = labels.len();
    let tp = shards.len();
    debug_assert_eq!(logits.len(), tokens * v);
    debug_assert_eq!(dlogits.len(), tokens * v);
    sized(&mut buf.max, tokens);
    sized(&mut buf.pred_parts, tp * tokens);
    sized(&mut buf.sum_parts, tp * tokens);
    sized(&mut buf.pred, tokens);
    sized(&mut buf.sum, tokens);
    sized(&mut buf.loss, tokens);
    // 1. Per-rank maxima, MAX all-reduce (exact in any order; NaN propagates).
    for (t, m) in buf.max.iter_mut().enumerate() {
        let row = &logits[t * v..(t + 1) * v];
        let mut best: Option<B::R> = None;
        for cols in shards.iter().filter(|c| !c.is_empty()) {
            let rank_max = row[cols.clone()].iter().copied().fold(None, max_nan);
            best = [best, rank_max].into_iter().flatten().fold(None, max_nan);
        }
        *m = best.unwrap_or(B::R::ZERO);
    }
    // 2. Per rank: shift, predicted logit, exp in place, row sums of its slice.
    for (r, cols) in shards.iter().enumerate() {
        for (t, (&max, &label)) in buf.max.iter().zip(labels).enumerate() {
            let row = t * v;
            let mut pred = B::R::ZERO;
            for j in cols.clone() {
                let z = logits[row + j] - max;
                if label == j as i64 {
                    pred = z;
                }
                dlogits[row + j] = z.exp_vml();
            }
            buf.pred_parts[r * tokens + t] = pred;
            buf.sum_parts[r * tokens + t] = if cols.is_empty() {
                B::R::ZERO
            } else {
                B::R::row_sum_k(&dlogits[row + cols.start..row + cols.end])
            };
        }
    }
    // 3. SUM all-reduces of the predicted logits and of the sums of exps.
    be.all_reduce(&buf.pred_parts, tp, &mut buf.pred);
    be.all_reduce(&buf.sum_parts, tp, &mut buf.sum);
    // 4. Per-token loss and its mean.
    for t in 0..tokens {
        buf.loss[t] = buf.sum[t].ln_vml() - buf.pred[t];
    }
    let count = B::R::from_f64(tokens as f64);
    let mean = B::R::row_sum_k(&buf.loss) / count;
    // Backward.
    let grad = scale / count;
    for t in 0..tokens {
        let row = &mut dlogits[t * v..(t + 1) * v];
        let s = buf.sum[t];
        let label = labels[t];
        for (j, d) in row.iter_mut().enumerate() {
            let mut p = *d / s;
            if label == j as i64 {
                p = p - B::R::ONE;
            }
            *d = p * grad;
        }
    }
    mean
}

/// Megatron's `VocabParallelEmbedding` forward: rank r holds table rows `shards[r]`; it masks
/// the ids outside its range (`input_mask`, the id replaced by its first row), looks up its
/// rows, zeroes the masked tokens' rows (`output_parallel[input_mask, :] = 0.0`), and the
/// ranks' partials are summed by the backend's all-reduce (`reduce_from_tensor_model_parallel_region`),
/// in the profile's order: each element is one looked-up value plus zeros. `table` is
/// `rows × dim`, `out` is `ids.len() × dim`. Its backward is the plain embedding backward
/// ([`crate::ops::layers::embedding_backward`]): every id lies in exactly one rank's range,
/// that rank scatter-adds the token's gradient row into its shard, the others add masked
/// (zeroed) rows.
#[allow(clippy::too_many_arguments)]
pub fn vocab_parallel_embedding<B: Backend>(
    be: &mut B,
    table: &[B::R],
    dim: usize,
    ids: &[i64],
    shards: &[Range<usize>],
    out: &mut [B::R],
    buf: &mut VocabParallelBuffers<B::R>,
) {
    let tokens = ids.len();
    let tp = shards.len();
    let len = tokens * dim;
    sized(&mut buf.emb_parts, tp * len);
    for (r, rows) in shards.iter().enumerate() {
        let part = &mut buf.emb_parts[r * len..(r + 1) * len];
        for (t, &id) in ids.iter().enumerate() {
            let dst = &mut part[t * dim..(t + 1) * dim];
            let id = id as usize;
            if rows.contains(&id) {
                dst.copy_from_slice(&table[id * dim..(id + 1) * dim]);
            } else {
                dst.fill(B::R::ZERO);
            }
        }
    }
    be.all_reduce(&buf.emb_parts, tp, out);
}

/// `torch.maximum` of two optional values: NaN wins, else the larger.
fn max_nan<R: Real>(acc: Option<R>, x: R) -> Option<R> {
    let nan = |y: R| y.partial_cmp(&y).is_none();
    Some(match acc {
        None => x,
        Some(a) if nan(a) => a,
        Some(a) if nan(x) || x > a => x,
        Some(a) => a,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::backend::F64Backend;

    /// Logits of 3 tokens over a vocabulary of 6 in f64, against the textbook softmax
    /// cross-entropy: the sharded and the unsharded computations agree with it to f64
    /// rounding (a few ulp of values of order 1: 1e-14 absolute), and with each other.
    #[test]
    fn matches_the_textbook_loss_sharded_or_not() {
        let v = 6;
        let logits: Vec<f64> = (0..18)
            .map(|i| ((i * 7) % 11) as f64 * 0.37 - 1.5)
            .collect();
        let labels = [4i64, 0, 5];
        let mut want = 0.0;
        let mut want_grad = vec![0.0; 18];
        for (t, &l) in labels.iter().enumerate() {
            let row = &logits[t * v..(t + 1) * v];
            let s: f64 = row.iter().map(|x| x.exp()).sum();
            want += s.ln() - row[l as usize];
            for j in 0..v {
                want_grad[t * v + j] =
                    (row[j].exp() / s - f64::from(u8::from(j as i64 == l))) / 3.0;
            }
        }
        want /= 3.0;
        let mut be = F64Backend::default();
        let mut buf = VocabParallelBuffers::default();
        for shards in [
            std::iter::once(0..6).collect::<Vec<_>>(),
            vec![0..3, 3..6],
            vec![0..2, 2..4, 4..6],
        ] {
            let mut d = vec![0.0; 18];
            let got = vocab_parallel_cross_entropy(
                &mut be, &logits, &labels, v, &shards, 1.0, &mut d, &mut buf,
            );
            assert!((got - want).abs() < 1e-14, "{shards:?}: {got} vs {want}");
            for (a, b) in d.iter().zip(&want_grad) {
                assert!((a - b).abs() < 1e-14, "{shards:?}: {a} vs {b}");
            }
        }
    }

    /// The vocab-parallel lookup equals the plain lookup (each element is one table value
    /// plus zeros, exact in any order) for any split of the rows.
    #[test]
    fn vocab_parallel_embedding_is_the_plain_lookup() {
        let (rows, dim) = (7, 3);
        let table: Vec<f64> = (0..rows * dim).map(|i| i as f64 * 0.25 - 2.0).collect();
        let ids = [6i64, 0, 3, 3, 5];
        let mut want = vec![0.0; ids.len() * dim];
        crate::ops::layers::embedding_lookup(&table, dim, &ids, &mut want);
        let mut be = F64Backend::default();
        let mut buf = VocabParallelBuffers::default();
        for shards in [vec![0..4, 4..7], vec![0..3, 3..5, 5..7]] {
            let mut got = vec![1.0; ids.len() * dim];
            vocab_parallel_embedding(&mut be, &table, dim, &ids, &shards, &mut got, &mut buf);
            assert_eq!(got, want, "{shards:?}");
        }
    }
}
