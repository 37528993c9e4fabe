//! The data-parallel executor allocates nothing per seed once its buffers are sized: a
//! counting global allocator around whole seed-runs of `fsdp-zero2-grad-acc` (DP 4).
//!
//! The allocator is the whole suite binary's; it counts only once the test has armed it, and
//! the test runs alone in its own process (`common::alone`), so that no other test's
//! allocations are counted, as when it was a binary of its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::common;

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::scenario::profile::ProfileRegistry;

struct Counting;

/// Whether [`ALLOCS`] counts: set by the test, in its own process.
static ARMED: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

fn count() {
    if ARMED.load(Ordering::Relaxed) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    // The system's own (calloc): the trait's default would write the zeros, making every page
    // of a large zeroed block resident, which `memory_bound` would measure.
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn later_seeds_allocate_nothing() {
    if !common::alone::in_own_process("dp_alloc::later_seeds_allocate_nothing") {
        return;
    }
    ARMED.store(true, Ordering::Relaxed);
    let path = format!(
        "{}/configs/fsdp_zero2_grad_acc.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let sf = seedsweep::scenario::load("fsdp_zero2_grad_acc.toml", &text).unwrap();
    let s = seedsweep::exec::build::build(sf).unwrap();
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    s.run(0, 8173, &profile, &mut ws);
    s.run(0, 8174, &profile, &mut ws);
    let before = ALLOCS.load(Ordering::Relaxed);
    s.run(0, 8175, &profile, &mut ws);
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    eprintln!("allocations in the third seed-run: {n}");
    assert_eq!(n, 0, "a seed-run after the first allocated {n} times");
}

/// The same for two layouts compared (`torchtitan-fsdp-vs-hsdp`: HSDP 2 × 4, whose
/// reduction runs a reduce-scatter per shard group and an all-reduce per replicate group,
/// against FSDP 8 as the reference layout, each in its own buffers).
#[test]
fn two_layouts_allocate_nothing_after_the_first_seeds() {
    if !common::alone::in_own_process(
        "dp_alloc::two_layouts_allocate_nothing_after_the_first_seeds",
    ) {
        return;
    }
    ARMED.store(true, Ordering::Relaxed);
    let path = format!(
        "{}/configs/torchtitan_fsdp_vs_hsdp.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let sf = seedsweep::scenario::load("torchtitan_fsdp_vs_hsdp.toml", &text).unwrap();
    let s = seedsweep::exec::build::build(sf).unwrap();
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve("cpu-fma", "test")
        .unwrap();
    let mut ws = Workspace::default();
    s.run(0, 1, &profile, &mut ws);
    s.run(0, 2, &profile, &mut ws);
    let before = ALLOCS.load(Ordering::Relaxed);
    s.run(0, 3, &profile, &mut ws);
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    eprintln!("allocations in the third seed-run: {n}");
    assert_eq!(n, 0, "a seed-run after the first allocated {n} times");
}
