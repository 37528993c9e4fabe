//! The differential corpus: generated scenario files (`scripts/gen_corpus.py`) run by real
//! PyTorch (`scripts/torch_mirror.py`) and by seedsweep, compared bit for bit.
//!
//! `tests/data/torch_corpus/` holds, for every file `fuzz-NNN.toml`, the fixtures
//! `fuzz-NNN.torch1.json` and `fuzz-NNN.torch2.json`: what every check records in torch 2.15
//! on the CPU (AVX2 kernels, eager) at one and at two threads, for each parametrization and 5
//! seeds, both the unsharded reference and the simulated sharded computation (every rank in
//! one process, collectives in the ring order of `cpu-fma`), as FNV-1a 64 digests, with the
//! u32 bit patterns of the tensors of at most 64 elements at the first seed's first step (the
//! fixture's `encoding` says how it is stored). Here every file is loaded through the
//! same route as `sweep` (`scenario::load`, `exec::build`), every fixture seed is run at the
//! profile of that thread count (`cpu-fma+mkl-threads-1`, `cpu-fma+mkl-threads-2`), and every
//! recorded tensor is compared with the trace slot of the same check and step label.
//!
//! Where a file is not bit-exact, `agreement-torch1.tsv` holds its measured agreement
//! (tensors identical by digest, elements identical by bits); the test asserts the measured
//! counts equal the recorded ones, so a regression and an improvement both fail it until the
//! table is regenerated (`SEEDSWEEP_BLESS_CORPUS=1 cargo test --release --test suite
//! torch_corpus::`), and the diff of the table is the evidence. Why a file is not exact is
//! the conformance table's business (docs/conformance.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use seedsweep::exec::scenario::{Scenario, Workspace};
use seedsweep::exec::trace::SlotRole;
use seedsweep::scenario::profile::ProfileRegistry;
use serde_json::Value;

use super::common::recorded::bless_or_recorded;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/torch_corpus/");

/// What one file's comparison measured.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) tensors: usize,
    pub(crate) tensors_same: usize,
    pub(crate) elements: usize,
    pub(crate) elements_same: usize,
    /// The first differing element, for the failure message.
    pub(crate) first: Option<String>,
    /// Checks of seedsweep's with no tensor in the fixture.
    pub(crate) unmatched: Vec<String>,
    /// Per check: (tensors, identical, elements, identical).
    pub(crate) per_check: BTreeMap<String, [usize; 4]>,
}

impl Counts {
    fn exact(&self) -> bool {
        self.tensors_same == self.tensors && self.elements_same == self.elements
    }
    fn row(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}",
            self.tensors_same, self.tensors, self.elements_same, self.elements
        )
    }
}

use super::common::digest::fnv1a64_words as fnv1a64;

fn hex_words(h: &str) -> Vec<u32> {
    (0..h.len() / 8)
        .map(|i| u32::from_str_radix(&h[8 * i..8 * i + 8], 16).expect("hex"))
        .collect()
}

/// The agreement table of a directory of torch fixtures: for each scenario file in `files`
/// and each thread count T in 1, 2 whose fixture `dir/<stem>.torchT.json` exists, [`measure`]
/// at `cpu-fma+mkl-threads-T`, one row per (file, T) with the identical and total tensor and
/// element counts. Asserts that something was compared and that every check found its
/// tensor; then writes the table to `dir/agreement.tsv` under `SEEDSWEEP_BLESS_CORPUS`, and
/// otherwise asserts it equals the recorded one (so a regression and an improvement both
/// fail, and a fixture gone missing drops its row).
pub(crate) fn assert_agreement(dir: &str, label: &str, files: &[PathBuf]) {
    let mut out = format!(
        "# Files of {label} against torch 2.15 (AVX2, eager), both computations\n\
         # file\tthreads\ttensors identical\ttensors\telements identical\telements\n",
    );
    let mut inexact = Vec::new();
    let mut compared = 0;
    for toml in files {
        let name = toml.file_stem().unwrap().to_string_lossy().to_string();
        for threads in [1, 2] {
            let fixture = Path::new(dir).join(format!("{name}.torch{threads}.json"));
            if !fixture.exists() {
                continue;
            }
            compared += 1;
            let c = measure(toml, &fixture, &format!("cpu-fma+mkl-threads-{threads}"));
            assert!(c.tensors > 0, "{name}: nothing compared");
            assert!(
                c.unmatched.is_empty(),
                "{name}: checks with no tensor in the fixture: {:?}",
                c.unmatched
            );
            writeln!(
                out,
                "{name}\t{threads}\t{}\t{}\t{}\t{}",
                c.tensors_same, c.tensors, c.elements_same, c.elements
            )
            .unwrap();
            if c.tensors_same != c.tensors {
                let checks: Vec<String> = c
                    .per_check
                    .iter()
                    .filter(|(_, v)| v[1] != v[0])
                    .map(|(k, v)| format!("{k} {}/{}", v[1], v[0]))
                    .collect();
                inexact.push(format!("{name} at {threads} thread(s): {checks:?}"));
            }
        }
    }
    assert!(compared > 0, "no fixture found in {dir}");
    let table = Path::new(dir).join("agreement.tsv");
    eprintln!("not bit-exact: {inexact:#?}");
    let Some(recorded) = bless_or_recorded(&table, &out) else {
        return;
    };
    assert_eq!(
        recorded,
        out,
        "measured agreement differs from {} (not exact: {inexact:?})",
        table.display()
    );
}

/// The scenario files of `dir`, sorted by file name.
pub(crate) fn toml_files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    v
}

/// Runs every fixture seed of `toml` at `profile` and compares every fixture tensor of a
/// torch fixture (torch 2.15, AVX2, the profile's thread count).
pub(crate) fn measure(toml: &Path, fixture: &Path, profile: &str) -> Counts {
    let name = toml.file_name().unwrap().to_string_lossy().to_string();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    assert_eq!(json["conditions"]["cpu_capability"], "AVX2", "{name}");
    assert_eq!(json["conditions"]["torch"], "2.15.0+cu132", "{name}");
    let threads = profile
        .rsplit('-')
        .next()
        .and_then(|t| t.parse::<u64>().ok());
    assert_eq!(
        json["conditions"]["threads"].as_u64(),
        threads,
        "{name}: thread count"
    );
    compare(toml, &json, profile)
}

/// Runs every seed of fixture `json` (the format of `scripts/torch_mirror.py`, also written by
/// `scripts/jax_mirror.py`) on `toml` at `profile` and compares every fixture tensor with the
/// trace slot of the same check, step label and role. A fixture without a `sharded` table
/// holds one computation, compared with both of seedsweep's.
pub(crate) fn compare(toml: &Path, json: &Value, profile: &str) -> Counts {
    let text = std::fs::read_to_string(toml).unwrap();
    let name = toml.file_name().unwrap().to_string_lossy().to_string();
    let sf = seedsweep::scenario::load(&name, &text).unwrap_or_else(|e| panic!("{e}"));
    let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{name}: {e}"));
    let profile = ProfileRegistry::builtin()
        .unwrap()
        .resolve(profile, "test")
        .unwrap();
    let mut ws = Workspace::default();
    let mut c = Counts::default();
    // SEEDSWEEP_CORPUS_DEBUG=fuzz-007 lists that file's differing tensors.
    let debug = std::env::var("SEEDSWEEP_CORPUS_DEBUG").is_ok_and(|d| name.starts_with(&d));
    let runs = json["runs"].as_array().expect("runs");
    assert!(!runs.is_empty(), "{name}: no runs");
    for run in runs {
        let pid = run["param"].as_str().unwrap();
        let seed = run["seed"].as_u64().unwrap();
        let param = s
            .param_ids()
            .iter()
            .position(|p| *p == pid)
            .unwrap_or_else(|| panic!("{name}: no parametrization {pid}"));
        s.run(param, seed, &profile, &mut ws);
        let checks = s.checks(param);
        let mut seen = vec![false; checks.len()];
        let keys: Vec<&str> = json["keys"][pid]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no keys of {pid}"))
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        for comp in ["reference", "sharded"] {
            let trace = if comp == "reference" {
                &ws.traces.reference
            } else {
                &ws.traces.sharded
            };
            // A file without tp or dp has one computation in torch: `sharded` is `reference`.
            let stored = if run[comp].is_null() {
                "reference"
            } else {
                comp
            };
            let digests = run[stored].as_str().expect("digests");
            assert_eq!(
                digests.len(),
                16 * keys.len(),
                "{name} {pid} seed {seed}: digests"
            );
            let bits_of = &run[format!("{stored}_bits")];
            for (ki, key) in keys.iter().enumerate() {
                let (check, step) = key.split_once('@').expect("check@label");
                let (check, role) = match check.strip_suffix("_expected") {
                    Some(c) => (c, SlotRole::SelfExpectedF32),
                    None => (check, SlotRole::Value),
                };
                let slot = trace
                    .slots
                    .iter()
                    .find(|sl| {
                        checks[sl.check].name == check
                            && sl.step.to_string() == step
                            && sl.role == role
                    })
                    .unwrap_or_else(|| {
                        panic!("{name} {pid} seed {seed} {comp}: seedsweep records no {key}")
                    });
                seen[slot.check] = true;
                let ours: Vec<u32> = trace
                    .data(slot)
                    .iter()
                    .map(|&v| (v as f32).to_bits())
                    .collect();
                let digest = u64::from_str_radix(&digests[16 * ki..16 * ki + 16], 16).unwrap();
                let same_digest = fnv1a64(&ours) == digest;
                c.tensors += 1;
                c.tensors_same += usize::from(same_digest);
                let pc = c.per_check.entry(check.to_string()).or_default();
                pc[0] += 1;
                pc[1] += usize::from(same_digest);
                let bits = bits_of[*key].as_str().map(hex_words);
                if debug && !same_digest {
                    let same = bits
                        .as_ref()
                        .map(|b| ours.iter().zip(b).filter(|(a, b)| a == b).count());
                    let at: Vec<usize> = bits.as_ref().map_or(Vec::new(), |b| {
                        (0..ours.len().min(b.len()))
                            .filter(|&i| ours[i] != b[i])
                            .take(8)
                            .collect()
                    });
                    eprintln!(
                        "  {pid} seed {seed} {comp:9} {key:30} {same:?}/{} elements identical \
                         (first differing at {at:?})",
                        ours.len()
                    );
                }
                if let Some(bits) = bits {
                    assert_eq!(fnv1a64(&bits), digest, "{name} {key}: digest of its bits");
                    assert_eq!(bits.len(), ours.len(), "{name} {comp} {key}: length");
                    let same = ours.iter().zip(&bits).filter(|(o, w)| o == w).count();
                    let pc = c.per_check.entry(check.to_string()).or_default();
                    pc[2] += ours.len();
                    pc[3] += same;
                    c.elements += ours.len();
                    c.elements_same += same;
                    if same < ours.len() && c.first.is_none() {
                        let i = ours
                            .iter()
                            .zip(&bits)
                            .position(|(o, w)| o != w)
                            .unwrap_or(0);
                        c.first = Some(format!(
                            "{pid} seed {seed} {comp} {key}[{i}]: ours {:e}, fixture {:e}",
                            f32::from_bits(ours[i]),
                            f32::from_bits(bits[i])
                        ));
                    }
                }
            }
        }
        for (i, ck) in checks.iter().enumerate() {
            if !seen[i] && !c.unmatched.iter().any(|u| u == ck.name) {
                c.unmatched.push(ck.name.to_string());
            }
        }
    }
    c
}

/// The corpus files, sorted.
fn corpus() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap_or_else(|e| panic!("{DIR}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// The recorded agreement: file → the row `tensors_same tensors elements_same elements`.
fn recorded(dir: &str, table: &str) -> BTreeMap<String, String> {
    let path = format!("{dir}{table}");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (file, rest) = l.split_once('\t').expect("file<TAB>counts");
            (file.to_string(), rest.to_string())
        })
        .collect()
}

fn check_corpus(threads: u32, profile: &str) {
    let files = corpus();
    assert!(files.len() >= 200, "the corpus has {} files", files.len());
    let rows: Vec<(String, Counts)> = files
        .iter()
        .map(|toml| {
            let stem = toml.file_stem().unwrap().to_string_lossy().to_string();
            let fixture = toml.with_file_name(format!("{stem}.torch{threads}.json"));
            assert!(fixture.exists(), "{}: no fixture", fixture.display());
            (format!("{stem}.toml"), measure(toml, &fixture, profile))
        })
        .collect();
    check_table(
        DIR,
        &format!("agreement-torch{threads}.tsv"),
        &format!(
            "Measured agreement with torch at {threads} thread(s), profile {profile}, of the corpus \
             files that are not bit-exact"
        ),
        &format!("torch corpus at {threads} thread(s), {profile}"),
        &rows,
    );
}

/// Checks measured rows `(file, counts)` against the agreement table `dir/table`: every file
/// that is not bit-exact has its row `tensors_same tensors elements_same elements` recorded,
/// a bit-exact file has none, and the last line is the summary. With `SEEDSWEEP_BLESS_CORPUS`
/// set the table is rewritten instead (its diff is the evidence).
pub(crate) fn check_table(
    dir: &str,
    table: &str,
    title: &str,
    what: &str,
    rows: &[(String, Counts)],
) {
    let want = recorded(dir, table);
    let mut out =
        format!("# {title}:\n# file\ttensors identical\ttensors\telements identical\telements\n");
    let (mut exact, mut measured, mut problems) = (0, 0, Vec::new());
    let mut total = Counts::default();
    for (file, c) in rows {
        total.tensors += c.tensors;
        total.tensors_same += c.tensors_same;
        total.elements += c.elements;
        total.elements_same += c.elements_same;
        if !c.unmatched.is_empty() {
            problems.push(format!(
                "{file}: checks with no tensor in the fixture: {:?}",
                c.unmatched
            ));
        }
        let row = c.row();
        if c.exact() {
            exact += 1;
            if let Some(old) = want.get(file) {
                problems.push(format!(
                    "{file}: now bit-exact (was {old}): remove its line"
                ));
            }
        } else {
            measured += 1;
            writeln!(out, "{file}\t{row}").unwrap();
            match want.get(file) {
                Some(old) if *old == row => {}
                Some(old) => problems.push(format!(
                    "{file}: measured {row}, recorded {old}; first difference {:?}",
                    c.first
                )),
                None => problems.push(format!(
                    "{file}: not bit-exact ({row}) and not recorded; first difference {:?}",
                    c.first
                )),
            }
        }
    }
    let summary = summary_line(exact, rows.len(), &total);
    eprintln!("{what}: {summary} ({measured} measured)");
    writeln!(out, "{summary}").unwrap();
    match recorded_summary(dir, table) {
        Some(old) if old == summary => {}
        old => problems.push(format!(
            "the summary is {summary:?}, recorded {old:?} (regenerate the table)"
        )),
    }
    if bless_or_recorded(format!("{dir}{table}"), &out).is_none() {
        return;
    }
    assert!(total.tensors > 0 && total.elements > 0, "nothing compared");
    assert!(
        problems.is_empty(),
        "{} file(s) disagree with {table}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The table's last line: `# summary: X of N files bit-exact; T of U tensors identical; E of F
/// elements identical` (thousands separated by commas, as the README writes them).
fn summary_line(exact: usize, files: usize, t: &Counts) -> String {
    format!(
        "# summary: {exact} of {files} files bit-exact; {} of {} tensors identical; {} of {} \
         elements identical",
        thousands(t.tensors_same),
        thousands(t.tensors),
        thousands(t.elements_same),
        thousands(t.elements)
    )
}

fn thousands(n: usize) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The summary line recorded in `table`, if any.
fn recorded_summary(dir: &str, table: &str) -> Option<String> {
    std::fs::read_to_string(format!("{dir}{table}"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("# summary: "))
        .map(str::to_string)
}

/// The README's row of the bit-exact table for the corpus states the recorded summaries: its
/// claim is the measurement's, not a number written once by hand.
#[test]
fn readme_states_the_measured_corpus_agreement() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let row = readme
        .lines()
        .find(|l| l.contains("(differential corpus)"))
        .expect("README.md has no differential-corpus row in its bit-exact table");
    let parse = |table: &str| -> Vec<String> {
        let line =
            recorded_summary(DIR, table).unwrap_or_else(|| panic!("{table}: no summary line"));
        let body = line.trim_start_matches("# summary: ");
        body.split("; ").map(str::to_string).collect()
    };
    let (one, two) = (parse("agreement-torch1.tsv"), parse("agreement-torch2.tsv"));
    let files = |v: &[String]| v[0].split(' ').next().unwrap().to_string();
    let total_files = one[0].split(' ').nth(2).unwrap().to_string();
    let tensors = |v: &[String]| v[1].split(' ').next().unwrap().to_string();
    let total_tensors = one[1].split(' ').nth(2).unwrap().to_string();
    assert_eq!(
        total_tensors,
        two[1].split(' ').nth(2).unwrap(),
        "both fixtures hold the same tensors"
    );
    let want = format!(
        "{} of {total_files} files bit-exact at 1 thread, {} at 2; {} of {total_tensors} tensors \
         identical at 1 thread, {} at 2",
        files(&one),
        files(&two),
        tensors(&one),
        tensors(&two)
    );
    assert!(
        row.contains(&want),
        "README.md's corpus row should say {want:?} (the recorded summaries); it says:\n{row}"
    );
}

#[test]
fn generated_corpus_matches_torch_at_one_thread() {
    check_corpus(1, "cpu-fma+mkl-threads-1");
}

/// A diagnostic, not a check: compares one file with its torch fixture and lists every
/// differing tensor. `SEEDSWEEP_MIRROR=path/to/file.toml` (the fixture beside it,
/// `file.torch1.json`, or `.torch2.json` with `SEEDSWEEP_MIRROR_THREADS=2`),
/// `SEEDSWEEP_CORPUS_DEBUG=<file stem>`, then
/// `cargo test --release --test suite torch_corpus::diagnose -- --ignored --nocapture`.
#[test]
#[ignore = "a diagnostic: needs SEEDSWEEP_MIRROR"]
fn diagnose() {
    let file = PathBuf::from(std::env::var("SEEDSWEEP_MIRROR").expect("SEEDSWEEP_MIRROR"));
    let stem = file.file_stem().unwrap().to_string_lossy().to_string();
    let threads = std::env::var("SEEDSWEEP_MIRROR_THREADS").unwrap_or_else(|_| "1".into());
    let fixture = file.with_file_name(format!("{stem}.torch{threads}.json"));
    let c = measure(&file, &fixture, &format!("cpu-fma+mkl-threads-{threads}"));
    eprintln!(
        "{}: {}; first difference {:?}",
        file.display(),
        c.row(),
        c.first
    );
}

#[test]
fn generated_corpus_matches_torch_at_two_threads() {
    check_corpus(2, "cpu-fma+mkl-threads-2");
}
