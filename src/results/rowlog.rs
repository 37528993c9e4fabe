//! `seeds.bin.partial`: the per-seed rows of a running `--format parquet` sweep, as a
//! binary log that checkpoints and resumes exactly like `seeds.csv.partial` (cut back to the
//! byte length `.progress` recorded) and costs no float formatting. When the sweep finishes,
//! [`to_parquet`] streams it into `seeds.parquet` and the log is removed.
//!
//! Format (all integers and floats little-endian):
//!
//! ```text
//! header   8 bytes  b"SSROWS02"
//! record   u32 group    index of the group in plan.csv (groups in file order)
//!          u64 seed
//!          u32 n        the group's entries (checks × comparisons × policies)
//!          n × entry    the entry columns of `seeds.csv`, in declaration order
//! ```
//!
//! The entry columns are those [`crate::results::schema::SEED_COLUMNS`] marks as measured
//! per entry ([`Role::Entry`]), each at its fixed width ([`width`]): an `f64` (8 bytes), a
//! `u32` (4 bytes; 0xFFFFFFFF for a micro-step's "none"), an optional `u64` (8 bytes;
//! 0xFFFFFFFFFFFFFFFF for "none"). Today: f64 usage_pct, f64 max_abs_diff, u32 step, u32
//! micro_step, u32 mismatched, u32 elements, u32 nonfinite, f64 max_abs_expected, f64
//! theory_det_pct, f64 theory_prob_pct, u64 routing_flips: 68 bytes, so a T1 unit
//! (24 entries) is 1,648 bytes. The header names the entry layout's version: `SSROWS02`
//! added routing_flips (a `SSROWS01` log, from before, is refused rather than misread).
//!
//! Records come in the sweep's unit order (group-major, seeds ascending), as the units of
//! `seeds.csv`. A sweep keeps its mutant groups' values in a second log of this format
//! ([`MUTANTS_PARTIAL`]): a mutant group writes no per-seed rows, and `--resume` rebuilds
//! its counts from the log.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use anyhow::{anyhow, Context};

use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::parquet::ParquetSeedsWriter;
use crate::results::schema::{Access, Col, Role, RowFamily, SeedRow, SeedRows, SEED_COLUMNS};

/// Name while a sweep is running.
pub const PARTIAL: &str = "seeds.bin.partial";
/// The mutant groups' values while a per-seed sweep is running (removed when it finishes).
pub const MUTANTS_PARTIAL: &str = "mutants.bin.partial";
/// First bytes of the file.
pub const MAGIC: &[u8; 8] = b"SSROWS02";
/// A micro-step's "none".
const NO_MICRO: u32 = u32::MAX;
/// An optional `u64`'s "none" (no routing-flip count reaches it).
const NO_U64: u64 = u64::MAX;

/// The bytes a value of a column takes in the log; `None` for a column it cannot store
/// (strings, optional values other than a micro-step and an optional `u64`).
pub fn width<F: RowFamily + ?Sized>(a: &Access<F>) -> Option<usize> {
    match a {
        Access::F64(..)
        | Access::U64(..)
        | Access::OptU64(..)
        | Access::I64(..)
        | Access::Usize(..) => Some(8),
        Access::U32(..) | Access::OptU32(..) => Some(4),
        _ => None,
    }
}

/// The entry columns of the per-seed table, in order.
fn entry_columns() -> impl Iterator<Item = &'static Col<SeedRows>> {
    SEED_COLUMNS.iter().filter(|c| c.role == Role::Entry)
}

/// Bytes of one entry.
fn entry_len() -> usize {
    entry_columns()
        .map(|c| width(&c.access).expect("every entry column has a row-log width"))
        .sum()
}

/// Appends one entry's columns.
fn put_entry(v: &SeedValues, b: &mut Vec<u8>) {
    let row = SeedRow {
        values: *v,
        ..SeedRow::default()
    };
    for c in entry_columns() {
        match c.access {
            Access::F64(get, _) => b.extend_from_slice(&get(&row).to_le_bytes()),
            Access::U64(get, _) => b.extend_from_slice(&get(&row).to_le_bytes()),
            Access::OptU64(get, _) => {
                b.extend_from_slice(&get(&row).unwrap_or(NO_U64).to_le_bytes())
            }
            Access::I64(get, _) => b.extend_from_slice(&get(&row).to_le_bytes()),
            Access::Usize(get, _) => b.extend_from_slice(&(get(&row) as u64).to_le_bytes()),
            Access::U32(get, _) => b.extend_from_slice(&get(&row).to_le_bytes()),
            Access::OptU32(get, _) => {
                b.extend_from_slice(&get(&row).unwrap_or(NO_MICRO).to_le_bytes())
            }
            _ => unreachable!("entry columns have a row-log width"),
        }
    }
}

/// One entry read back from its bytes (`e`: [`entry_len`] bytes).
fn get_entry(e: &[u8]) -> SeedValues {
    let mut row = SeedRow::default();
    let mut at = 0;
    for c in entry_columns() {
        let w = width(&c.access).expect("every entry column has a row-log width");
        let b = &e[at..at + w];
        at += w;
        let u64_ = || u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let u32_ = || u32::from_le_bytes(b.try_into().expect("4 bytes"));
        match c.access {
            Access::F64(_, set) => set(&mut row, f64::from_bits(u64_())),
            Access::U64(_, set) => set(&mut row, u64_()),
            Access::OptU64(_, set) => set(&mut row, Some(u64_()).filter(|&x| x != NO_U64)),
            Access::I64(_, set) => set(&mut row, u64_() as i64),
            Access::Usize(_, set) => set(&mut row, u64_() as usize),
            Access::U32(_, set) => set(&mut row, u32_()),
            Access::OptU32(_, set) => set(&mut row, Some(u32_()).filter(|&m| m != NO_MICRO)),
            _ => unreachable!("entry columns have a row-log width"),
        }
    }
    row.values
}

/// Appends unit records.
pub struct RowLogWriter {
    w: BufWriter<std::fs::File>,
    buf: Vec<u8>,
    path: std::path::PathBuf,
}

impl RowLogWriter {
    /// Creates `path` with the header, or (`append`) opens it at its end.
    pub fn open(path: &Path, append: bool) -> anyhow::Result<Self> {
        let f = crate::sys::atomic_write::open_owned(path, append)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        if !append {
            w.write_all(MAGIC)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Self {
            w,
            buf: Vec::new(),
            path: path.to_path_buf(),
        })
    }

    /// One unit: `values` in result order.
    pub fn write(&mut self, group: usize, seed: u64, values: &[SeedValues]) -> anyhow::Result<()> {
        let mut b = std::mem::take(&mut self.buf);
        b.clear();
        record(group, seed, values, &mut b);
        let done = self.write_record(&b);
        self.buf = b;
        done
    }

    /// One unit's record as [`record`] formatted it.
    pub fn write_record(&mut self, rec: &[u8]) -> anyhow::Result<()> {
        self.w
            .write_all(rec)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Flushes to the file.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.w
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// Appends one unit's record (`values` in result order) to `b`: the bytes
/// [`RowLogWriter::write`] writes; a sweep's workers format them.
pub fn record(group: usize, seed: u64, values: &[SeedValues], b: &mut Vec<u8>) {
    b.extend_from_slice(&(group as u32).to_le_bytes());
    b.extend_from_slice(&seed.to_le_bytes());
    b.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        put_entry(v, b);
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

/// Reads the log's units in order and calls `unit(group, seed, values, end)` for each,
/// `end` the byte offset after it. With `allow_partial` a torn last record ends the read
/// quietly; otherwise it is an error. Groups must exist in `metas` and hold the group's
/// number of entries.
pub fn for_each_unit(
    path: &Path,
    metas: &[GroupMeta],
    allow_partial: bool,
    mut unit: impl FnMut(usize, u64, &[SeedValues], u64) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .ok()
        .filter(|_| &magic == MAGIC)
        .ok_or_else(|| {
            anyhow!(
                "{}: not a seedsweep row log of this version (no SSROWS02 header)",
                path.display()
            )
        })?;
    let mut pos = 8u64;
    let mut head = [0u8; 16];
    let mut body = Vec::new();
    let mut values = Vec::new();
    let entry = entry_len();
    loop {
        match read_full(&mut r, &mut head)? {
            0 => return Ok(()),
            16 => {}
            _ if allow_partial => return Ok(()),
            _ => return Err(anyhow!("{}: ends inside a record header", path.display())),
        }
        let group = u32_at(&head, 0) as usize;
        let seed = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
        let n = u32_at(&head, 12) as usize;
        let m = metas.get(group).ok_or_else(|| {
            anyhow!(
                "{}: at byte {pos}: group {group} is not in the plan",
                path.display()
            )
        })?;
        if n != m.entries() {
            return Err(anyhow!(
                "{}: at byte {pos}: {n} entries for group {group}; its checks need {}",
                path.display(),
                m.entries()
            ));
        }
        body.resize(n * entry, 0);
        if read_full(&mut r, &mut body)? != body.len() {
            if allow_partial {
                return Ok(());
            }
            return Err(anyhow!(
                "{}: ends inside the record of seed {seed}",
                path.display()
            ));
        }
        values.clear();
        values.extend(body.chunks_exact(entry).map(get_entry));
        pos += (16 + body.len()) as u64;
        unit(group, seed, &values, pos)?;
    }
}

/// Fills `buf` as far as the reader goes; returns the bytes read (short only at the end).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> anyhow::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("cannot read the row log"),
        }
    }
    Ok(got)
}

/// Streams a complete log into the Parquet file `out` (created; the caller renames it into
/// place), one row group in memory at a time.
pub fn to_parquet(log: &Path, metas: &[GroupMeta], out: &Path) -> anyhow::Result<()> {
    let mut w = ParquetSeedsWriter::create(out)?;
    for_each_unit(log, metas, false, |g, seed, values, _| {
        w.write(&metas[g], seed, values)
    })?;
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::comparison::Comparison;
    use crate::check::{StepLabel, Tolerance};
    use crate::results::csv::read_units;

    fn meta(param: &str) -> GroupMeta {
        GroupMeta {
            scenario: "s".into(),
            param: param.into(),
            profile: "cpu-fma".into(),
            mutant: String::new(),
            checks: vec!["logits".into()],
            policies: vec!["old".into(), "torch-default".into()],
            tolerances: vec![
                vec![
                    Tolerance {
                        atol: 1e-6,
                        rtol: 1e-5
                    };
                    1
                ];
                2
            ],
            asserted: Comparison::ShardedVsRef,
            seed_dependent: true,
        }
    }

    fn vals(seed: u64) -> Vec<SeedValues> {
        (0..6)
            .map(|k| SeedValues {
                usage_pct: seed as f64 * 1.5 + k as f64,
                max_abs_diff: f64::from_bits(seed + k),
                worst_step: if k % 2 == 0 {
                    StepLabel::step(k as u32)
                } else {
                    StepLabel::micro(1, k as u32)
                },
                mismatched: k as u32,
                elements: 670,
                nonfinite: 0,
                max_abs_expected: -0.0,
                theory_det_pct: f64::NAN,
                theory_prob_pct: f64::INFINITY,
                // Both spellings: a count (0 included) and "no moe layer".
                routing_flips: (k != 2).then_some(seed * k),
            })
            .collect()
    }

    /// The entry is the 68 bytes the format documents, in its documented order.
    #[test]
    fn an_entry_is_the_documented_bytes() {
        assert_eq!(entry_len(), 68);
        for v in [vals(3)[1], vals(3)[2]] {
            entry_bytes_are_documented(v);
        }
    }

    fn entry_bytes_are_documented(v: SeedValues) {
        let mut b = Vec::new();
        put_entry(&v, &mut b);
        let mut want = Vec::new();
        want.extend_from_slice(&v.usage_pct.to_le_bytes());
        want.extend_from_slice(&v.max_abs_diff.to_le_bytes());
        want.extend_from_slice(&v.worst_step.step.to_le_bytes());
        want.extend_from_slice(&v.worst_step.micro.unwrap_or(NO_MICRO).to_le_bytes());
        want.extend_from_slice(&v.mismatched.to_le_bytes());
        want.extend_from_slice(&v.elements.to_le_bytes());
        want.extend_from_slice(&v.nonfinite.to_le_bytes());
        want.extend_from_slice(&v.max_abs_expected.to_le_bytes());
        want.extend_from_slice(&v.theory_det_pct.to_le_bytes());
        want.extend_from_slice(&v.theory_prob_pct.to_le_bytes());
        want.extend_from_slice(&v.routing_flips.unwrap_or(NO_U64).to_le_bytes());
        assert_eq!(b, want);
    }

    #[test]
    fn units_round_trip_and_convert_to_the_same_parquet_rows() {
        let dir = tempfile::tempdir().unwrap();
        let metas = [meta("a"), meta("b")];
        let log = dir.path().join(PARTIAL);
        let mut w = RowLogWriter::open(&log, false).unwrap();
        let mut want = Vec::new();
        for (g, seeds) in [(0usize, 10u64..20), (1, 5..9)] {
            for s in seeds {
                w.write(g, s, &vals(s)).unwrap();
                want.push((g, s, vals(s)));
            }
        }
        w.flush().unwrap();
        drop(w);
        let mut got = Vec::new();
        for_each_unit(&log, &metas, false, |g, s, v, _| {
            got.push((g, s, v.to_vec()));
            Ok(())
        })
        .unwrap();
        let bits = |v: &[SeedValues]| -> Vec<u64> {
            v.iter()
                .flat_map(|x| {
                    [
                        x.usage_pct.to_bits(),
                        x.max_abs_diff.to_bits(),
                        u64::from(x.worst_step.step),
                        u64::from(x.worst_step.micro.unwrap_or(NO_MICRO)),
                        u64::from(x.mismatched),
                        u64::from(x.elements),
                        u64::from(x.nonfinite),
                        x.max_abs_expected.to_bits(),
                        x.theory_det_pct.to_bits(),
                        x.theory_prob_pct.to_bits(),
                        x.routing_flips.unwrap_or(NO_U64),
                    ]
                })
                .collect()
        };
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert_eq!((a.0, a.1), (b.0, b.1));
            assert_eq!(bits(&a.2), bits(&b.2));
        }
        let pq = dir.path().join("seeds.parquet");
        to_parquet(&log, &metas, &pq).unwrap();
        let units = read_units(&pq, &metas, false).unwrap();
        assert_eq!(units.len(), want.len());
        for (u, (g, s, v)) in units.iter().zip(&want) {
            assert_eq!((u.group, u.seed), (*g, *s));
            assert_eq!(bits(&u.values), bits(v));
        }
    }

    #[test]
    fn a_torn_tail_is_dropped_when_partial_and_an_error_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let metas = [meta("a")];
        let log = dir.path().join(PARTIAL);
        let mut w = RowLogWriter::open(&log, false).unwrap();
        for s in 0..3 {
            w.write(0, s, &vals(s)).unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let len = std::fs::metadata(&log).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(len - 7)
            .unwrap();
        let mut n = 0;
        for_each_unit(&log, &metas, true, |_, _, _, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        let e = for_each_unit(&log, &metas, false, |_, _, _, _| Ok(())).unwrap_err();
        assert!(
            e.to_string().contains("ends inside the record of seed 2"),
            "{e}"
        );
        // A group outside the plan names the byte offset.
        let e = for_each_unit(&log, &[], true, |_, _, _, _| Ok(())).unwrap_err();
        assert!(
            e.to_string()
                .contains("at byte 8: group 0 is not in the plan"),
            "{e}"
        );
        std::fs::write(&log, b"not a log").unwrap();
        let e = for_each_unit(&log, &metas, true, |_, _, _, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("SSROWS02"), "{e}");
        // A log of the layout before routing_flips is refused, not misread.
        std::fs::write(&log, b"SSROWS01").unwrap();
        let e = for_each_unit(&log, &metas, true, |_, _, _, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("SSROWS02"), "{e}");
    }
}
