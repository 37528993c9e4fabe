//! Planning: a selection's groups × a seed range × a shard → work units (one group at one
//! seed), in output order (group-major, then seed), with what identifies each group and lays
//! out its results ([`GroupMeta`]) and the memory the seed-runs in flight take.
//!
//! Work units are run in chunks of [`CHUNK`] (see [`crate::engine::drive`]): a chunk runs in
//! parallel, its results come back by index and are handed on in unit order, so the output
//! does not depend on the thread count or on scheduling.

use std::ops::Range;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::check::comparison::Comparison;
use crate::check::Tolerance;
use crate::engine::catalog::{Catalog, Group};
use crate::exec::scenario::Parts;

/// Units per parallel chunk: large enough to keep every thread busy, small enough that the
/// chunk's results stay a few megabytes.
pub const CHUNK: usize = 4096;

/// A deterministic slice of the seed range (`--shard i/n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u64,
    /// Number of shards, >= 1.
    pub count: u64,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Which slice of the seeds a `sweep` process was told to run, and by what.
///
/// An existing shard folder's fingerprint outranks it under `--resume` (see
/// `commands::sweep`): a task resubmitted alone cannot always say which shard it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardChoice {
    /// A shard (`None`: the whole range); `from` names the flag or variables that gave it.
    Known {
        /// The slice.
        shard: Option<Shard>,
        /// `--shard 2/8`, `the Slurm array task (SLURM_ARRAY_TASK_ID=3, ...)`, ...
        from: String,
    },
    /// The scheduler's variables cannot say (a one-task array resubmitted alone, an
    /// irregular array): an error unless an existing folder decides.
    Unknown {
        /// The flag or variable to name in the error.
        flag: String,
        /// What is wrong and what to do.
        msg: String,
    },
}

impl ShardChoice {
    /// The whole range, by default.
    pub fn whole() -> Self {
        Self::Known {
            shard: None,
            from: "no --shard (the whole seed range)".into(),
        }
    }
}

/// Seeds to run.
#[derive(Debug, Clone)]
pub struct SeedRange {
    /// First seed; `None` uses each scenario's configured first seed.
    pub first: Option<u64>,
    /// Number of seeds, >= 1.
    pub count: u64,
    /// Only this shard's slice: seeds `first + i·count/n .. first + (i+1)·count/n` (integer
    /// division), and seed-independent scenarios in shard 0 only.
    pub shard: Option<Shard>,
}

/// What identifies a group and lays out its results, independent of the catalog (so shard
/// outputs can be merged without the configs that produced them).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMeta {
    /// Scenario name.
    pub scenario: String,
    /// Parametrization id.
    pub param: String,
    /// Profile spec.
    pub profile: String,
    /// Mutant name, empty for the clean run.
    pub mutant: String,
    /// Check names, in result order.
    pub checks: Vec<String>,
    /// Policy names, in result order.
    pub policies: Vec<String>,
    /// `tolerances[p][c]`.
    pub tolerances: Vec<Vec<Tolerance>>,
    /// The comparison the test asserts.
    pub asserted: Comparison,
    /// Whether the seed changes the scenario.
    pub seed_dependent: bool,
}

impl GroupMeta {
    /// The metadata of a planned group.
    pub fn of(catalog: &Catalog, g: &Group) -> Self {
        let s = &catalog.scenarios[g.scenario];
        Self {
            scenario: s.common().name.clone(),
            param: s.param_ids()[g.param].to_string(),
            profile: g.profile.name.clone(),
            mutant: g.mutant.map(|m| m.name().to_string()).unwrap_or_default(),
            checks: s
                .checks(g.param)
                .iter()
                .map(|c| c.name.to_string())
                .collect(),
            policies: g.policy_names.clone(),
            tolerances: g.tolerances.clone(),
            asserted: s.asserted_comparison(),
            seed_dependent: s.seed_dependent(),
        }
    }

    /// Results per seed: checks × comparisons × policies.
    pub fn entries(&self) -> usize {
        self.checks.len() * Comparison::ALL.len() * self.policies.len()
    }

    /// Index of a result in the layout of [`crate::engine::evaluate`].
    pub fn index(&self, check: usize, comparison: usize, policy: usize) -> usize {
        (check * Comparison::ALL.len() + comparison) * self.policies.len() + policy
    }
}

/// The seeds a group runs in `range` (possibly empty for a shard).
pub fn group_seeds(catalog: &Catalog, g: &Group, range: &SeedRange) -> Range<u64> {
    let s = &catalog.scenarios[g.scenario];
    let first = range.first.unwrap_or(s.common().first_seed);
    let (lo, hi) = if !s.seed_dependent() {
        match range.shard {
            Some(sh) if sh.index != 0 => (0, 0),
            _ => (0, 1),
        }
    } else {
        match range.shard {
            None => (0, range.count),
            Some(sh) => (
                shard_bound(range.count, sh.index, sh.count),
                shard_bound(range.count, sh.index + 1, sh.count),
            ),
        }
    };
    // limits::check_seed_range keeps first + count within u64; saturating, never wrapping,
    // so that an unchecked range could only be cut short, not turned into an empty one.
    first.saturating_add(lo)..first.saturating_add(hi)
}

/// `count·i/n` without overflow.
fn shard_bound(count: u64, i: u64, n: u64) -> u64 {
    ((count as u128 * i as u128) / n as u128) as u64
}

/// The work units of a plan, in output order: group-major, then seed.
pub fn units(catalog: &Catalog, groups: &[Group], range: &SeedRange) -> Vec<(usize, Range<u64>)> {
    groups
        .iter()
        .enumerate()
        .map(|(gi, g)| (gi, group_seeds(catalog, g, range)))
        .collect()
}

/// Groups that share work at each seed: consecutive groups of one scenario whose
/// parametrizations compute the same traces ([`crate::exec::scenario::Scenario::same_computation`])
/// and which run the same seeds under the same tolerances. At one seed the family computes the float64 trace once,
/// the reference once per run of consecutive equal profiles, and the sharded trace once per
/// distinct (profile, mutant); every group reports the results of its run. Groups are
/// ordered (scenario, param, profile, mutant), so equal profiles are consecutive.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The groups, consecutive in output order.
    pub groups: Range<usize>,
    /// Their seeds (the same for every group of the family).
    pub seeds: Range<u64>,
    /// The distinct computations in order: the group that defines each, and what it
    /// recomputes besides the sharded trace (the rest is left by the run before it).
    pub runs: Vec<(usize, Parts)>,
    /// Per group of the family, in order: the index into `runs` of the results it reports.
    pub source: Vec<usize>,
}

/// The families of `plan` (the units of [`units`], in output order). A sweep hands units
/// on in output order (group-major), so the results of a family's seeds are held back until
/// they are done: a family grows only while those results, estimated at `unit_bytes(group)`
/// per unit of each of its groups, stay within `budget` (a group that does not fit starts
/// the next family, sharing nothing with the one before).
pub fn families(
    catalog: &Catalog,
    groups: &[Group],
    plan: &[(usize, Range<u64>)],
    budget: u64,
    unit_bytes: impl Fn(usize) -> u64,
) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    let mut held = 0u64;
    for (gi, seeds) in plan.iter().cloned() {
        let g = &groups[gi];
        let n = seeds.end - seeds.start;
        let cost = n.saturating_mul(unit_bytes(gi));
        let joins = out.last().is_some_and(|f| {
            let first = &groups[f.groups.start];
            f.groups.end == gi
                && !catalog.scenarios[g.scenario].streams(g.param)
                && !catalog.scenarios[first.scenario].streams(first.param)
                && f.seeds == seeds
                && first.scenario == g.scenario
                && first.tolerances == g.tolerances
                && catalog.scenarios[g.scenario].same_computation(first.param, g.param)
                && held.saturating_add(cost) <= budget
        });
        if !joins {
            held = cost;
            out.push(Family {
                groups: gi..gi + 1,
                seeds,
                runs: vec![(gi, Parts::ALL)],
                source: vec![0],
            });
            continue;
        }
        held = held.saturating_add(cost);
        let f = out.last_mut().expect("joins only an existing family");
        f.groups.end = gi + 1;
        let same = f
            .runs
            .iter()
            .position(|&(r, _)| groups[r].profile == g.profile && groups[r].mutant == g.mutant);
        let run = same.unwrap_or_else(|| {
            let (last, _) = *f.runs.last().expect("a family has a run");
            f.runs.push((
                gi,
                Parts {
                    f64: false,
                    reference: groups[last].profile != g.profile,
                },
            ));
            f.runs.len() - 1
        });
        f.source.push(run);
    }
    out
}

/// Runs `work` on every item of `items` on the current rayon pool, [`CHUNK`] items at a time
/// (per-thread state from `init`), and hands each chunk's results, in item order, to `take`,
/// one chunk after another. While `take` handles a chunk on the calling thread, the next
/// chunk is already computed on the pool's other threads ([`in_chunks_of`]), so the serial
/// part (aggregation, writing) does not leave the workers idle. The results, and everything
/// `take` does with them, are the same for any thread count; memory is bounded by two
/// chunks' results. Every parallel loop over seed-runs goes through here.
pub fn in_order<I, S, T>(
    items: impl Iterator<Item = I>,
    init: impl Fn() -> S + Sync + Send,
    work: impl Fn(&mut S, &I) -> T + Sync + Send,
    take: impl FnMut(&[I], Vec<T>) -> anyhow::Result<()>,
) -> anyhow::Result<()>
where
    I: Sync,
    S: Send,
    T: Send,
{
    in_chunks_of(CHUNK, items, init, work, take)
}

/// [`in_order`] with `chunk` items per chunk (>= 1). Chunk k + 1 is computed (spawned on the
/// current pool, [`rayon::in_place_scope`]) while `take` runs on chunk k on the calling
/// thread; `take` still sees the chunks in order, each once, and the first error it returns
/// ends the loop (the chunk computed beside it is dropped).
///
/// A chunk's items are handed to the threads in runs of at most [`leaf_len`] items, so that
/// at the end of a chunk no thread waits long for another to finish a big run (with rayon's
/// adaptive split alone, a run could be a quarter of the chunk: tens of milliseconds of one
/// thread idle per chunk). Each run borrows a state from a pool that lives as long as the
/// loop ([`Lease`]; `init` only when the pool is empty), so short runs do not mean more
/// states: at most one per thread is ever made.
pub fn in_chunks_of<I, S, T>(
    chunk_len: usize,
    items: impl Iterator<Item = I>,
    init: impl Fn() -> S + Sync + Send,
    work: impl Fn(&mut S, &I) -> T + Sync + Send,
    mut take: impl FnMut(&[I], Vec<T>) -> anyhow::Result<()>,
) -> anyhow::Result<()>
where
    I: Sync,
    S: Send,
    T: Send,
{
    let chunk_len = chunk_len.max(1);
    let leaf = leaf_len(chunk_len, rayon::current_num_threads());
    let pool: Mutex<Vec<S>> = Mutex::new(Vec::new());
    let compute = |items: &[I]| -> Vec<T> {
        items
            .par_iter()
            .with_max_len(leaf)
            .map_init(
                || Lease::new(&pool, &init),
                |lease, item| work(lease.state(), item),
            )
            .collect()
    };
    let mut pending = items;
    let mut cur: Vec<I> = pending.by_ref().take(chunk_len).collect();
    if cur.is_empty() {
        return Ok(());
    }
    let mut results: Vec<T> = compute(&cur);
    loop {
        let next: Vec<I> = pending.by_ref().take(chunk_len).collect();
        if next.is_empty() {
            return take(&cur, results);
        }
        let mut next_results: Vec<T> = Vec::new();
        let compute = &compute;
        rayon::in_place_scope(|scope| {
            let (next, next_results) = (&next, &mut next_results);
            scope.spawn(move |_| {
                *next_results = compute(next);
            });
            take(&cur, std::mem::take(&mut results))
        })?;
        cur = next;
        results = next_results;
    }
}

/// Items per run of [`in_chunks_of`]: about 64 runs per thread in a chunk, at least one item.
/// A run of T1 seed-runs is then a few milliseconds, and the rayon job behind each run costs
/// microseconds.
pub fn leaf_len(chunk_len: usize, threads: usize) -> usize {
    (chunk_len / (threads.max(1) * 64)).max(1)
}

/// A state borrowed from [`in_chunks_of`]'s pool for one run of items, given back when the
/// run ends (dropped).
struct Lease<'p, S> {
    pool: &'p Mutex<Vec<S>>,
    state: Option<S>,
}

impl<'p, S> Lease<'p, S> {
    /// A state from the pool, or a new one from `init` when the pool is empty.
    fn new(pool: &'p Mutex<Vec<S>>, init: impl Fn() -> S) -> Self {
        let reused = pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Self {
            pool,
            state: Some(reused.unwrap_or_else(init)),
        }
    }

    fn state(&mut self) -> &mut S {
        self.state
            .as_mut()
            .expect("a lease holds its state until dropped")
    }
}

impl<S> Drop for Lease<'_, S> {
    fn drop(&mut self) {
        if let Some(s) = self.state.take() {
            self.pool.lock().unwrap_or_else(|e| e.into_inner()).push(s);
        }
    }
}

/// The memory of the seed-runs in flight: one per worker thread (at most one per unit), each
/// as large as the largest group's (see [`crate::engine::budget::per_run`]).
pub fn seed_runs_memory(
    catalog: &Catalog,
    groups: &[Group],
    threads: Option<usize>,
    units: u64,
) -> (u64, String) {
    let t = (crate::sys::limits::effective_threads(threads) as u64).min(units.max(1));
    match groups
        .iter()
        .map(|g| crate::engine::budget::per_run(catalog, g))
        .max_by_key(|(b, _)| *b)
    {
        Some((b, what)) => (
            b.saturating_mul(t),
            format!(
                "{t} thread(s) x {} per seed-run: {what}",
                crate::sys::limits::human(b)
            ),
        ),
        None => (0, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a new pool of `threads` threads.
    fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(f)
    }

    #[test]
    fn in_order_hands_on_every_result_in_item_order_for_any_thread_count() {
        // Three chunks, the last one short; the work keeps per-thread state to show that
        // state never leaks into results.
        let n = (2 * CHUNK + 17) as u64;
        let run = |threads: usize| {
            let mut got: Vec<u64> = Vec::new();
            let mut chunks = Vec::new();
            on_threads(threads, || {
                in_order(
                    0..n,
                    || 0u64,
                    |calls, &i| {
                        *calls += 1;
                        i.wrapping_mul(2654435761) % 1009
                    },
                    |items, results| {
                        assert_eq!(items.len(), results.len());
                        chunks.push((items[0], items.len()));
                        got.extend(results);
                        Ok(())
                    },
                )
            })
            .unwrap();
            (got, chunks)
        };
        let want: Vec<u64> = (0..n).map(|i| i.wrapping_mul(2654435761) % 1009).collect();
        let chunks = vec![(0, CHUNK), (CHUNK as u64, CHUNK), (2 * CHUNK as u64, 17)];
        for threads in [1, 3] {
            assert_eq!(
                run(threads),
                (want.clone(), chunks.clone()),
                "{threads} thread(s)"
            );
        }
    }

    /// Runs are short (at most `leaf_len` items each), yet states come from the pool: over
    /// three chunks no more are made than threads run at once (rayon's own `map_init` makes
    /// one per split job, at least one per thread per chunk).
    #[test]
    fn short_runs_share_a_few_states_across_chunks() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let threads = 3;
        let made = AtomicUsize::new(0);
        let leaf = leaf_len(CHUNK, threads);
        assert!(leaf < CHUNK / 8, "runs of {leaf} items are not short");
        let mut served = vec![0usize; 0];
        on_threads(threads, || {
            in_order(
                0..(3 * CHUNK) as u64,
                || made.fetch_add(1, Ordering::SeqCst),
                |id, _| *id,
                |_, results| {
                    served.extend(results);
                    Ok(())
                },
            )
        })
        .unwrap();
        let made = made.load(Ordering::SeqCst);
        assert!(
            (1..=threads).contains(&made),
            "{made} states for {threads} threads"
        );
        assert_eq!(served.len(), 3 * CHUNK);
        assert!(served.iter().all(|&id| id < made));
    }

    #[test]
    fn leaf_len_is_about_64_runs_per_thread_and_never_zero() {
        assert_eq!(leaf_len(4096, 2), 32);
        assert_eq!(leaf_len(4096, 1), 64);
        assert_eq!(leaf_len(10, 8), 1);
        assert_eq!(leaf_len(1, 0), 1);
    }

    #[test]
    fn shards_partition_the_seed_range() {
        for count in [1u64, 7, 40, 1000] {
            for n in 1..=6u64 {
                let mut next = 0;
                for i in 0..n {
                    let lo = shard_bound(count, i, n);
                    let hi = shard_bound(count, i + 1, n);
                    assert_eq!(lo, next, "count {count} n {n} i {i}");
                    assert!(hi >= lo);
                    next = hi;
                }
                assert_eq!(next, count);
            }
        }
    }
}
