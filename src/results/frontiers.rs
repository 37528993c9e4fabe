//! `frontiers.bin`: per seed and check, the tolerance frontier in the comparison the test
//! asserts ([`crate::stats::frontier`]): the few (|actual − expected|, |expected|) points that
//! can be a check's worst element under some (atol, rtol). `size DIR` evaluates any
//! candidate tolerance from it, bit for bit as the sweep would, without re-running.
//!
//! Format (all integers and floats little-endian):
//!
//! ```text
//! header   8 bytes  b"SSFRNT01"
//! record   u32 group    index of the group in plan.csv (groups in file order)
//!          u64 seed
//!          u32 checks   the group's number of checks (plan.csv order)
//!          per check: u32 m, then m × (f64 d, f64 e), sorted by e ascending
//! ```
//!
//! Records come in the sweep's unit order (group-major, seeds ascending), exactly as the
//! units of `seeds.csv`: one per unit of a clean group (a mutant group has no frontiers). A
//! record is 16 + Σ(4 + 16·m) bytes; m is typically 1 to 5.

use std::io::{BufWriter, Read, Write};
use std::path::Path;

use anyhow::Context;

use crate::engine::plan::GroupMeta;

/// File name in a sweep directory.
pub const FILE: &str = "frontiers.bin";
/// Name while a sweep is running.
pub const PARTIAL: &str = "frontiers.bin.partial";
/// First bytes of the file.
pub const MAGIC: &[u8; 8] = b"SSFRNT01";

/// One seed's frontiers, `[check]` of (d, e) points.
pub use crate::engine::evaluate::SeedFrontiers;

/// Appends records.
pub struct FrontierWriter {
    w: BufWriter<std::fs::File>,
}

impl FrontierWriter {
    /// Creates `path` with the header, or (`append`) opens it at its end.
    pub fn open(path: &Path, append: bool) -> anyhow::Result<Self> {
        let f = crate::sys::atomic_write::open_owned(path, append)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let mut w = BufWriter::new(f);
        if !append {
            w.write_all(MAGIC)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(Self { w })
    }

    /// One record.
    pub fn write(&mut self, group: usize, seed: u64, fr: &[Vec<(f64, f64)>]) -> anyhow::Result<()> {
        let mut buf = Vec::with_capacity(16 + fr.iter().map(|c| 4 + 16 * c.len()).sum::<usize>());
        record(group, seed, fr, &mut buf);
        self.write_record(&buf)
    }

    /// One record as [`record`] formatted it.
    pub fn write_record(&mut self, rec: &[u8]) -> anyhow::Result<()> {
        self.w.write_all(rec).context("cannot write frontiers")
    }

    /// Flushes to the file.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.w.flush().context("cannot flush frontiers")
    }
}

/// Appends one record (`fr`: `[check]` of (d, e) points) to `buf`: the bytes
/// [`FrontierWriter::write`] writes; a sweep's workers format them.
pub fn record(group: usize, seed: u64, fr: &[Vec<(f64, f64)>], buf: &mut Vec<u8>) {
    buf.extend_from_slice(&(group as u32).to_le_bytes());
    buf.extend_from_slice(&seed.to_le_bytes());
    buf.extend_from_slice(&(fr.len() as u32).to_le_bytes());
    for c in fr {
        buf.extend_from_slice(&(c.len() as u32).to_le_bytes());
        for &(d, e) in c {
            buf.extend_from_slice(&d.to_le_bytes());
            buf.extend_from_slice(&e.to_le_bytes());
        }
    }
}

/// A record read back.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontierRecord {
    /// Group index into the plan.
    pub group: usize,
    /// Seed.
    pub seed: u64,
    /// `[check]` frontiers.
    pub frontiers: SeedFrontiers,
    /// Byte offset just after the record.
    pub end: u64,
}

/// Reads every record of `path` against the plan's groups. With `allow_partial`, a
/// truncated last record (an interrupted write) ends the list without error; otherwise it
/// is an error, as is a bad header, a group outside the plan, or a check count that is not
/// the group's.
pub fn read_frontiers(
    path: &Path,
    metas: &[GroupMeta],
    allow_partial: bool,
) -> anyhow::Result<Vec<FrontierRecord>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        anyhow::bail!(
            "{}: not a seedsweep frontiers file (bad header)",
            path.display()
        );
    }
    let mut out = Vec::new();
    let mut pos = MAGIC.len();
    let take = |pos: &mut usize, n: usize| -> Option<&[u8]> {
        let s = bytes.get(*pos..*pos + n)?;
        *pos += n;
        Some(s)
    };
    while pos < bytes.len() {
        let start = pos;
        let rec = (|| -> Option<Result<FrontierRecord, String>> {
            let group = u32::from_le_bytes(take(&mut pos, 4)?.try_into().ok()?) as usize;
            let seed = u64::from_le_bytes(take(&mut pos, 8)?.try_into().ok()?);
            let checks = u32::from_le_bytes(take(&mut pos, 4)?.try_into().ok()?) as usize;
            let Some(m) = metas.get(group) else {
                return Some(Err(format!("record of group {group}, not in plan.csv")));
            };
            if checks != m.checks.len() {
                return Some(Err(format!(
                    "group {group} has {} checks in plan.csv, the record {checks}",
                    m.checks.len()
                )));
            }
            let mut fr = Vec::with_capacity(checks);
            for _ in 0..checks {
                let len = u32::from_le_bytes(take(&mut pos, 4)?.try_into().ok()?) as usize;
                let raw = take(&mut pos, len.checked_mul(16)?)?;
                let pts = raw
                    .chunks_exact(16)
                    .map(|c| {
                        (
                            f64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                            f64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
                        )
                    })
                    .collect();
                fr.push(pts);
            }
            Some(Ok(FrontierRecord {
                group,
                seed,
                frontiers: fr,
                end: pos as u64,
            }))
        })();
        match rec {
            Some(Ok(r)) => out.push(r),
            Some(Err(e)) => anyhow::bail!("{}: byte {start}: {e}", path.display()),
            None if allow_partial => break,
            None => anyhow::bail!(
                "{}: truncated record at byte {start} (an interrupted sweep?)",
                path.display()
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::comparison::Comparison;

    fn meta(checks: usize) -> GroupMeta {
        GroupMeta {
            scenario: "s".into(),
            param: "p".into(),
            profile: "f".into(),
            mutant: String::new(),
            checks: (0..checks).map(|c| format!("c{c}")).collect(),
            policies: vec![],
            tolerances: vec![],
            asserted: Comparison::ALL[0],
            seed_dependent: true,
        }
    }

    #[test]
    fn round_trip_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let metas = vec![meta(2), meta(1)];
        let recs: Vec<(usize, u64, SeedFrontiers)> = vec![
            (0, 5, vec![vec![(1e-7, 2.0), (3e-7, 9.5)], vec![]]),
            (
                0,
                6,
                vec![vec![(f64::INFINITY, 0.0)], vec![(2.5e-9, 0.125)]],
            ),
            (1, 5, vec![vec![(4.0, 1.0)]]),
        ];
        let mut w = FrontierWriter::open(&path, false).unwrap();
        for (g, s, f) in &recs[..2] {
            w.write(*g, *s, f).unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let mut w = FrontierWriter::open(&path, true).unwrap();
        w.write(recs[2].0, recs[2].1, &recs[2].2).unwrap();
        w.flush().unwrap();
        drop(w);
        let back = read_frontiers(&path, &metas, false).unwrap();
        assert_eq!(back.len(), 3);
        for (b, (g, s, f)) in back.iter().zip(&recs) {
            assert_eq!((b.group, b.seed, &b.frontiers), (*g, *s, f));
        }
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(back[2].end, len);
        // Cut the last record in half: partial reading stops before it, strict reading fails.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(back[1].end + 10).unwrap();
        drop(f);
        assert_eq!(read_frontiers(&path, &metas, true).unwrap().len(), 2);
        assert!(read_frontiers(&path, &metas, false).is_err());
        // A check count that is not the plan's names the file.
        let e = read_frontiers(&path, &[meta(3)], true)
            .unwrap_err()
            .to_string();
        assert!(e.contains(FILE) && e.contains("checks"), "{e}");
    }
}
