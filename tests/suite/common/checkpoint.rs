//! Waiting for a sweep process's first checkpoint, to interrupt it mid-sweep.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Waits until the sweep `child` writing into `out` has written its first checkpoint
/// (`.progress`), failing the test if it ends first (give it more seeds) or takes over 60 s.
pub fn wait_for_first_checkpoint(child: &mut Child, out: &Path) {
    let start = Instant::now();
    while !out.join(".progress").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before its first checkpoint; give it more seeds"
        );
        assert!(start.elapsed().as_secs() < 60, "no checkpoint within 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}
