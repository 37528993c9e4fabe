//! Revealed-order files: what `scripts/reveal_order.py` writes, parsed and validated into the
//! per-element programs of [`crate::kernels::revealed`].
//!
//! A file holds a `[revealed]` table (where it was measured: device, thread count, torch
//! version, CPU capability; optionally `name` and `base`, which make it a profile when it is
//! passed with `--config`) and one `[[matmul]]` table per (role, rows, red, cols): `programs`
//! (program texts), `default` (the program of every element not overridden), `row_programs`
//! (`[row, program]`: every element of that row) and `element_programs`
//! (`[row, col, program]`), applied in that order.
//!
//! Built-in files (`configs/revealed/`): `mkl-threads-1`, `-2`, `-4` and `-8`, measured with
//! torch 2.15 (MKL) at `torch.set_num_threads(N)` on the shapes of the built-in T1/T2 scenarios
//! (`docs/numerics-mkl-threads.md`); `mkl-threads-1` also on the shapes of the newer built-ins
//! (MKL's single-row and narrow-output kernels, which `cpu-fma`'s FMA-chain model does not
//! describe). The `mkl-threads-1` and `mkl-threads-2` modifiers no longer carry their files:
//! they run the order models of every shape at one and two threads
//! ([`crate::kernels::mkl_sgemm`]), which reproduce every program of the files
//! (`tests/suite/mkl_order_model.rs`); the files stay loadable (`matmul_orders =
//! "mkl-threads-1"`, `"mkl-threads-2"`) as that test's data.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::kernels::revealed::{Program, RevealedMatmul, Role};
use crate::scenario::profile::toml_error;
use crate::sys::error::InputError;

/// The built-in revealed files, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "mkl-threads-1",
        include_str!("../../configs/revealed/mkl-threads-1.toml"),
    ),
    (
        "mkl-threads-2",
        include_str!("../../configs/revealed/mkl-threads-2.toml"),
    ),
    (
        "mkl-threads-4",
        include_str!("../../configs/revealed/mkl-threads-4.toml"),
    ),
    (
        "mkl-threads-8",
        include_str!("../../configs/revealed/mkl-threads-8.toml"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaToml {
    device: String,
    threads: u32,
    torch: String,
    cpu_capability: String,
    machine: String,
    name: Option<String>,
    base: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatmulToml {
    role: String,
    rows: usize,
    red: usize,
    cols: usize,
    programs: Vec<String>,
    default: usize,
    #[serde(default)]
    row_programs: Vec<[usize; 2]>,
    #[serde(default)]
    element_programs: Vec<[usize; 3]>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    revealed: MetaToml,
    #[serde(default)]
    matmul: Vec<MatmulToml>,
}

/// Where a revealed file was measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevealedMeta {
    /// `cpu` or `cuda`.
    pub device: String,
    /// `torch.get_num_threads()` during the measurement.
    pub threads: u32,
    /// torch version.
    pub torch: String,
    /// torch's CPU capability (`AVX2`, `AVX512`).
    pub cpu_capability: String,
    /// `platform.processor()`.
    pub machine: String,
    /// Profile name when the file is loaded with `--config`.
    pub name: Option<String>,
    /// The profile whose other parts it takes.
    pub base: Option<String>,
}

/// Every revealed matmul of one file, by (role, rows, red, cols).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevealedOrders {
    /// Where it came from (file path or `built-in <name>`).
    pub source: String,
    /// Measurement conditions.
    pub meta: RevealedMeta,
    matmuls: BTreeMap<(Role, usize, usize, usize), RevealedMatmul>,
}

/// Refuses shapes whose element grid would not fit comfortably (64 Mi elements).
const MAX_ELEMENTS: usize = 1 << 26;

impl RevealedOrders {
    /// Parses and validates a revealed file; errors name the file and the key.
    pub fn parse(file: &str, text: &str) -> Result<Self, InputError> {
        let raw: FileToml = toml::from_str(text).map_err(|e| toml_error(file, e))?;
        let mut matmuls = BTreeMap::new();
        for (n, m) in raw.matmul.iter().enumerate() {
            let key = |k: &str| format!("matmul[{n}].{k}");
            let role = Role::parse(&m.role).ok_or_else(|| {
                InputError::config(
                    file,
                    key("role"),
                    format!(
                        "`{}` is not a role; allowed: forward, forward-bias, grad-input, grad-weight",
                        m.role
                    ),
                )
            })?;
            let cells = m.rows.saturating_mul(m.cols);
            if m.rows == 0 || m.cols == 0 || cells > MAX_ELEMENTS {
                return Err(InputError::config(
                    file,
                    key("rows"),
                    format!(
                        "{} x {} is not allowed; allowed: rows, cols >= 1 and rows * cols <= {MAX_ELEMENTS}",
                        m.rows, m.cols
                    ),
                ));
            }
            if m.programs.is_empty() || m.programs.len() > u16::MAX as usize {
                return Err(InputError::config(
                    file,
                    key("programs"),
                    "must list 1..=65535 programs",
                ));
            }
            let programs = m
                .programs
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    Program::parse(p, m.red).map_err(|e| {
                        InputError::config(file, format!("matmul[{n}].programs[{i}]"), e.0)
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let np = programs.len();
            let prog = |p: usize, k: &str| -> Result<u16, InputError> {
                if p < np {
                    Ok(p as u16)
                } else {
                    Err(InputError::config(
                        file,
                        key(k),
                        format!("program {p} does not exist; allowed: 0..{np}"),
                    ))
                }
            };
            let mut grid = vec![prog(m.default, "default")?; cells];
            for &[i, p] in &m.row_programs {
                let p = prog(p, "row_programs")?;
                if i >= m.rows {
                    return Err(InputError::config(
                        file,
                        key("row_programs"),
                        format!("row {i} is out of range 0..{}", m.rows),
                    ));
                }
                grid[i * m.cols..(i + 1) * m.cols].fill(p);
            }
            for &[i, j, p] in &m.element_programs {
                let p = prog(p, "element_programs")?;
                if i >= m.rows || j >= m.cols {
                    return Err(InputError::config(
                        file,
                        key("element_programs"),
                        format!("element ({i}, {j}) is out of range {} x {}", m.rows, m.cols),
                    ));
                }
                grid[i * m.cols + j] = p;
            }
            let k = (role, m.rows, m.red, m.cols);
            if matmuls.contains_key(&k) {
                return Err(InputError::config(
                    file,
                    key("role"),
                    format!(
                        "{} {} x {} x {} is revealed twice",
                        m.role, m.rows, m.red, m.cols
                    ),
                ));
            }
            matmuls.insert(
                k,
                RevealedMatmul::new(
                    m.rows,
                    m.red,
                    m.cols,
                    programs,
                    grid,
                    role == Role::ForwardBias,
                ),
            );
        }
        let t = raw.revealed;
        Ok(Self {
            source: file.to_string(),
            meta: RevealedMeta {
                device: t.device,
                threads: t.threads,
                torch: t.torch,
                cpu_capability: t.cpu_capability,
                machine: t.machine,
                name: t.name,
                base: t.base,
            },
            matmuls,
        })
    }

    /// A built-in file by name.
    pub fn builtin(name: &str) -> Option<Result<Self, InputError>> {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| Self::parse(&format!("built-in configs/revealed/{n}.toml"), text))
    }

    /// The revealed matmul of `role` with output `rows × cols` over `red`, if measured.
    pub fn get(&self, role: Role, rows: usize, red: usize, cols: usize) -> Option<&RevealedMatmul> {
        self.matmuls.get(&(role, rows, red, cols))
    }

    /// Every (role, rows, red, cols) the file reveals.
    pub fn shapes(&self) -> impl Iterator<Item = (Role, usize, usize, usize)> + '_ {
        self.matmuls.keys().copied()
    }
}

/// Whether a TOML text is a revealed-order file (it has a top-level `revealed` table).
pub fn is_revealed_file(text: &str) -> bool {
    text.parse::<toml::Table>()
        .map(|t| t.get("revealed").is_some_and(|v| v.is_table()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "[revealed]\ndevice = \"cpu\"\nthreads = 2\ntorch = \"2.15.0\"\n\
                        cpu_capability = \"AVX512\"\nmachine = \"x86_64\"\n";

    #[test]
    fn a_small_file_parses_into_its_grid() {
        let text = format!(
            "{HEAD}[[matmul]]\nrole = \"forward\"\nrows = 2\nred = 3\ncols = 2\n\
             programs = [\"[0..3]f\", \"[0..3]r\", \"((0r 2r) 1f)\"]\ndefault = 0\n\
             row_programs = [[1, 1]]\nelement_programs = [[1, 0, 2]]\n"
        );
        let r = RevealedOrders::parse("t.toml", &text).unwrap();
        assert_eq!(r.meta.threads, 2);
        let m = r.get(Role::Forward, 2, 3, 2).unwrap();
        assert_eq!(m.grid, vec![0, 0, 2, 1]);
        assert!(r.get(Role::GradInput, 2, 3, 2).is_none());
        assert!(is_revealed_file(&text));
        assert!(!is_revealed_file("scenario = \"diloco\"\n"));
    }

    #[test]
    fn bad_entries_name_the_file_key_and_what_is_allowed() {
        let entry = |body: &str| format!("{HEAD}[[matmul]]\n{body}\n");
        let ok = "role = \"forward\"\nrows = 2\nred = 3\ncols = 2\nprograms = [\"[0..3]f\"]\ndefault = 0";
        for (from, to, key, what) in [
            (
                "\"forward\"",
                "\"backward\"",
                "matmul[0].role",
                "grad-weight",
            ),
            (
                "[\"[0..3]f\"]",
                "[\"[0..2]f\"]",
                "matmul[0].programs[0]",
                "index 2 of 0..3 is missing",
            ),
            (
                "default = 0",
                "default = 1",
                "matmul[0].default",
                "allowed: 0..1",
            ),
            (
                "default = 0",
                "default = 0\nrow_programs = [[2, 0]]",
                "matmul[0].row_programs",
                "row 2 is out of range",
            ),
            ("rows = 2", "rows = 0", "matmul[0].rows", "rows, cols >= 1"),
            ("cols = 2", "cols = 2\ncolumns = 1", "(document)", "columns"),
        ] {
            assert!(ok.contains(from), "{from}");
            let e = RevealedOrders::parse("r.toml", &entry(&ok.replacen(from, to, 1)))
                .unwrap_err()
                .to_string();
            for part in ["r.toml", key, what] {
                assert!(e.contains(part), "{e} lacks {part}");
            }
        }
        let twice = format!("{}{}", entry(ok), "[[matmul]]\n".to_owned() + ok + "\n");
        let e = RevealedOrders::parse("r.toml", &twice)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("matmul[1].role") && e.contains("revealed twice"),
            "{e}"
        );
    }

    #[test]
    fn the_builtin_files_parse() {
        for (name, _) in BUILTIN {
            let r = RevealedOrders::builtin(name).unwrap().unwrap();
            assert_eq!(r.meta.device, "cpu");
            assert!(r.shapes().count() > 0, "{name}");
        }
        assert!(RevealedOrders::builtin("nope").is_none());
    }
}
