//! The commands, independent of clap: typed options in, text and files out; one file per
//! command. Their seed-runs all go through [`crate::engine`].
//!
//! [`dispatch`] runs an [`Action`]; `crate::cli` builds one from the flags.

use std::path::PathBuf;

use crate::engine::catalog::{Catalog, Selection};
use crate::scenario::config::RngKind;

pub mod bench;
pub mod check;
pub mod explain;
pub mod list;
pub mod merge;
pub mod report;
pub mod repro;
pub mod scale;
pub mod size;
pub mod sweep;

/// Exit code when `--fail-on-exceed` was given and a check exceeded its tolerance.
pub const EXIT_EXCEEDED: i32 = 3;

/// Options shared by the commands that select work.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// Extra scenario configs.
    pub configs: Vec<PathBuf>,
    /// Generator override.
    pub rng: Option<RngKind>,
    /// The selection.
    pub selection: Selection,
    /// `--max-memory`: bytes this run may use (default: the machine's available memory).
    pub max_memory: Option<u64>,
}

/// A command with its typed, validated options: what [`crate::cli`] parses the flags into.
pub enum Action {
    /// A sweep.
    Sweep(sweep::SweepOptions),
    /// A repro.
    Repro(repro::ReproOptions),
    /// A listing.
    List(Common),
    /// A benchmark.
    Bench(bench::BenchOptions),
    /// A merge of shard outputs.
    Merge(merge::MergeOptions),
    /// A scale sweep.
    Scale(scale::ScaleOptions),
    /// A sizing run.
    Size(size::SizeOptions),
    /// A report: the sweep directory, the output file, and `--quiet`.
    Report(PathBuf, PathBuf, bool),
    /// Validate a scenario file and describe its resolved graph (`--strict-exactness`).
    Check(PathBuf, bool),
    /// An explanation query.
    Explain {
        /// Configs and generator.
        common: Common,
        /// The query.
        query: explain::ExplainQuery,
        /// CSV instead of a table.
        csv: bool,
    },
}

/// Loads the catalog of `common` and prints what its configs override to stderr.
pub fn load_catalog(common: &Common) -> anyhow::Result<Catalog> {
    let catalog = Catalog::load(&common.configs, common.rng)?;
    for n in &catalog.notes {
        eprintln!("note: {n}");
    }
    Ok(catalog)
}

/// Runs a parsed command; returns the process exit code.
pub fn dispatch(action: Action) -> anyhow::Result<i32> {
    match action {
        Action::Sweep(o) => sweep::sweep(&o),
        Action::Repro(o) => repro::run(&o),
        Action::Explain { common, query, csv } => explain::run(&common, &query, csv),
        Action::Merge(o) => merge::merge(&o),
        Action::Scale(o) => scale::scale(&o),
        Action::Size(o) => size::size(&o),
        Action::Report(dir, out, quiet) => report::report(&dir, &out, quiet),
        Action::Bench(o) => {
            emit(&bench::bench(&o)?);
            Ok(0)
        }
        Action::List(c) => {
            emit(&list::list(&c)?);
            Ok(0)
        }
        Action::Check(path, strict) => check::check(&path, strict),
    }
}

/// Writes to stdout; a closed pipe (`seedsweep ... | head`) ends output quietly instead of
/// panicking. Files are always written before anything is printed.
pub fn emit(s: &str) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_all(s.as_bytes()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("Error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// [`emit`] with a newline.
pub fn emitln(s: &str) {
    emit(&format!("{s}\n"));
}

/// The human-readable text of a command (its tables): on stdout, unless stdout carries data
/// the user asked for there (`--json -`, `--out -`), then on stderr, so that the data can be
/// piped into a parser untouched.
pub fn emit_text(s: &str, stdout_is_data: bool) {
    if stdout_is_data {
        eprint!("{s}");
    } else {
        emit(s);
    }
}

/// A status line (`wrote ...`, `nothing to resume ...`): on stderr, never on stdout, and not
/// at all with `--quiet`.
pub fn status(quiet: bool, s: &str) {
    if !quiet {
        eprintln!("{s}");
    }
}

/// The CI outputs of `sweep` and `repro` (`--json`, `--junit-xml`, `--markdown`) and their
/// extra gates, validated by [`crate::cli`].
#[derive(Debug, Clone, Default)]
pub struct CiOutputs {
    /// `--json FILE|-`.
    pub json: Option<PathBuf>,
    /// `--junit-xml FILE`.
    pub junit_xml: Option<PathBuf>,
    /// `--markdown FILE`.
    pub markdown: Option<PathBuf>,
    /// `--fail-on-missed-mutant`.
    pub fail_on_missed_mutant: bool,
    /// `--max-flake-rate P`.
    pub max_flake_rate: Option<f64>,
}

impl CiOutputs {
    /// Whether one of the outputs is stdout (`-`), which then carries it alone.
    pub fn stdout_is_data(&self) -> bool {
        [&self.json, &self.junit_xml, &self.markdown]
            .into_iter()
            .flatten()
            .any(|p| is_stdout(p))
    }

    /// The gates, with `--fail-on-exceed`.
    pub fn gates(&self, fail_on_exceed: bool) -> crate::report::verdict::Gates {
        crate::report::verdict::Gates {
            fail_on_exceed,
            fail_on_missed_mutant: self.fail_on_missed_mutant,
            max_flake_rate: self.max_flake_rate,
        }
    }

    /// Writes the outputs asked for (each atomically); returns the files written (not `-`).
    pub fn write(&self, v: &crate::report::verdict::Verdict) -> anyhow::Result<Vec<String>> {
        use crate::report::{json, junit, markdown};
        use crate::sys::atomic_write::write_atomic;
        let mut written = Vec::new();
        for (path, text) in [
            (
                &self.json,
                json::to_json as fn(&crate::report::verdict::Verdict) -> String,
            ),
            (&self.junit_xml, junit::to_junit),
            (&self.markdown, markdown::to_markdown),
        ] {
            if let Some(p) = path {
                write_atomic(p, text(v).as_bytes())?;
                if !is_stdout(p) {
                    written.push(p.display().to_string());
                }
            }
        }
        Ok(written)
    }

    /// Whether any output or gate needs the verdict.
    pub fn wanted(&self) -> bool {
        self.json.is_some()
            || self.junit_xml.is_some()
            || self.markdown.is_some()
            || self.fail_on_missed_mutant
            || self.max_flake_rate.is_some()
    }
}

/// Whether `path` is `-` (stdout).
pub fn is_stdout(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}
