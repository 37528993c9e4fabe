//! How a dimension is split over ranks: DeepSpeed AutoTP's near-even rule, the one every
//! sharded layer of the language uses.

use std::ops::Range;

/// Shard size of rank `rank` when `total` is split over `tp` ranks, DeepSpeed AutoTP's
/// near-even rule (`deepspeed/module_inject/tp_shard.py::get_shard_size`, no KV heads):
/// with `g = total / grain` grains, rank r gets `(g / tp + (r < g % tp)) · grain`.
/// DeepSpeed's default grain is 1, so 35 over 2 ranks is 18 + 17 and 32 is 16 + 16. When
/// `total` is not a multiple of `grain` the remainder goes to the last rank, so the shards
/// always cover `total` (DeepSpeed leaves that case to its callers).
pub fn shard_size(total: usize, tp: usize, rank: usize, grain: usize) -> usize {
    let grain = grain.max(1);
    let grains = total / grain;
    let mut size = (grains / tp + usize::from(rank < grains % tp)) * grain;
    if rank + 1 == tp {
        size += total - grains * grain;
    }
    size
}

/// The contiguous ranges of the `tp` shards of a dimension of size `total`, rank order.
/// Ranks may be empty when `tp > total`.
pub fn shard_ranges(total: usize, tp: usize, grain: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    (0..tp)
        .map(|r| {
            let len = shard_size(total, tp, r, grain);
            let range = start..start + len;
            start += len;
            range
        })
        .collect()
}

/// The global batch (the leading dimension every input and activation shares) of a graph
/// with `dp > 1`, with the rank's contiguous block of it (by the shard rule).
pub fn dp_rows(
    g: &crate::scenario::ir::ResolvedGraph,
) -> Option<(usize, Vec<std::ops::Range<usize>>)> {
    let batch = *g.inputs.draws.first()?.shape.first()?;
    let ranges = g.parallel.shard_rule.ranges(batch, g.parallel.dp)?;
    ranges
        .iter()
        .all(|r| !r.is_empty())
        .then_some((batch, ranges))
}
