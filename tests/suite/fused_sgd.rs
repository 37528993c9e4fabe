//! The fused optimizer step (a linear weight's plain-SGD step taken panel by panel as its
//! gradient is computed, so that the gradient is never whole: `Plan::fused_sgd`) gives the
//! traces of the step taken after the backward, bit for bit.
//!
//! T1 at hidden = 520 runs twice per seed: as written, where the projection weight's step is
//! fused, and with a `projection.weight.grad` check added, which reads the gradient and so
//! turns the fusion off (`graph::scenario`'s unit test `which_steps_are_fused` checks both
//! flags). Recording a gradient changes no computation, so every slot of the first run must
//! equal the same check's slot of the second, value for value. At hidden = 520 a panel holds
//! 248 rows of the 520-row fp32 gradient and 120 of the float64 one, so the panels include
//! short last ones. Every built-in profile, a revealed-order profile (whose fp32 products
//! are computed whole: the fallback), every mutant, three seeds.

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::exec::trace::Trace;
use seedsweep::exec::GraphScenario;
use seedsweep::scenario::mutant::Mutant;
use seedsweep::scenario::profile::{Profile, ProfileRegistry};

fn scenario(text: &str) -> GraphScenario {
    let sf = seedsweep::scenario::load("t1_h520.toml", text).unwrap();
    seedsweep::exec::build::build(sf).unwrap()
}

fn texts() -> (String, String) {
    let fused = include_str!("../../configs/examples/t1_h8192.toml").replace("8192", "520");
    let unfused = fused.replace(
        "[[checks]]\nname = \"head_weight\"",
        "[[checks]]\nname = \"projection_grad\"\ntensor = \"projection.weight.grad\"\n\
         at = \"step\"\n\n[[checks]]\nname = \"head_weight\"",
    );
    assert_ne!(fused, unfused, "the gradient check was added");
    (fused, unfused)
}

fn profiles() -> Vec<Profile> {
    let reg = ProfileRegistry::builtin().unwrap();
    let mut out: Vec<_> = reg.profiles().cloned().collect();
    out.push(reg.resolve("cpu-fma+mkl-threads-2", "--profile").unwrap());
    out
}

/// Every slot of `a` against the slot of the same check (by name), step and role in `b`,
/// in order, skipping `b`'s slots of `extra`.
fn same_slots(
    a: &Trace,
    an: &[&str],
    b: &Trace,
    bn: &[&str],
    extra: &str,
) -> Result<usize, String> {
    let kept: Vec<_> = b.slots.iter().filter(|s| bn[s.check] != extra).collect();
    if kept.len() != a.slots.len() {
        return Err(format!("{} slots vs {}", a.slots.len(), kept.len()));
    }
    let (mut ba, mut bb) = (Vec::new(), Vec::new());
    let mut values = 0;
    for (sa, sb) in a.slots.iter().zip(kept) {
        if an[sa.check] != bn[sb.check] || sa.step != sb.step || sa.role != sb.role {
            return Err(format!("slot {sa:?} vs {sb:?}"));
        }
        let (va, vb) = (a.view(sa), b.view(sb));
        let (xa, xb) = (va.f64s(0..va.len(), &mut ba), vb.f64s(0..vb.len(), &mut bb));
        if xa.len() != xb.len() {
            return Err(format!(
                "{}: lengths {} vs {}",
                an[sa.check],
                xa.len(),
                xb.len()
            ));
        }
        if let Some(i) = (0..xa.len()).find(|&i| xa[i].to_bits() != xb[i].to_bits()) {
            return Err(format!(
                "{} step {:?} element {i}: {} vs {}",
                an[sa.check], sa.step, xa[i], xb[i]
            ));
        }
        values += xa.len();
    }
    Ok(values)
}

#[test]
fn fused_steps_give_the_unfused_traces() {
    let (ft, ut) = texts();
    let (f, u) = (scenario(&ft), scenario(&ut));
    let fnames: Vec<&str> = f.checks(0).iter().map(|c| c.name).collect();
    let unames: Vec<&str> = u.checks(0).iter().map(|c| c.name).collect();
    assert!(unames.contains(&"projection_grad") && !fnames.contains(&"projection_grad"));
    let mut mutants: Vec<Option<Mutant>> = vec![None];
    mutants.extend(f.mutants().iter().copied().map(Some));
    let (mut wf, mut wu) = (Workspace::default(), Workspace::default());
    let mut compared = 0usize;
    for profile in profiles() {
        for &mutant in &mutants {
            wf.mutant = mutant;
            wu.mutant = mutant;
            for seed in 8173..8176 {
                f.run(0, seed, &profile, &mut wf);
                u.run(0, seed, &profile, &mut wu);
                for (name, a, b) in [
                    ("f64", &wf.traces.f64, &wu.traces.f64),
                    ("reference", &wf.traces.reference, &wu.traces.reference),
                    ("sharded", &wf.traces.sharded, &wu.traces.sharded),
                ] {
                    match same_slots(a, &fnames, b, &unames, "projection_grad") {
                        Ok(n) => compared += n,
                        Err(e) => panic!(
                            "profile {} mutant {:?} seed {seed} {name}: {e}",
                            profile.name,
                            mutant.map(|m| m.name())
                        ),
                    }
                }
            }
        }
    }
    // The projection weight (520 × 520) is among the compared values of every run.
    assert!(compared > 520 * 520 * 3, "compared {compared} values");
}
