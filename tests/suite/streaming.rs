//! Step-by-step evaluation (issue 12): a parametrization whose traces over all steps would be
//! large runs its three computations in lockstep and is evaluated one step at a time
//! (`Scenario::run_stepwise`, `engine::evaluate::StreamedEval`), with memory O(model).
//! Both halves are checked against the all-at-once path, bit for bit:
//! - the executor: the per-step traces of a streamed run, concatenated, are the traces of
//!   `Scenario::run` (T1 at hidden size 2048, which streams);
//! - the fold: feeding the all-at-once traces of every built-in T1 group (clean and every
//!   mutant) to `StreamedEval` one step at a time gives `evaluate` and `unit_frontiers`.

use seedsweep::check::StepLabel;
use seedsweep::engine::catalog::{Catalog, Selection};
use seedsweep::engine::evaluate::{evaluate, unit_frontiers, StreamedEval};
use seedsweep::engine::run::{run_group, run_group_streamed};
use seedsweep::exec::scenario::{Traces, Workspace};
use seedsweep::exec::trace::{SlotRole, Trace, View};

/// T1's file with one parametrization at hidden size `hidden` (the rest unchanged).
fn t1_at_hidden(hidden: usize) -> tempfile::NamedTempFile {
    let text = std::fs::read_to_string("configs/deepspeed_tied_row_parallel.toml").unwrap();
    let (head, rest) = text.split_once("# Parametrizations").unwrap();
    let policies = &rest[rest.find("# The tolerances").unwrap()..];
    let head = head.replace(
        "name = \"deepspeed-tied-row-parallel\"",
        "name = \"t1-wide\"",
    );
    let body = format!(
        "{head}\n[[params]]\nid = \"{hidden}-3-False-0\"\nhidden = {hidden}\nembedding.padding_idx = 3\n\n{policies}"
    );
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, body.as_bytes()).unwrap();
    f
}

/// `t` split by step label, in recording order (each part a trace of its own).
fn by_step(t: &Trace) -> Vec<Trace> {
    let mut parts: Vec<(u32, Trace)> = Vec::new();
    for s in &t.slots {
        if parts.last().is_none_or(|(step, _)| *step != s.step.step) {
            parts.push((s.step.step, Trace::default()));
        }
        let part = &mut parts.last_mut().unwrap().1;
        let start = part.values.len();
        part.values.extend_from_slice(t.data(s));
        let mut slot = *s;
        slot.start = start;
        part.slots.push(slot);
    }
    parts.into_iter().map(|(_, t)| t).collect()
}

/// One slot as the comparisons see it: its metadata (where it is stored, and whether it is
/// lent, aside) and every value's bits (an f32 view's values widened to f64 first).
#[derive(Debug, PartialEq)]
struct SlotPrint {
    check: usize,
    step: StepLabel,
    role: SlotRole,
    len: usize,
    bits: Vec<u64>,
}

/// Every slot of `traces`, in order.
fn fingerprint(traces: &[&Trace]) -> Vec<SlotPrint> {
    traces
        .iter()
        .flat_map(|t| {
            t.slots.iter().map(|s| SlotPrint {
                check: s.check,
                step: s.step,
                role: s.role,
                len: s.len,
                bits: match t.view(s) {
                    View::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
                    View::F32(v) => v.iter().map(|&x| f64::from(x).to_bits()).collect(),
                },
            })
        })
        .collect()
}

/// The fingerprints of one step's three traces (float64, reference, sharded).
fn step_fingerprints(t: &Traces) -> [Vec<SlotPrint>; 3] {
    [
        fingerprint(&[&t.f64]),
        fingerprint(&[&t.reference]),
        fingerprint(&[&t.sharded]),
    ]
}

/// The per-step fingerprints of a streamed run, concatenated per computation, equal the
/// traces of the whole run in `whole` (`what` names the case in a failure).
fn assert_steps_make_the_whole(steps: &[[Vec<SlotPrint>; 3]], whole: &Workspace, what: &str) {
    for (k, t) in [
        &whole.traces.f64,
        &whole.traces.reference,
        &whole.traces.sharded,
    ]
    .into_iter()
    .enumerate()
    {
        let streamed: Vec<&SlotPrint> = steps.iter().flat_map(|s| &s[k]).collect();
        let want = fingerprint(&[t]);
        assert_eq!(streamed.len(), want.len(), "trace {k}, {what}: slot count");
        // The first slot that differs, by its metadata (its values are too many to print).
        if let Some(i) = (0..want.len()).find(|&i| *streamed[i] != want[i]) {
            let (a, b) = (streamed[i], &want[i]);
            let first = a.bits.iter().zip(&b.bits).position(|(x, y)| x != y);
            panic!(
                "trace {k}, {what}: slot {i} differs: streamed (check {}, {:?}, {:?}, len {}) vs whole (check {}, {:?}, {:?}, len {}); first differing value {first:?}",
                a.check, a.step, a.role, a.len, b.check, b.step, b.role, b.len
            );
        }
    }
}

#[test]
fn a_streamed_run_computes_the_traces_of_the_whole_run_step_by_step() {
    let file = t1_at_hidden(2048);
    let catalog = Catalog::load(&[file.path()], None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec!["t1-wide".into()]),
            mutants: Some(vec!["missing-allreduce".into()]),
            ..Default::default()
        })
        .unwrap();
    let s = &catalog.scenarios[groups[0].scenario];
    assert!(s.streams(groups[0].param), "hidden 2048 should stream");
    for g in &groups {
        let mut whole = Workspace::default();
        run_group(&catalog, g, 8199, &mut whole);
        let mut steps: Vec<[Vec<SlotPrint>; 3]> = Vec::new();
        let mut ws = Workspace::default();
        ws.mutant = g.mutant;
        s.run_stepwise(g.param, 8199, &g.profile, &mut ws, &mut |t: &Traces| {
            // Parameters and gradients are lent, not copied (fp32 ones as f32 buffers).
            assert!(t.f64.slots.iter().any(|s| s.lent));
            assert!(!t.reference.all_f64() && !t.sharded.all_f64());
            steps.push(step_fingerprints(t));
        });
        assert_eq!(steps.len(), 3, "one call per training step");
        assert_steps_make_the_whole(&steps, &whole, &format!("mutant {:?}", g.mutant));
        // And the engine's streamed unit folds them into what evaluating the whole gives.
        let mut want = Vec::new();
        evaluate(s.checks(g.param), &g.tolerances, &whole.traces, &mut want);
        let mut pts = Vec::new();
        let want_fr = unit_frontiers(s.as_ref(), g.param, &whole, &mut pts);
        let (got, got_fr) = run_group_streamed(&catalog, g, 8199, &mut ws, true);
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
        assert_eq!(format!("{got_fr:?}"), format!("{want_fr:?}"));
    }
}

/// One workspace streams seed after seed (the same seed twice in a row, then another): the
/// sharded computation takes the drawn parameter buffers instead of copying them and gives
/// them back after its last step, and the two fp32 computations share the buffers of the
/// gradients no check records (T1's projection weight). Every run must still compute what a
/// fresh workspace's whole run computes, so a draw that was not redone, or a recorded (lent)
/// gradient overwritten by the other computation, shows as a difference.
#[test]
fn one_workspace_streams_seed_after_seed_with_shared_buffers() {
    let file = t1_at_hidden(2048);
    let catalog = Catalog::load(&[file.path()], None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec!["t1-wide".into()]),
            ..Default::default()
        })
        .unwrap();
    let g = &groups[0];
    let s = &catalog.scenarios[g.scenario];
    assert!(s.streams(g.param), "hidden 2048 should stream");
    let mut ws = Workspace::default();
    for seed in [8199, 8199, 8200] {
        let mut whole = Workspace::default();
        run_group(&catalog, g, seed, &mut whole);
        let mut steps: Vec<[Vec<SlotPrint>; 3]> = Vec::new();
        s.run_stepwise(g.param, seed, &g.profile, &mut ws, &mut |t: &Traces| {
            steps.push(step_fingerprints(t));
        });
        assert_steps_make_the_whole(&steps, &whole, &format!("seed {seed}"));
    }
}

#[test]
fn folding_the_steps_one_by_one_gives_the_all_at_once_evaluation() {
    let catalog = Catalog::load(&[] as &[&str], None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec!["deepspeed-tied-row-parallel".into()]),
            mutants: Some(vec!["all".into()]),
            ..Default::default()
        })
        .unwrap();
    let mut ws = Workspace::default();
    let mut pts = Vec::new();
    for g in &groups {
        let s = &catalog.scenarios[g.scenario];
        let checks = s.checks(g.param);
        for seed in [8173, 8199, 8202] {
            run_group(&catalog, g, seed, &mut ws);
            let mut want = Vec::new();
            evaluate(checks, &g.tolerances, &ws.traces, &mut want);
            let want_fr = unit_frontiers(s.as_ref(), g.param, &ws, &mut pts);
            let (f, r, sh) = (
                by_step(&ws.traces.f64),
                by_step(&ws.traces.reference),
                by_step(&ws.traces.sharded),
            );
            assert_eq!((f.len(), r.len()), (sh.len(), sh.len()));
            let mut ev = StreamedEval::new(checks, g.tolerances.len(), true);
            for ((f, r), sh) in f.into_iter().zip(r).zip(sh) {
                let t = Traces {
                    f64: f,
                    reference: r,
                    sharded: sh,
                };
                ev.step(checks, &g.tolerances, &t, s.asserted_comparison());
            }
            let (got, got_fr) = ev.finish();
            let id = (s.param_ids()[g.param], g.mutant, seed);
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{id:?}");
            assert_eq!(format!("{got_fr:?}"), format!("{want_fr:?}"), "{id:?}");
        }
    }
}

/// The streamed fold reads big tensors in chunks, all three comparisons per chunk, and a
/// tensor of 2¹⁸ elements or more in two halves at once (the projection weight of a
/// hidden-2048 run: 4,194,304 elements), whose statistics and frontiers are merged. First the
/// run's own traces are folded; then a chunk holding NaN or ±∞ must send that comparison's
/// whole tensor down the non-finite path, as the all-at-once evaluation does: non-finite
/// values are written into the traces (tensors of 137,216 elements and more: 17 chunks and
/// more), in different chunks of different traces and steps. Both times the streamed fold
/// must equal `evaluate` and `unit_frontiers` of the whole run.
#[test]
fn a_non_finite_chunk_is_folded_as_the_whole_tensor_is() {
    let file = t1_at_hidden(2048);
    let catalog = Catalog::load(&[file.path()], None).unwrap();
    let groups = catalog
        .select(&Selection {
            scenarios: Some(vec!["t1-wide".into()]),
            ..Default::default()
        })
        .unwrap();
    let g = &groups[0];
    let s = &catalog.scenarios[g.scenario];
    let mut ws = Workspace::default();
    run_group(&catalog, g, 8199, &mut ws);
    // First as computed: every value finite, the projection weight's 4,194,304 elements
    // folded in two halves on two threads (`StreamedEval`'s split), its frontier merged.
    assert_stepwise_fold_equals_whole(s.as_ref(), g, &ws, false);
    // The largest slot of each trace, so that the values land inside a multi-chunk tensor.
    let big = |t: &Trace, nth: usize| {
        let mut slots: Vec<_> = t.slots.iter().filter(|s| s.len > 100_000).collect();
        slots.sort_by_key(|s| (s.step.step, s.start));
        let s = slots[nth % slots.len()];
        (s.start, s.len)
    };
    let (start, len) = big(&ws.traces.sharded, 0);
    ws.traces.sharded.values[start + 9 * len / 17] = f64::NAN;
    let (start, len) = big(&ws.traces.reference, 1);
    ws.traces.reference.values[start + len - 1] = f64::INFINITY;
    let (start, _) = big(&ws.traces.f64, 2);
    ws.traces.f64.values[start + 3] = f64::NEG_INFINITY;
    assert_stepwise_fold_equals_whole(s.as_ref(), g, &ws, true);
}

/// Folding `ws`'s traces step by step with `StreamedEval` gives `evaluate` and
/// `unit_frontiers` of the whole run, once with every value copied into the traces, once
/// with the fp32 values lent as f32 buffers, as a streamed run records parameters and
/// gradients (`nonfinite`: whether the traces hold injected non-finite mismatches).
fn assert_stepwise_fold_equals_whole(
    s: &dyn seedsweep::exec::scenario::Scenario,
    g: &seedsweep::engine::catalog::Group,
    ws: &Workspace,
    nonfinite: bool,
) {
    let checks = s.checks(g.param);
    let mut want = Vec::new();
    evaluate(checks, &g.tolerances, &ws.traces, &mut want);
    let mut pts = Vec::new();
    let want_fr = unit_frontiers(s, g.param, ws, &mut pts);
    assert_eq!(
        want.iter().any(|r| r.nonfinite > 0),
        nonfinite,
        "non-finite mismatches exactly where injected"
    );
    for lent in [false, true] {
        let (f, r, sh) = (
            by_step(&ws.traces.f64),
            by_step(&ws.traces.reference),
            by_step(&ws.traces.sharded),
        );
        let mut ev = StreamedEval::new(checks, g.tolerances.len(), true);
        let mut buffers = Vec::new();
        for ((f, r), sh) in f.into_iter().zip(r).zip(sh) {
            let t = if lent {
                Traces {
                    f64: f,
                    reference: lent_f32(&r, &mut buffers),
                    sharded: lent_f32(&sh, &mut buffers),
                }
            } else {
                Traces {
                    f64: f,
                    reference: r,
                    sharded: sh,
                }
            };
            assert_eq!(t.reference.all_f64(), !lent);
            ev.step(checks, &g.tolerances, &t, s.asserted_comparison());
        }
        let (got, got_fr) = ev.finish();
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "lent: {lent}");
        assert_eq!(
            format!("{got_fr:?}"),
            format!("{want_fr:?}"),
            "lent: {lent}"
        );
    }
}

/// `t` re-recorded with every value slot lent as an f32 buffer (kept alive in `buffers`,
/// which the caller holds past every use of the trace); the values of an fp32 trace are
/// f32 values, so they narrow exactly.
fn lent_f32(t: &Trace, buffers: &mut Vec<Vec<f32>>) -> Trace {
    let mut out = Trace::default();
    // SAFETY: every lent buffer is moved into `buffers` (its heap block does not move) and
    // never modified; the caller keeps `buffers` alive while it uses the trace.
    unsafe { out.lend(true) };
    for s in &t.slots {
        let v = t.data(s);
        if s.role == SlotRole::Value {
            let b: Vec<f32> = v.iter().map(|&x| x as f32).collect();
            assert!(b.iter().zip(v).all(
                |(&n, &w)| f64::from(n).to_bits() == w.to_bits() || (w.is_nan() && n.is_nan())
            ));
            out.record_lent(s.check, s.step, &b);
            buffers.push(b);
        } else {
            out.record_role(s.check, s.step, s.role, v);
        }
    }
    out
}

/// A file whose test asserts `sharded-vs-f64` runs through the same route as every other
/// file: it streams step by step and its memory estimate is its model's bound, exactly as the
/// same file asserting `sharded-vs-ref` (a wrapper that dropped `streams` and `run_bytes`
/// once made such a file hold every step's traces and be sized from its check tensors).
#[test]
fn a_sharded_vs_f64_file_streams_and_is_memory_bounded() {
    use seedsweep::check::comparison::Comparison;
    let plain = t1_at_hidden(2048);
    let text = std::fs::read_to_string(plain.path()).unwrap();
    let text = text.replace(
        "name = \"t1-wide\"",
        "name = \"t1-wide\"\ncompare = \"sharded-vs-f64\"",
    );
    assert!(text.contains("compare = \"sharded-vs-f64\""));
    let mut f64_file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(&mut f64_file, text.as_bytes()).unwrap();
    let mut estimates = Vec::new();
    for (file, want) in [
        (plain.path(), Comparison::ShardedVsRef),
        (f64_file.path(), Comparison::ShardedVsF64),
    ] {
        let catalog = Catalog::load(&[file], None).unwrap();
        let groups = catalog
            .select(&Selection {
                scenarios: Some(vec!["t1-wide".into()]),
                ..Default::default()
            })
            .unwrap();
        let g = &groups[0];
        let s = &catalog.scenarios[g.scenario];
        assert_eq!(s.asserted_comparison(), want);
        assert!(s.streams(g.param), "{want:?}: hidden 2048 should stream");
        assert!(
            s.run_bytes(g.param, &g.profile, g.mutant).is_some(),
            "{want:?}: the model bounds a seed-run"
        );
        let (bytes, basis) = seedsweep::engine::budget::per_run(&catalog, g);
        assert!(basis.contains("parameters, gradients"), "{basis}");
        estimates.push(bytes);
    }
    assert_eq!(estimates[0], estimates[1]);
}
