//! The results [`super::drive`] holds back while a family runs: the units of every group of
//! the family but the first, which the sink must get after the first group's units (output
//! order is group-major) although every seed computes all of them at once.
//!
//! They stay in memory up to a budget shared by the family's groups; past it, a group's
//! units go to an unnamed temporary file in the sweep folder (created with
//! [`tempfile::tempfile_in`], so nothing is left behind when the process ends, however it
//! ends), and are read back in order when the family's seeds are done. So a family never
//! has to be split to bound memory, and its groups keep sharing their runs at any seed
//! count. A unit is stored as its rows' length (u64, little-endian), its rows, its frontier
//! record's length and its frontier record: the bytes read back are the bytes written.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::Context;

use super::UnitSink;

/// Bytes of results [`super::drive`] keeps in memory for a family before it moves a group's
/// units to a temporary file.
pub const HELD_IN_MEMORY: usize = 64 << 20;

/// One unit as the workers encoded it ([`super::UnitEncoder`]): two byte strings, for the
/// sink's two streams (a sweep's: the unit's per-seed rows, or a mutant's values, and its
/// frontier record).
pub type UnitBytes = (Vec<u8>, Vec<u8>);

/// The held-back units of one family's later groups (see the module doc).
pub struct Held<'d> {
    groups: Vec<Group>,
    in_memory: usize,
    budget: usize,
    /// Where temporary files go (the sweep folder); None keeps everything in memory.
    dir: Option<&'d Path>,
}

#[derive(Default)]
struct Group {
    units: Vec<UnitBytes>,
    file: Option<BufWriter<File>>,
}

impl<'d> Held<'d> {
    /// Room for `groups` groups' units, `budget` bytes of them in memory, the rest in
    /// temporary files in `dir`.
    pub fn new(groups: usize, budget: usize, dir: Option<&'d Path>) -> Self {
        Self {
            groups: (0..groups).map(|_| Group::default()).collect(),
            in_memory: 0,
            budget,
            dir,
        }
    }

    /// Holds back group `j`'s next unit (units of a group come in output order).
    pub fn push(&mut self, j: usize, unit: UnitBytes) -> anyhow::Result<()> {
        let size = unit.0.len() + unit.1.len();
        let g = &mut self.groups[j];
        if g.file.is_none() && self.in_memory + size > self.budget {
            if let Some(dir) = self.dir {
                let file = tempfile::tempfile_in(dir).with_context(|| {
                    format!(
                        "cannot create a temporary file in {} for results held back",
                        dir.display()
                    )
                })?;
                let mut w = BufWriter::with_capacity(1 << 20, file);
                for u in g.units.drain(..) {
                    self.in_memory -= u.0.len() + u.1.len();
                    write_unit(&mut w, &u)?;
                }
                g.file = Some(w);
            }
        }
        match g.file.as_mut() {
            Some(w) => write_unit(w, &unit),
            None => {
                self.in_memory += size;
                g.units.push(unit);
                Ok(())
            }
        }
    }

    /// Hands group `j`'s units to `sink` in order (then forgets them) as units of plan group
    /// `group`, calling [`UnitSink::chunk_done`] after every `every` units and at the end,
    /// with `emitted` counting every unit handed on.
    pub fn hand_on<S: UnitSink>(
        &mut self,
        j: usize,
        group: usize,
        sink: &mut S,
        emitted: &mut u64,
        every: u64,
    ) -> anyhow::Result<()> {
        let g = std::mem::take(&mut self.groups[j]);
        let mut any = false;
        let mut one = |sink: &mut S, unit: &UnitBytes| -> anyhow::Result<()> {
            any = true;
            sink.unit(group, unit)?;
            *emitted += 1;
            if emitted.is_multiple_of(every) {
                sink.chunk_done(*emitted)?;
            }
            Ok(())
        };
        for u in &g.units {
            self.in_memory -= u.0.len() + u.1.len();
            one(sink, u)?;
        }
        if let Some(w) = g.file {
            let mut file = w
                .into_inner()
                .map_err(|e| e.into_error())
                .context("cannot write results held back to their temporary file")?;
            file.seek(SeekFrom::Start(0))
                .context("cannot rewind the temporary file of results held back")?;
            let mut r = BufReader::with_capacity(1 << 20, file);
            let mut u = UnitBytes::default();
            while read_part(&mut r, &mut u.0, true)? {
                read_part(&mut r, &mut u.1, false)?;
                one(sink, &u)?;
            }
        }
        if any {
            sink.chunk_done(*emitted)?;
        }
        Ok(())
    }
}

fn write_unit(w: &mut impl Write, (rows, fr): &UnitBytes) -> anyhow::Result<()> {
    for part in [rows, fr] {
        w.write_all(&(part.len() as u64).to_le_bytes())
            .and_then(|()| w.write_all(part))
            .context("cannot write results held back to their temporary file")?;
    }
    Ok(())
}

/// Reads one length-prefixed part into `buf`; false at the end of the file when `may_end`
/// (between units), an error anywhere else.
fn read_part(r: &mut impl Read, buf: &mut Vec<u8>, may_end: bool) -> anyhow::Result<bool> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        let k = r
            .read(&mut len[got..])
            .context("cannot read results held back from their temporary file")?;
        if k == 0 {
            anyhow::ensure!(
                may_end && got == 0,
                "the temporary file of results held back ended inside a unit"
            );
            return Ok(false);
        }
        got += k;
    }
    let len = usize::try_from(u64::from_le_bytes(len))
        .context("a unit in the temporary file of results held back is too long")?;
    buf.clear();
    buf.resize(len, 0);
    r.read_exact(buf)
        .context("cannot read results held back from their temporary file")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that records what it is handed.
    #[derive(Default)]
    struct Record {
        units: Vec<UnitBytes>,
        groups: Vec<usize>,
        checkpoints: Vec<u64>,
    }

    /// Encodes nothing (the test hands on bytes it made itself).
    struct Nothing;
    impl super::super::UnitEncoder for Nothing {
        type Scratch = ();
        fn encode(&self, _: &super::super::Unit<'_>, _: &mut (), _: &mut UnitBytes) {}
    }

    impl UnitSink for Record {
        type Encoder = Nothing;
        fn encoder(&self) -> Nothing {
            Nothing
        }
        fn wants_frontiers(&self) -> bool {
            true
        }
        fn unit(&mut self, group: usize, unit: &UnitBytes) -> anyhow::Result<()> {
            self.units.push(unit.clone());
            self.groups.push(group);
            Ok(())
        }
        fn chunk_done(&mut self, units_so_far: u64) -> anyhow::Result<()> {
            self.checkpoints.push(units_so_far);
            Ok(())
        }
    }

    /// Units of varied sizes (empty parts included) for three groups.
    fn units(j: usize, k: usize) -> UnitBytes {
        let rows = vec![(j * 31 + k) as u8; (k * 7 + j) % 50];
        let fr = vec![(k % 251) as u8; if k.is_multiple_of(3) { 0 } else { k % 17 + j }];
        (rows, fr)
    }

    /// Whatever the budget (everything in memory, nothing, or some groups spilled part way),
    /// the sink gets every group's units in order, the same bytes, with the same checkpoints.
    #[test]
    fn held_units_come_back_in_order_from_memory_or_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let run = |budget: usize, dir: Option<&Path>| {
            let mut held = Held::new(3, budget, dir);
            for k in 0..500 {
                for j in 1..3 {
                    held.push(j, units(j, k)).unwrap();
                }
            }
            let mut sink = Record::default();
            let mut emitted = 1000;
            for j in 1..3 {
                held.hand_on(j, 10 + j, &mut sink, &mut emitted, 64)
                    .unwrap();
            }
            assert_eq!(held.in_memory, 0);
            assert!(sink.groups.iter().all(|&g| g == 11 || g == 12));
            (sink.units, sink.checkpoints, emitted)
        };
        let want = run(usize::MAX, None);
        let expected: Vec<UnitBytes> = (1..3)
            .flat_map(|j| (0..500).map(move |k| units(j, k)))
            .collect();
        assert_eq!(want.0, expected);
        assert_eq!(want.2, 2000);
        for budget in [0, 1, 5_000, 20_000] {
            assert_eq!(run(budget, Some(dir.path())), want, "budget {budget}");
        }
        // The temporary files are unnamed: nothing is left in the folder.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_truncated_temporary_file_is_an_error_not_a_short_read() {
        let mut buf = Vec::new();
        write_unit(&mut buf, &(vec![1, 2, 3], vec![4])).unwrap();
        let mut part = Vec::new();
        for cut in 1..buf.len() {
            let mut r = &buf[..cut];
            let first = read_part(&mut r, &mut part, true);
            let second = first
                .as_ref()
                .ok()
                .filter(|&&more| more)
                .map(|_| read_part(&mut r, &mut part, false));
            assert!(
                first.is_err() || matches!(second, Some(Err(_))),
                "cut at {cut} of {}",
                buf.len()
            );
        }
        let mut r = &buf[..];
        assert!(read_part(&mut r, &mut part, true).unwrap());
        assert_eq!(part, [1, 2, 3]);
        assert!(read_part(&mut r, &mut part, false).unwrap());
        assert_eq!(part, [4]);
        assert!(!read_part(&mut r, &mut part, true).unwrap());
    }
}
