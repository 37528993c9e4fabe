//! What a sweep writes of each unit the engine hands on ([`crate::engine::UnitEncoder`],
//! run on the workers): a clean group's per-seed rows in the sweep's format (CSV rows, or a
//! row-log record for `--format parquet`) and its frontier record; a mutant group's values
//! as a row-log record, for `--resume` only (a mutant group writes no per-seed rows and no
//! frontiers: `mutants.csv` is its output).

use crate::engine::{Unit, UnitBytes, UnitEncoder};
use crate::results::csv::FloatMemo;
use crate::results::seeds_file::{format_unit, SeedsFormat};
use crate::results::{frontiers, rowlog};

/// The encoder of a sweep's units: `.0` of a unit's bytes is its rows (clean group) or
/// values (mutant group), `.1` its frontier record (clean group).
#[derive(Debug, Clone, Copy)]
pub struct SweepEncoder {
    /// The per-seed table's format; `None` (`--summary-only`): no rows, and no mutant values
    /// (nothing to resume from).
    pub rows: Option<SeedsFormat>,
    /// Whether frontier records are written.
    pub frontiers: bool,
}

impl UnitEncoder for SweepEncoder {
    type Scratch = FloatMemo;

    fn encode(&self, u: &Unit<'_>, memo: &mut FloatMemo, out: &mut UnitBytes) {
        if !u.meta.mutant.is_empty() {
            if self.rows.is_some() {
                rowlog::record(u.group, u.seed, u.values, &mut out.0);
            }
            return;
        }
        if let Some(format) = self.rows {
            format_unit(format, u.meta, u.group, u.seed, u.values, &mut out.0, memo);
        }
        if let (true, Some(fr)) = (self.frontiers, u.frontiers) {
            frontiers::record(u.group, u.seed, fr, &mut out.1);
        }
    }
}
