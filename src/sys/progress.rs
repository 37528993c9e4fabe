//! The progress bar of long runs: on stderr, hidden when stderr is not a terminal or when
//! quiet, so that piped or captured output never holds it.
//!
//! One factory for both kinds: [`bar`] counts seed-runs (an integer rate, the elapsed time
//! and the remaining time), and [`phase`] is a ticking line for a step whose length is not
//! known (the summary's tail fits, converting the row log), so the end of a run is never
//! silent.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// Whether a bar would be drawn: stderr is a terminal and the run is not quiet.
pub fn visible(quiet: bool) -> bool {
    use std::io::IsTerminal;
    !quiet && std::io::stderr().is_terminal()
}

/// `{rate}`: seed-runs per second as an integer (indicatif's `{per_sec}` prints four
/// decimals).
fn rate(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let _ = write!(w, "{:.0}/s", state.per_sec());
}

/// A bar over `len` units (`unit`: `seed-runs`, `points`) labelled `what`.
pub fn bar_of(len: u64, quiet: bool, what: &str, unit: &str) -> ProgressBar {
    if !visible(quiet) {
        return ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{prefix}} [{{bar:40}}] {{pos}}/{{len}} {unit}  {{rate}}  {{elapsed}} elapsed, eta {{eta}}"
        ))
        .expect("static template is valid")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| rate(s, w))
        .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

/// A bar over `len` seed-runs labelled `what`.
pub fn bar(len: u64, quiet: bool, what: &str) -> ProgressBar {
    bar_of(len, quiet, what, "seed-runs")
}

/// A ticking line for a step of unknown length: `what: msg  12s`. Change the step with
/// `set_message`; `finish_and_clear` when done.
pub fn phase(quiet: bool, what: &str, msg: &str) -> ProgressBar {
    if !visible(quiet) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{prefix} {spinner} {msg}  {elapsed}")
            .expect("static template is valid"),
    );
    pb.set_prefix(what.to_string());
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
