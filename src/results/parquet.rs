//! Parquet export of the per-seed table (`--format parquet`): the columns of `seeds.csv`
//! ([`crate::results::schema::SEED_COLUMNS`]), in the same order and with the same values,
//! as one Parquet file that pandas, polars and DuckDB read directly.
//!
//! Layout (Apache Parquet format 2, written by the `parquet` crate without Arrow), derived
//! from the column declarations ([`crate::results::schema`]), column by column:
//! - strings (`scenario`, `param`, `profile`, `check`, `comparison`, `policy`, `mutant`):
//!   `BYTE_ARRAY` annotated `STRING`, dictionary-encoded; a string that may be none
//!   (`mutant`) is `OPTIONAL`, null for the clean run (empty in `seeds.csv`);
//! - `seed` (an unsigned column): `INT64` annotated unsigned 64-bit (the bits of the `u64`);
//! - the integers (`step`, `micro_step` (-1: none), `mismatched`, `elements`,
//!   `nonfinite`): `INT64`;
//! - the floats: `DOUBLE`, `BYTE_STREAM_SPLIT`-encoded, no dictionary: the encoding
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
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::Type;

use crate::engine::evaluate::SeedValues;
use crate::engine::plan::GroupMeta;
use crate::results::csv::unit_rows;
use crate::results::schema::{Access, Col, RowFamily, SeedRows, SEED_COLUMNS};

/// The file a Parquet sweep writes its per-seed table to.
pub const FILE: &str = "seeds.parquet";

/// Rows per row group: large enough for the compressor to find the repetition across seeds
/// (about 11x fewer bytes than CSV on T1), small enough to keep the writer's and reader's
/// buffers near 10 MB.
pub const ROW_GROUP_ROWS: usize = 1 << 17;

/// The Parquet type of one column: (repetition and physical type, logical annotation).
fn parquet_type<F: RowFamily>(c: &Col<F>) -> (&'static str, &'static str) {
    match c.access {
        Access::Str(..) => ("REQUIRED BYTE_ARRAY", " (STRING)"),
        Access::OptStr(..) => ("OPTIONAL BYTE_ARRAY", " (STRING)"),
        Access::U64(..) => ("REQUIRED INT64", " (INTEGER(64,false))"),
        Access::OptU64(..) => ("OPTIONAL INT64", " (INTEGER(64,false))"),
        Access::I64(..) | Access::Usize(..) | Access::U32(..) | Access::OptU32(..) => {
            ("REQUIRED INT64", "")
        }
        Access::F64(..) => ("REQUIRED DOUBLE", ""),
        Access::OptF64(..) => ("OPTIONAL DOUBLE", ""),
        Access::Bool(..) => ("REQUIRED BOOLEAN", ""),
    }
}

/// The Parquet message type of a table.
fn schema_text<F: RowFamily>(cols: &[Col<F>]) -> String {
    let mut s = String::from("message seeds {\n");
    for c in cols {
        let (t, ann) = parquet_type(c);
        s.push_str(&format!("  {t} {}{ann};\n", c.name));
    }
    s.push('}');
    s
}

fn schema<F: RowFamily>(cols: &[Col<F>]) -> Arc<Type> {
    Arc::new(parse_message_type(&schema_text(cols)).expect("the declared schema parses"))
}

fn properties<F: RowFamily>(cols: &[Col<F>]) -> Arc<WriterProperties> {
    let mut b = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(9).expect("9 is a valid zstd level"),
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by(format!("seedsweep {}", env!("CARGO_PKG_VERSION")));
    for c in cols {
        if matches!(c.access, Access::F64(..) | Access::OptF64(..)) {
            b = b
                .set_column_dictionary_enabled(c.name.into(), false)
                .set_column_encoding(c.name.into(), Encoding::BYTE_STREAM_SPLIT);
        }
    }
    Arc::new(b.build())
}

/// Strings a column buffer has converted lately: a row group holds few distinct strings
/// per column (a group's names, its checks and policies), so a hit means no allocation.
const RECENT: usize = 16;

/// One column of a row group, buffered: its values (non-null ones only) and, for a column
/// that may be null, its definition levels (1: a value, 0: null).
enum Buf {
    Bytes {
        vals: Vec<ByteArray>,
        def: Vec<i16>,
        /// Recently converted strings, most recent first (a clone is a reference-count
        /// increment).
        recent: Vec<ByteArray>,
    },
    Int {
        vals: Vec<i64>,
        def: Vec<i16>,
    },
    Double {
        vals: Vec<f64>,
        def: Vec<i16>,
    },
    Bool {
        vals: Vec<bool>,
    },
}

impl Buf {
    fn of<F: RowFamily>(c: &Col<F>) -> Self {
        match c.access {
            Access::Str(..) | Access::OptStr(..) => Buf::Bytes {
                vals: Vec::new(),
                def: Vec::new(),
                recent: Vec::new(),
            },
            Access::F64(..) | Access::OptF64(..) => Buf::Double {
                vals: Vec::new(),
                def: Vec::new(),
            },
            Access::Bool(..) => Buf::Bool { vals: Vec::new() },
            _ => Buf::Int {
                vals: Vec::new(),
                def: Vec::new(),
            },
        }
    }

    fn clear(&mut self) {
        match self {
            Buf::Bytes { vals, def, .. } => {
                vals.clear();
                def.clear();
            }
            Buf::Int { vals, def } => {
                vals.clear();
                def.clear();
            }
            Buf::Double { vals, def } => {
                vals.clear();
                def.clear();
            }
            Buf::Bool { vals } => vals.clear(),
        }
    }

    /// Appends a string (None: a null).
    fn push_str(&mut self, s: Option<&str>) {
        let Buf::Bytes { vals, def, recent } = self else {
            unreachable!("a string column has a bytes buffer")
        };
        let Some(s) = s else {
            def.push(0);
            return;
        };
        def.push(1);
        let b = match recent.iter().position(|b| b.data() == s.as_bytes()) {
            Some(i) => recent[i].clone(),
            None => {
                let b = ByteArray::from(s.as_bytes().to_vec());
                if recent.len() == RECENT {
                    recent.pop();
                }
                recent.insert(0, b.clone());
                b
            }
        };
        vals.push(b);
    }

    fn push_int(&mut self, x: Option<i64>) {
        let Buf::Int { vals, def } = self else {
            unreachable!("an integer column has an int buffer")
        };
        def.push(i16::from(x.is_some()));
        vals.extend(x);
    }

    fn push_double(&mut self, x: Option<f64>) {
        let Buf::Double { vals, def } = self else {
            unreachable!("a float column has a double buffer")
        };
        def.push(i16::from(x.is_some()));
        vals.extend(x);
    }
}

/// Streams rows of the table `cols` into a Parquet file. [`ParquetWriter::finish`] writes
/// the footer; a file without it is not a Parquet file, so a killed writer never leaves a
/// file that reads as complete.
pub struct ParquetWriter<F: RowFamily + 'static> {
    writer: SerializedFileWriter<BufWriter<File>>,
    cols: &'static [Col<F>],
    bufs: Vec<Buf>,
    rows: usize,
    path: std::path::PathBuf,
}

impl<F: RowFamily> ParquetWriter<F> {
    /// Creates (truncates) `path` for rows of `cols`.
    pub fn create(path: &Path, cols: &'static [Col<F>]) -> anyhow::Result<Self> {
        let file = crate::sys::atomic_write::open_owned(path, false)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            schema(cols),
            properties(cols),
        )
        .with_context(|| format!("cannot start the Parquet file {}", path.display()))?;
        Ok(Self {
            writer,
            cols,
            bufs: cols.iter().map(Buf::of).collect(),
            rows: 0,
            path: path.to_path_buf(),
        })
    }

    /// Buffers one row, writing a row group whenever [`ROW_GROUP_ROWS`] rows are buffered.
    pub fn push(&mut self, row: &F::Row<'_>) -> anyhow::Result<()> {
        for (c, b) in self.cols.iter().zip(&mut self.bufs) {
            match c.access {
                Access::Str(get, _) => b.push_str(Some(get(row))),
                Access::OptStr(get, _) => b.push_str(get(row)),
                // The bits of the u64.
                Access::U64(get, _) => b.push_int(Some(get(row) as i64)),
                Access::OptU64(get, _) => b.push_int(get(row).map(|x| x as i64)),
                Access::I64(get, _) => b.push_int(Some(get(row))),
                Access::Usize(get, _) => b.push_int(Some(get(row) as i64)),
                Access::U32(get, _) => b.push_int(Some(i64::from(get(row)))),
                Access::OptU32(get, _) => b.push_int(Some(get(row).map_or(-1, i64::from))),
                Access::F64(get, _) => b.push_double(Some(get(row))),
                Access::OptF64(get, _) => b.push_double(get(row)),
                Access::Bool(get, _) => match b {
                    Buf::Bool { vals } => vals.push(get(row)),
                    _ => unreachable!("a bool column has a bool buffer"),
                },
            }
        }
        self.rows += 1;
        if self.rows == ROW_GROUP_ROWS {
            self.flush_group()?;
        }
        Ok(())
    }

    fn flush_group(&mut self) -> anyhow::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let path = &self.path;
        let err =
            |e: parquet::errors::ParquetError| anyhow!("cannot write {}: {e}", path.display());
        let mut rg = self.writer.next_row_group().map_err(err)?;
        for (c, b) in self.cols.iter().zip(&self.bufs) {
            let mut col = rg
                .next_column()
                .map_err(err)?
                .expect("the schema has one column per declared column");
            // Definition levels only for a column that may be null.
            let nullable = parquet_type(c).0.starts_with("OPTIONAL");
            match b {
                Buf::Bytes { vals, def, .. } => col
                    .typed::<ByteArrayType>()
                    .write_batch(vals, nullable.then_some(&def[..]), None)
                    .map_err(err)?,
                Buf::Int { vals, def } => col
                    .typed::<Int64Type>()
                    .write_batch(vals, nullable.then_some(&def[..]), None)
                    .map_err(err)?,
                Buf::Double { vals, def } => col
                    .typed::<DoubleType>()
                    .write_batch(vals, nullable.then_some(&def[..]), None)
                    .map_err(err)?,
                Buf::Bool { vals } => col
                    .typed::<BoolType>()
                    .write_batch(vals, None, None)
                    .map_err(err)?,
            };
            col.close().map_err(err)?;
        }
        rg.close().map_err(err)?;
        self.bufs.iter_mut().for_each(Buf::clear);
        self.rows = 0;
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

/// Streams per-seed rows into `seeds.parquet`, in the order of `seeds.csv`: group order,
/// then seed order, then check, comparison, policy.
pub struct ParquetSeedsWriter(ParquetWriter<SeedRows>);

impl ParquetSeedsWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        Ok(Self(ParquetWriter::create(path, SEED_COLUMNS)?))
    }

    /// Buffers one seed's rows (`res` in result order: check, comparison, policy).
    pub fn write(&mut self, meta: &GroupMeta, seed: u64, res: &[SeedValues]) -> anyhow::Result<()> {
        let mut done = Ok(());
        unit_rows(meta, seed, res, |_, row| {
            if done.is_ok() {
                done = self.0.push(row);
            }
        });
        done
    }

    /// Writes the last row group and the footer, and syncs the file to disk.
    pub fn finish(self) -> anyhow::Result<()> {
        self.0.finish()
    }
}

/// One column of a row group as read: its values and, for a nullable column, its
/// definition levels.
enum ReadBuf {
    Bytes(Vec<ByteArray>, Vec<i16>),
    Int(Vec<i64>, Vec<i16>),
    Double(Vec<f64>, Vec<i16>),
    Bool(Vec<bool>),
}

/// Reads every row of a Parquet file of the table `cols`, in file order, one row group in
/// memory at a time, and calls `row` for each (its strings borrowed from the row group's
/// buffers); `row` returns whether to go on. The file's columns must be exactly the
/// declared ones (names, order and types); anything else is an error naming the file and
/// column.
pub fn for_each_row<F: RowFamily>(
    cols: &[Col<F>],
    path: &Path,
    mut row: impl FnMut(F::Row<'_>) -> anyhow::Result<bool>,
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
    let want = parquet::schema::types::SchemaDescriptor::new(schema(cols));
    if fields.len() != cols.len() {
        return Err(anyhow!(
            "{}: has {} columns; a seedsweep per-seed file has {}: {}",
            path.display(),
            fields.len(),
            cols.len(),
            cols.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
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
    for g in 0..reader.num_row_groups() {
        let rg = reader
            .get_row_group(g)
            .map_err(|e| anyhow!("{}: row group {g}: {e}", path.display()))?;
        let n = usize::try_from(rg.metadata().num_rows())
            .map_err(|_| anyhow!("{}: row group {g} has a negative row count", path.display()))?;
        let mut bufs: Vec<ReadBuf> = Vec::with_capacity(cols.len());
        for (i, c) in cols.iter().enumerate() {
            let name = c.name;
            let bad = |e: parquet::errors::ParquetError| {
                anyhow!("{}: row group {g}, column {name}: {e}", path.display())
            };
            let reader = rg.get_column_reader(i).map_err(bad)?;
            let nullable = parquet_type(c).0.starts_with("OPTIONAL");
            let (buf, got) = match (Buf::of(c), reader) {
                (Buf::Bytes { .. }, ColumnReader::ByteArrayColumnReader(mut r)) => {
                    let (mut v, mut d) = (Vec::new(), Vec::new());
                    let got = r
                        .read_records(n, nullable.then_some(&mut d), None, &mut v)
                        .map_err(bad)?
                        .0;
                    (ReadBuf::Bytes(v, d), got)
                }
                (Buf::Int { .. }, ColumnReader::Int64ColumnReader(mut r)) => {
                    let (mut v, mut d) = (Vec::new(), Vec::new());
                    let got = r
                        .read_records(n, nullable.then_some(&mut d), None, &mut v)
                        .map_err(bad)?
                        .0;
                    (ReadBuf::Int(v, d), got)
                }
                (Buf::Double { .. }, ColumnReader::DoubleColumnReader(mut r)) => {
                    let (mut v, mut d) = (Vec::new(), Vec::new());
                    let got = r
                        .read_records(n, nullable.then_some(&mut d), None, &mut v)
                        .map_err(bad)?
                        .0;
                    (ReadBuf::Double(v, d), got)
                }
                (Buf::Bool { .. }, ColumnReader::BoolColumnReader(mut r)) => {
                    let mut v = Vec::new();
                    let got = r.read_records(n, None, None, &mut v).map_err(bad)?.0;
                    (ReadBuf::Bool(v), got)
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
            bufs.push(buf);
        }
        // Per column, the index of the next non-null value.
        let mut next = vec![0usize; cols.len()];
        for i in 0..n {
            let mut r = F::Row::default();
            for (k, (c, b)) in cols.iter().zip(&bufs).enumerate() {
                let short = || {
                    anyhow!(
                        "{}: row group {g}: column {} is short",
                        path.display(),
                        c.name
                    )
                };
                // The row's value index, or None for a null.
                let mut take = |def: &[i16], len: usize| -> anyhow::Result<Option<usize>> {
                    if !def.is_empty() && def.get(i) != Some(&1) {
                        return Ok(None);
                    }
                    let j = next[k];
                    next[k] += 1;
                    if j >= len {
                        return Err(short());
                    }
                    Ok(Some(j))
                };
                let count = |x: i64| -> anyhow::Result<u32> {
                    u32::try_from(x).map_err(|_| {
                        anyhow!(
                            "{}: row group {g}, row {i}: {} is {x}; allowed: 0..=4294967295",
                            path.display(),
                            c.name
                        )
                    })
                };
                match (c.access, b) {
                    (Access::Str(_, set), ReadBuf::Bytes(v, d)) => {
                        let j = take(d, v.len())?.ok_or_else(short)?;
                        set(&mut r, utf8(&v[j], path, g, i)?)
                    }
                    (Access::OptStr(_, set), ReadBuf::Bytes(v, d)) => {
                        let s = match take(d, v.len())? {
                            Some(j) => Some(utf8(&v[j], path, g, i)?),
                            None => None,
                        };
                        set(&mut r, s)
                    }
                    (Access::F64(_, set), ReadBuf::Double(v, d)) => {
                        set(&mut r, v[take(d, v.len())?.ok_or_else(short)?])
                    }
                    (Access::OptF64(_, set), ReadBuf::Double(v, d)) => {
                        set(&mut r, take(d, v.len())?.map(|j| v[j]))
                    }
                    (Access::Bool(_, set), ReadBuf::Bool(v)) => {
                        set(&mut r, v[take(&[], v.len())?.ok_or_else(short)?])
                    }
                    (access, ReadBuf::Int(v, d)) => {
                        let x = take(d, v.len())?.map(|j| v[j]);
                        let need = || x.ok_or_else(short);
                        match access {
                            Access::U64(_, set) => set(&mut r, need()? as u64),
                            Access::OptU64(_, set) => set(&mut r, x.map(|x| x as u64)),
                            Access::I64(_, set) => set(&mut r, need()?),
                            Access::Usize(_, set) => set(
                                &mut r,
                                usize::try_from(need()?).map_err(|_| {
                                    anyhow!(
                                        "{}: row group {g}, row {i}: {} is negative",
                                        path.display(),
                                        c.name
                                    )
                                })?,
                            ),
                            Access::U32(_, set) => set(&mut r, count(need()?)?),
                            Access::OptU32(_, set) => set(
                                &mut r,
                                match need()? {
                                    -1 => None,
                                    m => Some(count(m)?),
                                },
                            ),
                            _ => unreachable!("an integer column has an int buffer"),
                        }
                    }
                    _ => unreachable!("each column's buffer is of its type"),
                }
            }
            if !row(r)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A string of a row read back.
fn utf8<'b>(b: &'b ByteArray, path: &Path, g: usize, i: usize) -> anyhow::Result<&'b str> {
    std::str::from_utf8(b.data()).map_err(|_| {
        anyhow!(
            "{}: row group {g}, row {i}: a string is not UTF-8",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::comparison::Comparison;
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
                    routing_flips: (k % 3 != 1).then_some(seed.wrapping_mul(k as u64)),
                }
            })
            .collect()
    }

    fn bits(v: &SeedValues) -> [u64; 11] {
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
            u64::from(v.routing_flips.is_some()),
            v.routing_flips.unwrap_or(0),
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
        let metas = [meta("35-3-False-0", ""), meta("32-3-False-2", "x")];
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
        let other = meta("32-None-False-0", "m");
        pq.write(&other, 1, &values(1, other.entries())).unwrap();
        pq.0.bufs.iter_mut().for_each(Buf::clear);
        pq.0.rows = 0;
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
