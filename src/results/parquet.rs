//! Parquet export of the per-seed table (`--format parquet`): the columns of `seeds.csv`
//! ([`crate::results::csv::SeedRow`]), in the same order and with the same values, as one
//! Parquet file that pandas, polars and DuckDB read directly.
//!
//! Layout (Apache Parquet format 2, written by the `parquet` crate without Arrow), built
//! from [`crate::results::schema::SEEDS`]:
//! - strings (`scenario`, `param`, `profile`, `check`, `comparison`, `policy`, `mutant`):
//!   `BYTE_ARRAY` annotated `STRING`, dictionary-encoded; `mutant` is `OPTIONAL`, null for
//!   the clean run (empty in `seeds.csv`);
//! - `seed`: `INT64` annotated unsigned 64-bit (the bits of the `u64`);
//! - `step`, `micro_step` (-1: none), `mismatched`, `elements`, `nonfinite`: `INT64`;
//! - the five floats: `DOUBLE`, `BYTE_STREAM_SPLIT`-encoded, no dictionary: the encoding
//!   groups the eight bytes of each double by position, which the compressor then shrinks
//!   (exponents and leading mantissa bytes repeat); a dictionary would not (most values are
//!   distinct);
//! - every column zstd-compressed (level 9); row groups of exactly [`ROW_GROUP_ROWS`] rows
//!   (the last one shorter), so the bytes depend only on the rows, never on how the sweep
//!   chunked or threaded its work.
//!
//! Values are stored exactly: a float reads back with the same bits, so `merge` and `report`
//! reproduce the summary of a Parquet sweep exactly as they do from CSV.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::reader::ColumnReader;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::Type;

use crate::check::comparison::Comparison;
use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::csv::{micro_step, SeedRowIn};
use crate::results::schema::{ColType, SEEDS};

/// The file a Parquet sweep writes its per-seed table to.
pub const FILE: &str = "seeds.parquet";

/// Rows per row group: large enough for the compressor to find the repetition across seeds
/// (about 11x fewer bytes than CSV on T1), small enough to keep the writer's and reader's
/// buffers near 10 MB.
pub const ROW_GROUP_ROWS: usize = 1 << 17;

/// Column kinds in schema order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Str,
    /// A string or null: only `mutant`.
    OptStr,
    Int,
    Float,
}

/// The kind of each column of [`SEEDS`], in order.
const COLUMNS: [(&str, Kind); SEEDS.len()] = {
    let mut out = [("", Kind::Str); SEEDS.len()];
    let mut i = 0;
    while i < SEEDS.len() {
        out[i] = (
            SEEDS[i].0,
            match SEEDS[i].1 {
                ColType::Str => Kind::Str,
                ColType::OptStr => Kind::OptStr,
                ColType::UInt | ColType::Int => Kind::Int,
                ColType::Float => Kind::Float,
                ColType::OptFloat | ColType::Bool => panic!("no such column in seeds"),
            },
        );
        i += 1;
    }
    out
};

/// The Parquet message type of [`SEEDS`].
fn schema_text() -> String {
    let mut s = String::from("message seeds {\n");
    for (name, ty) in SEEDS {
        let t = match ty {
            ColType::Str => "REQUIRED BYTE_ARRAY",
            ColType::OptStr => "OPTIONAL BYTE_ARRAY",
            ColType::UInt | ColType::Int => "REQUIRED INT64",
            ColType::Float => "REQUIRED DOUBLE",
            ColType::OptFloat | ColType::Bool => unreachable!("checked in COLUMNS"),
        };
        let ann = match ty {
            ColType::Str | ColType::OptStr => " (STRING)",
            ColType::UInt => " (INTEGER(64,false))",
            _ => "",
        };
        s.push_str(&format!("  {t} {name}{ann};\n"));
    }
    s.push('}');
    s
}

fn schema() -> Arc<Type> {
    Arc::new(parse_message_type(&schema_text()).expect("the built-in schema parses"))
}

fn properties() -> Arc<WriterProperties> {
    let mut b = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(9).expect("9 is a valid zstd level"),
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by(format!("seedsweep {}", env!("CARGO_PKG_VERSION")));
    for (name, kind) in COLUMNS {
        if kind == Kind::Float {
            b = b
                .set_column_dictionary_enabled(name.into(), false)
                .set_column_encoding(name.into(), Encoding::BYTE_STREAM_SPLIT);
        }
    }
    Arc::new(b.build())
}

/// One row group's columns, buffered. Strings are kept as shared [`ByteArray`]s (a clone is
/// a reference-count increment), so buffering a row allocates nothing once its strings have
/// been seen.
#[derive(Default)]
struct Columns {
    strings: [Vec<ByteArray>; 6],
    ints: [Vec<i64>; 6],
    floats: [Vec<f64>; 5],
    /// `mutant`: its definition levels (1: a value, 0: null) and its non-null values.
    mutant_def: Vec<i16>,
    mutant: Vec<ByteArray>,
}

impl Columns {
    fn len(&self) -> usize {
        self.ints[0].len()
    }
    fn clear(&mut self) {
        self.strings.iter_mut().for_each(Vec::clear);
        self.ints.iter_mut().for_each(Vec::clear);
        self.floats.iter_mut().for_each(Vec::clear);
        self.mutant_def.clear();
        self.mutant.clear();
    }
}

/// The strings of one group, converted once.
struct MetaStrings {
    scenario: ByteArray,
    param: ByteArray,
    profile: ByteArray,
    /// None for the clean run (a null).
    mutant: Option<ByteArray>,
    checks: Vec<ByteArray>,
    policies: Vec<ByteArray>,
}

fn bytes(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

/// Streams per-seed rows into a Parquet file, in the order of `seeds.csv`: group order, then
/// seed order, then check, comparison, policy. [`ParquetSeedsWriter::finish`] writes the
/// footer; a file without it is not a Parquet file, so a killed writer never leaves a file
/// that reads as complete.
pub struct ParquetSeedsWriter {
    writer: SerializedFileWriter<BufWriter<File>>,
    cols: Columns,
    metas: Vec<MetaStrings>,
    comparisons: [ByteArray; 3],
    path: std::path::PathBuf,
}

impl ParquetSeedsWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let file = crate::sys::atomic_write::open_owned(path, false)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            schema(),
            properties(),
        )
        .with_context(|| format!("cannot start the Parquet file {}", path.display()))?;
        Ok(Self {
            writer,
            cols: Columns::default(),
            metas: Vec::new(),
            comparisons: Comparison::ALL.map(|c| bytes(c.name())),
            path: path.to_path_buf(),
        })
    }

    /// The converted strings of `meta`'s group (found by its identity, no allocation once
    /// seen; a sweep has few groups, so a linear search).
    fn strings_of(&mut self, meta: &GroupMeta) -> usize {
        let same = |m: &MetaStrings| {
            m.scenario.data() == meta.scenario.as_bytes()
                && m.param.data() == meta.param.as_bytes()
                && m.profile.data() == meta.profile.as_bytes()
                && m.mutant.as_ref().map_or(&[][..], |b| b.data()) == meta.mutant.as_bytes()
        };
        if let Some(i) = self.metas.iter().position(same) {
            return i;
        }
        self.metas.push(MetaStrings {
            scenario: bytes(&meta.scenario),
            param: bytes(&meta.param),
            profile: bytes(&meta.profile),
            mutant: (!meta.mutant.is_empty()).then(|| bytes(&meta.mutant)),
            checks: meta.checks.iter().map(|c| bytes(c)).collect(),
            policies: meta.policies.iter().map(|p| bytes(p)).collect(),
        });
        self.metas.len() - 1
    }

    /// Buffers one seed's rows (`res` in result order: check, comparison, policy), writing a
    /// row group whenever [`ROW_GROUP_ROWS`] rows are buffered.
    pub fn write(&mut self, meta: &GroupMeta, seed: u64, res: &[SeedValues]) -> anyhow::Result<()> {
        let mi = self.strings_of(meta);
        let mut k = 0;
        for c in 0..meta.checks.len() {
            for ci in 0..Comparison::ALL.len() {
                for p in 0..meta.policies.len() {
                    let v = &res[k];
                    k += 1;
                    let m = &self.metas[mi];
                    let s = &mut self.cols.strings;
                    s[0].push(m.scenario.clone());
                    s[1].push(m.param.clone());
                    s[2].push(m.profile.clone());
                    s[3].push(m.checks[c].clone());
                    s[4].push(self.comparisons[ci].clone());
                    s[5].push(m.policies[p].clone());
                    match &m.mutant {
                        Some(b) => {
                            self.cols.mutant_def.push(1);
                            self.cols.mutant.push(b.clone());
                        }
                        None => self.cols.mutant_def.push(0),
                    }
                    let i = &mut self.cols.ints;
                    i[0].push(seed as i64);
                    i[1].push(i64::from(v.worst_step.step));
                    i[2].push(micro_step(v.worst_step));
                    i[3].push(i64::from(v.mismatched));
                    i[4].push(i64::from(v.elements));
                    i[5].push(i64::from(v.nonfinite));
                    let f = &mut self.cols.floats;
                    f[0].push(v.usage_pct);
                    f[1].push(v.max_abs_diff);
                    f[2].push(v.max_abs_expected);
                    f[3].push(v.theory_det_pct);
                    f[4].push(v.theory_prob_pct);
                    if self.cols.len() == ROW_GROUP_ROWS {
                        self.flush_group()?;
                    }
                }
            }
        }
        Ok(())
    }

    fn flush_group(&mut self) -> anyhow::Result<()> {
        if self.cols.len() == 0 {
            return Ok(());
        }
        let err =
            |e: parquet::errors::ParquetError| anyhow!("cannot write {}: {e}", self.path.display());
        let mut rg = self.writer.next_row_group().map_err(err)?;
        let (mut si, mut ii, mut fi) = (0, 0, 0);
        for (_, kind) in COLUMNS {
            let mut col = rg
                .next_column()
                .map_err(err)?
                .expect("the schema has one column per COLUMNS entry");
            match kind {
                Kind::Str => {
                    col.typed::<ByteArrayType>()
                        .write_batch(&self.cols.strings[si], None, None)
                        .map_err(err)?;
                    si += 1;
                }
                Kind::OptStr => {
                    col.typed::<ByteArrayType>()
                        .write_batch(&self.cols.mutant, Some(&self.cols.mutant_def), None)
                        .map_err(err)?;
                }
                Kind::Int => {
                    col.typed::<Int64Type>()
                        .write_batch(&self.cols.ints[ii], None, None)
                        .map_err(err)?;
                    ii += 1;
                }
                Kind::Float => {
                    col.typed::<DoubleType>()
                        .write_batch(&self.cols.floats[fi], None, None)
                        .map_err(err)?;
                    fi += 1;
                }
            }
            col.close().map_err(err)?;
        }
        rg.close().map_err(err)?;
        self.cols.clear();
        Ok(())
    }

    /// Writes the last row group and the footer, and syncs the file to disk.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.flush_group()?;
        let path = self.path.clone();
        let buf = self
            .writer
            .into_inner()
            .map_err(|e| anyhow!("cannot finish {}: {e}", path.display()))?;
        let file = buf
            .into_inner()
            .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error()))?;
        file.sync_all()
            .with_context(|| format!("cannot sync {}", path.display()))
    }
}

/// Reads every row of a Parquet per-seed file, in file order, one row group in memory at a
/// time, and calls `row` for each. The file's columns must be exactly those this module
/// writes (names, order and types); anything else is an error naming the file and column.
pub(crate) fn for_each_row(
    path: &Path,
    mut row: impl FnMut(SeedRowIn) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| anyhow!("{}: not a readable Parquet file: {e}", path.display()))?;
    let fields = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .to_vec();
    let expected = schema();
    let want = parquet::schema::types::SchemaDescriptor::new(expected);
    if fields.len() != COLUMNS.len() {
        return Err(anyhow!(
            "{}: has {} columns; a seedsweep per-seed file has {}: {}",
            path.display(),
            fields.len(),
            COLUMNS.len(),
            COLUMNS.map(|c| c.0).join(", ")
        ));
    }
    for (i, (got, want)) in fields.iter().zip(want.columns()).enumerate() {
        if got.name() != want.name()
            || got.physical_type() != want.physical_type()
            || got.max_def_level() != want.max_def_level()
        {
            return Err(anyhow!(
                "{}: column {} is `{}` ({:?}); expected `{}` ({:?})",
                path.display(),
                i + 1,
                got.name(),
                got.physical_type(),
                want.name(),
                want.physical_type()
            ));
        }
    }
    let mut cols = Columns::default();
    for g in 0..reader.num_row_groups() {
        let rg = reader
            .get_row_group(g)
            .map_err(|e| anyhow!("{}: row group {g}: {e}", path.display()))?;
        let n = usize::try_from(rg.metadata().num_rows())
            .map_err(|_| anyhow!("{}: row group {g} has a negative row count", path.display()))?;
        cols.clear();
        let (mut si, mut ii, mut fi) = (0, 0, 0);
        for (c, (name, kind)) in COLUMNS.iter().enumerate() {
            let bad = |e: parquet::errors::ParquetError| {
                anyhow!("{}: row group {g}, column {name}: {e}", path.display())
            };
            let reader = rg.get_column_reader(c).map_err(bad)?;
            let got = match (kind, reader) {
                (Kind::Str, ColumnReader::ByteArrayColumnReader(mut r)) => {
                    let v = &mut cols.strings[si];
                    si += 1;
                    r.read_records(n, None, None, v).map_err(bad)?.0
                }
                (Kind::OptStr, ColumnReader::ByteArrayColumnReader(mut r)) => {
                    r.read_records(n, Some(&mut cols.mutant_def), None, &mut cols.mutant)
                        .map_err(bad)?
                        .0
                }
                (Kind::Int, ColumnReader::Int64ColumnReader(mut r)) => {
                    let v = &mut cols.ints[ii];
                    ii += 1;
                    r.read_records(n, None, None, v).map_err(bad)?.0
                }
                (Kind::Float, ColumnReader::DoubleColumnReader(mut r)) => {
                    let v = &mut cols.floats[fi];
                    fi += 1;
                    r.read_records(n, None, None, v).map_err(bad)?.0
                }
                _ => {
                    return Err(anyhow!(
                        "{}: column {name} has the wrong type",
                        path.display()
                    ))
                }
            };
            if got != n {
                return Err(anyhow!(
                    "{}: row group {g}, column {name}: {got} of {n} rows",
                    path.display()
                ));
            }
        }
        // The index of each row's mutant among the non-null values, or None.
        let mut next_mutant = 0usize;
        for i in 0..n {
            let utf8 = |b: &ByteArray| -> anyhow::Result<String> {
                std::str::from_utf8(b.data())
                    .map(str::to_string)
                    .map_err(|_| {
                        anyhow!(
                            "{}: row group {g}, row {i}: a string is not UTF-8",
                            path.display()
                        )
                    })
            };
            let mutant = match cols.mutant_def.get(i) {
                Some(1) => {
                    next_mutant += 1;
                    let b = cols.mutant.get(next_mutant - 1).ok_or_else(|| {
                        anyhow!("{}: row group {g}: column mutant is short", path.display())
                    })?;
                    Some(utf8(b)?)
                }
                _ => None,
            };
            let s = |k: usize| utf8(&cols.strings[k][i]);
            let count = |k: usize| -> anyhow::Result<u32> {
                u32::try_from(cols.ints[k][i]).map_err(|_| {
                    anyhow!(
                        "{}: row group {g}, row {i}: {} is {}; allowed: 0..=4294967295",
                        path.display(),
                        [
                            "seed",
                            "step",
                            "micro_step",
                            "mismatched",
                            "elements",
                            "nonfinite"
                        ][k],
                        cols.ints[k][i]
                    )
                })
            };
            let r = SeedRowIn {
                scenario: s(0)?,
                param: s(1)?,
                profile: s(2)?,
                seed: cols.ints[0][i] as u64,
                check: s(3)?,
                comparison: s(4)?,
                policy: s(5)?,
                usage_pct: cols.floats[0][i],
                max_abs_diff: cols.floats[1][i],
                step: count(1)?,
                micro_step: cols.ints[2][i],
                mismatched: count(3)?,
                elements: count(4)?,
                nonfinite: count(5)?,
                max_abs_expected: cols.floats[2][i],
                mutant,
                theory_det_pct: cols.floats[3][i],
                theory_prob_pct: cols.floats[4][i],
            };
            if !row(r)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{StepLabel, Tolerance};
    use crate::results::csv::{read_units, SeedsWriter};

    fn meta(param: &str, mutant: &str) -> GroupMeta {
        GroupMeta {
            scenario: "deepspeed-tied-row-parallel".into(),
            param: param.into(),
            profile: "cpu-fma".into(),
            mutant: mutant.into(),
            checks: vec!["logits".into(), "tied_grad".into()],
            policies: vec!["old".into(), "torch-default".into()],
            tolerances: vec![
                vec![
                    Tolerance {
                        atol: 1e-6,
                        rtol: 1e-5
                    };
                    2
                ];
                2
            ],
            asserted: Comparison::ShardedVsRef,
            seed_dependent: true,
        }
    }

    /// Values that exercise every column: NaN theory columns, infinities, subnormals,
    /// negative zero, micro-step labels, counts up to u32::MAX and seeds above i64::MAX.
    fn values(seed: u64, n: usize) -> Vec<SeedValues> {
        (0..n)
            .map(|k| {
                let x = (seed as f64 + 1.0) * (k as f64 + 0.5) / 7.0;
                SeedValues {
                    usage_pct: if k == 3 { f64::INFINITY } else { x * 13.1 },
                    max_abs_diff: if k == 1 { f64::from_bits(1) } else { x * 1e-7 },
                    worst_step: if k % 2 == 0 {
                        StepLabel::step(k as u32)
                    } else {
                        StepLabel::micro(k as u32, 1)
                    },
                    mismatched: if k == 5 { u32::MAX } else { k as u32 },
                    elements: 670,
                    nonfinite: (seed % 3) as u32,
                    max_abs_expected: if k == 2 { -0.0 } else { x },
                    theory_det_pct: if k >= 6 { f64::NAN } else { x * 3.0 },
                    theory_prob_pct: if k >= 6 { f64::NAN } else { f64::NEG_INFINITY },
                }
            })
            .collect()
    }

    fn bits(v: &SeedValues) -> [u64; 9] {
        [
            v.usage_pct.to_bits(),
            v.max_abs_diff.to_bits(),
            u64::from(v.worst_step.step) << 32 | u64::from(v.worst_step.micro.unwrap_or(9999)),
            u64::from(v.mismatched),
            u64::from(v.elements),
            u64::from(v.nonfinite),
            v.max_abs_expected.to_bits(),
            v.theory_det_pct.to_bits(),
            v.theory_prob_pct.to_bits(),
        ]
    }

    fn write_both(dir: &Path, metas: &[GroupMeta], seeds: &[u64]) {
        let mut csv = SeedsWriter::open(&dir.join("seeds.csv"), false).unwrap();
        let mut pq = ParquetSeedsWriter::create(&dir.join(FILE)).unwrap();
        for m in metas {
            for &s in seeds {
                let v = values(s, m.entries());
                csv.write(m, s, &v).unwrap();
                pq.write(m, s, &v).unwrap();
            }
        }
        csv.sync().unwrap();
        pq.finish().unwrap();
    }

    #[test]
    fn rows_read_back_bit_for_bit_as_from_csv() {
        let dir = tempfile::tempdir().unwrap();
        let metas = [
            meta("35-3-False-0", ""),
            meta("32-3-False-2", "missing-allreduce"),
        ];
        // Enough seeds for several row groups: 12 rows per unit.
        let seeds: Vec<u64> = (0..(2 * ROW_GROUP_ROWS as u64 / 12 + 37))
            .map(|i| if i == 5 { u64::MAX - 1 } else { 8173 + i })
            .collect();
        write_both(dir.path(), &metas, &seeds);
        let a = read_units(&dir.path().join("seeds.csv"), &metas, false).unwrap();
        let b = read_units(&dir.path().join(FILE), &metas, false).unwrap();
        assert_eq!(a.len(), metas.len() * seeds.len());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.group, x.seed), (y.group, y.seed));
            let xb: Vec<_> = x.values.iter().map(bits).collect();
            let yb: Vec<_> = y.values.iter().map(bits).collect();
            assert_eq!(xb, yb, "seed {}", x.seed);
        }
        let csv = std::fs::metadata(dir.path().join("seeds.csv"))
            .unwrap()
            .len();
        let pq = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        assert!(pq < csv, "parquet {pq} bytes, csv {csv}");
    }

    #[test]
    fn the_bytes_depend_only_on_the_rows() {
        let d1 = tempfile::tempdir().unwrap();
        let d2 = tempfile::tempdir().unwrap();
        let metas = [meta("35-3-False-0", "")];
        let seeds: Vec<u64> = (100..400).collect();
        write_both(d1.path(), &metas, &seeds);
        // The same rows written by a writer that saw another group's strings first.
        let mut pq = ParquetSeedsWriter::create(&d2.path().join(FILE)).unwrap();
        let other = meta("32-None-False-0", "");
        pq.strings_of(&other);
        for &s in &seeds {
            pq.write(&metas[0], s, &values(s, metas[0].entries()))
                .unwrap();
        }
        pq.finish().unwrap();
        let a = std::fs::read(d1.path().join(FILE)).unwrap();
        let b = std::fs::read(d2.path().join(FILE)).unwrap();
        assert!(a == b, "two writes of the same rows differ");
    }

    #[test]
    fn a_torn_or_foreign_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let metas = [meta("35-3-False-0", "")];
        write_both(dir.path(), &metas, &[1, 2, 3]);
        let whole = std::fs::read(dir.path().join(FILE)).unwrap();
        let torn = dir.path().join("torn.parquet");
        for cut in [0, 4, whole.len() / 2, whole.len() - 1] {
            std::fs::write(&torn, &whole[..cut]).unwrap();
            let e = read_units(&torn, &metas, false).unwrap_err().to_string();
            assert!(e.contains("torn.parquet"), "{e}");
        }
        // A unit of a group the plan does not hold names the row.
        let e = read_units(&dir.path().join(FILE), &[meta("other", "")], false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 1: row of a group that is not in the plan"),
            "{e}"
        );
        // A Parquet file with other columns names the column.
        let foreign = dir.path().join("foreign.parquet");
        let schema =
            Arc::new(parse_message_type("message m { REQUIRED INT64 scenario; }").unwrap());
        let f = File::create(&foreign).unwrap();
        SerializedFileWriter::new(f, schema, Default::default())
            .unwrap()
            .close()
            .unwrap();
        let e = read_units(&foreign, &metas, false).unwrap_err().to_string();
        assert!(e.contains("has 1 columns"), "{e}");
    }
}
