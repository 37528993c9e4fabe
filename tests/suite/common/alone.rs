//! Running one test alone, in a fresh process of this test binary: for the tests that
//! measure process-wide state (a global allocator's count, the process's resident set, a
//! process-wide counter of the library), which the other tests of the suite, running in
//! parallel in the same process, would disturb.

use std::process::Command;

/// Set, in the rerun, to the name of the test it runs.
const VAR: &str = "SEEDSWEEP_SUITE_ALONE";

/// Whether the caller, the test named `test` (its path in the suite, `module::function`),
/// should run its body here: `true` in the rerun. Otherwise this reruns the suite binary with
/// only `test` (exact name, one test thread), asserts that it ran and passed, and returns
/// `false`, so that the caller returns. Usage, first thing in the test:
/// `if !common::alone::in_own_process("module::function") { return; }`.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var_os(VAR).is_some_and(|v| v == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the path of the test binary");
    let out = Command::new(exe)
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(VAR, test)
        .output()
        .expect("rerunning the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The rerun's own lines (its eprintln!s), shown as the caller's own output would be.
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test}, run alone, failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{test} did not run alone (is it the test's exact path in the suite?):\n{stdout}"
    );
    false
}
