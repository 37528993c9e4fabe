//! The per-seed file of a sweep folder in its format (`--format csv|parquet`): the names a
//! format uses while running and when finished, the writer a sweep streams into, and how a
//! finished or partial file is read back. CSV is the default; Parquet keeps the same columns
//! in about a tenth of the bytes (see [`crate::results::parquet`]).
//!
//! | format | while running | finished |
//! |---|---|---|
//! | csv | `seeds.csv.partial` (rows) | `seeds.csv` (the partial file renamed) |
//! | parquet | `seeds.bin.partial` ([`crate::results::rowlog`]) | `seeds.parquet` (converted from the log at the end) |

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::csv::{read_units, SeedsWriter, UnitIn};
use crate::results::rowlog::{self, RowLogWriter};

/// The format of the per-seed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeedsFormat {
    /// `seeds.csv`.
    #[default]
    Csv,
    /// `seeds.parquet`.
    Parquet,
}

impl SeedsFormat {
    /// Every format, in `--format` order.
    pub const ALL: [SeedsFormat; 2] = [Self::Csv, Self::Parquet];

    /// The `--format` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Csv => "csv",
            Self::Parquet => "parquet",
        }
    }

    /// Parses a `--format` value.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The finished file's name.
    pub fn file(self) -> &'static str {
        match self {
            Self::Csv => "seeds.csv",
            Self::Parquet => crate::results::parquet::FILE,
        }
    }

    /// The file's name while the sweep runs.
    pub fn partial(self) -> &'static str {
        match self {
            Self::Csv => "seeds.csv.partial",
            Self::Parquet => rowlog::PARTIAL,
        }
    }

    /// `output.mode` in `fingerprint.txt` for a per-seed sweep in this format (`per-seed`
    /// for CSV, as before formats existed).
    pub fn mode(self) -> &'static str {
        match self {
            Self::Csv => "per-seed",
            Self::Parquet => "per-seed-parquet",
        }
    }

    /// The format whose `output.mode` is `mode`.
    pub fn of_mode(mode: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.mode() == mode)
    }

    /// The format of a folder's finished per-seed file, if it holds one.
    pub fn of_folder(dir: &Path) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|f| std::fs::symlink_metadata(dir.join(f.file())).is_ok())
    }
}

/// The writer of a running sweep's per-seed file.
pub enum SeedsOut {
    /// Rows to `seeds.csv.partial`.
    Csv(Box<SeedsWriter>),
    /// Records to `seeds.bin.partial`.
    Log(RowLogWriter),
}

impl SeedsOut {
    /// Opens `partial` of `format` (`append`: continue a resumed one).
    pub fn open(format: SeedsFormat, partial: &Path, append: bool) -> anyhow::Result<Self> {
        Ok(match format {
            SeedsFormat::Csv => Self::Csv(Box::new(SeedsWriter::open(partial, append)?)),
            SeedsFormat::Parquet => Self::Log(RowLogWriter::open(partial, append)?),
        })
    }

    /// One unit's rows.
    pub fn write(
        &mut self,
        meta: &GroupMeta,
        group: usize,
        seed: u64,
        values: &[SeedValues],
    ) -> anyhow::Result<()> {
        match self {
            Self::Csv(w) => w.write(meta, seed, values),
            Self::Log(w) => w.write(group, seed, values),
        }
    }

    /// The format it writes.
    pub fn format(&self) -> SeedsFormat {
        match self {
            Self::Csv(_) => SeedsFormat::Csv,
            Self::Log(_) => SeedsFormat::Parquet,
        }
    }

    /// One unit's rows as [`format_unit`] formatted them for this writer's format.
    pub fn write_formatted(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Self::Csv(w) => w.write_rows(bytes),
            Self::Log(w) => w.write_record(bytes),
        }
    }

    /// Flushes buffered rows to the partial file (a checkpoint follows).
    pub fn flush(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Csv(w) => w.flush(),
            Self::Log(w) => w.flush(),
        }
    }

    /// The last step of a sweep: puts the finished file in place in `out` and returns its
    /// path. CSV: the partial file synced and renamed. Parquet: the log streamed into a
    /// temporary Parquet file, synced, renamed into place, and the log removed (a kill
    /// before the removal leaves a folder `--resume` finishes again, to the same bytes).
    pub fn finish(
        self,
        out: &Path,
        metas: &[GroupMeta],
        partial: &Path,
    ) -> anyhow::Result<PathBuf> {
        match self {
            Self::Csv(mut w) => {
                w.sync()?;
                drop(w);
                let seeds = out.join(SeedsFormat::Csv.file());
                std::fs::rename(partial, &seeds).with_context(|| {
                    format!("cannot move {} to {}", partial.display(), seeds.display())
                })?;
                Ok(seeds)
            }
            Self::Log(mut w) => {
                w.flush()?;
                drop(w);
                let file = out.join(SeedsFormat::Parquet.file());
                let tmp = out.join(format!(
                    ".{}.tmp-{}",
                    SeedsFormat::Parquet.file(),
                    std::process::id()
                ));
                let done = rowlog::to_parquet(partial, metas, &tmp).and_then(|()| {
                    std::fs::rename(&tmp, &file).with_context(|| {
                        format!("cannot move {} to {}", tmp.display(), file.display())
                    })
                });
                if done.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                done?;
                std::fs::remove_file(partial)
                    .with_context(|| format!("cannot remove {}", partial.display()))?;
                Ok(file)
            }
        }
    }
}

/// Appends one unit's rows in `format` to `out` (CSV rows, or a row-log record): the bytes
/// [`SeedsOut::write`] writes. `memo`: the worker's formatted floats (CSV only; see
/// [`crate::results::csv::FloatMemo`]).
pub fn format_unit(
    format: SeedsFormat,
    meta: &GroupMeta,
    group: usize,
    seed: u64,
    values: &[SeedValues],
    out: &mut Vec<u8>,
    memo: &mut crate::results::csv::FloatMemo,
) {
    match format {
        SeedsFormat::Csv => crate::results::csv::seed_rows(meta, seed, values, out, memo),
        SeedsFormat::Parquet => rowlog::record(group, seed, values, out),
    }
}

/// Reads the units of a partial file (`--resume`, after it was cut back to its checkpoint)
/// in file order; `unit(group, seed, values)` for each.
pub fn for_each_partial_unit(
    format: SeedsFormat,
    partial: &Path,
    metas: &[GroupMeta],
    mut unit: impl FnMut(usize, u64, &[SeedValues]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match format {
        SeedsFormat::Csv => {
            for u in read_units(partial, metas, false)? {
                unit(u.group, u.seed, &u.values)?;
            }
            Ok(())
        }
        SeedsFormat::Parquet => {
            rowlog::for_each_unit(partial, metas, false, |g, s, v, _| unit(g, s, v))
        }
    }
}

/// The units of a folder's finished per-seed file (`merge`, `report`), whichever format it
/// is in; `None` when it holds none.
pub fn read_finished(
    dir: &Path,
    metas: &[GroupMeta],
) -> anyhow::Result<Option<(PathBuf, Vec<UnitIn>)>> {
    let Some(format) = SeedsFormat::of_folder(dir) else {
        return Ok(None);
    };
    let path = dir.join(format.file());
    let units = read_units(&path, metas, false)?;
    Ok(Some((path, units)))
}
