//! The progress bar of long runs: on stderr, hidden when stderr is not a terminal or when
//! quiet, so that piped or captured output never holds it.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `len` seed-runs labelled `what`.
pub fn bar(len: u64, quiet: bool, what: &str) -> ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} seed-runs  {per_sec}  eta {eta}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}
