//! The data-parallel executor allocates nothing per seed once its buffers are sized: a
//! counting global allocator around whole seed-runs of `fsdp-zero2-grad-acc` (DP 4).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::scenario::profile::ProfileRegistry;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn later_seeds_allocate_nothing() {
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
