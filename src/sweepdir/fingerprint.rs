//! The fingerprint of a sweep folder: every input that determines its output, one
//! `key = value` line each, written to `fingerprint.txt` before any result.
//!
//! It holds the tool version, the output mode, the seed range and shard, every group of the
//! plan (scenario, parametrization, profile spec, mutant, policies with their resolved
//! tolerances), every selected scenario's resolved config values (kind, generator, first seed,
//! the `[model]` table and each `[[params]]` entry, flattened to dotted keys), and every
//! selected profile's resolved numerics (not just its name). `--resume` and `merge` compare
//! fingerprints line by line and name the keys that differ.
//!
//! When the sweep has finished, the SHA-256 of every data file it wrote is appended as
//! `file.NAME.sha256 = HEX` lines ([`record_checksums`]); `merge`, `--resume`, `report` and
//! `size` check them ([`verify_checksums`]) and name a file that no longer matches. These lines
//! describe outputs, not inputs, so comparisons of fingerprints skip them.

use std::collections::BTreeMap;

use crate::engine::catalog::{Catalog, Group};
use crate::engine::plan::{GroupMeta, SeedRange};

/// The file name inside a sweep folder.
pub const FILE: &str = "fingerprint.txt";

/// The key of the shard line (the only line in which the shards of one sweep differ).
pub const SHARD_KEY: &str = "seeds.shard";

/// The prefix of the checksum lines (`file.seeds.csv.sha256`).
pub const FILE_KEY_PREFIX: &str = "file.";

/// The data files of a sweep folder whose checksums are recorded, in this order.
pub const CHECKSUMMED: &[&str] = &[
    "plan.csv",
    "summary.csv",
    "mutants.csv",
    "seeds.csv",
    "seeds.parquet",
    "frontiers.bin",
];

/// The SHA-256 of the file at `path`, in lower-case hex, read in 1 MiB blocks.
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    use std::fmt::Write as _;
    let mut hex = String::with_capacity(64);
    for b in h.finalize().iter() {
        let _ = write!(hex, "{b:02x}");
    }
    Ok(hex)
}

/// Appends the checksum of every [`CHECKSUMMED`] file present in `dir` to `fp` (any earlier
/// checksum lines dropped) and writes it as `dir/fingerprint.txt`, atomically: the last write
/// of a finished sweep or merge.
pub fn record_checksums(dir: &std::path::Path, fp: &Fingerprint) -> anyhow::Result<()> {
    let mut f = fp.without_checksums();
    for name in CHECKSUMMED {
        let path = dir.join(name);
        if !crate::sweepdir::folder::has(dir, name) {
            continue;
        }
        let sum = sha256_file(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {} to checksum it: {e}", path.display()))?;
        f.lines
            .push((format!("{FILE_KEY_PREFIX}{name}.sha256"), sum));
    }
    crate::sys::atomic_write::write_atomic(&dir.join(FILE), f.to_text().as_bytes())
}

/// What [`verify_checksums`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Every recorded file is there and matches.
    Verified(usize),
    /// The fingerprint records no checksums (an older seedsweep, or a sweep killed between
    /// its last file and the checksums; `--resume` completes it).
    NoneRecorded,
}

/// Checks every file whose checksum `fp` records in `dir`; an error, prefixed with `who`,
/// names the first file that is missing or differs.
pub fn verify_checksums(
    dir: &std::path::Path,
    fp: &Fingerprint,
    who: &str,
) -> anyhow::Result<Checked> {
    let mut n = 0;
    for (k, want) in &fp.lines {
        let Some(name) = k
            .strip_prefix(FILE_KEY_PREFIX)
            .and_then(|r| r.strip_suffix(".sha256"))
        else {
            continue;
        };
        let path = dir.join(name);
        let got = match sha256_file(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
                "{who}: {} is missing, but the sweep wrote it (its checksum is in {})",
                path.display(),
                dir.join(FILE).display()
            ),
            Err(e) => anyhow::bail!("{who}: cannot read {}: {e}", path.display()),
        };
        if &got != want {
            anyhow::bail!(
                "{who}: {} is not the file the sweep wrote: its SHA-256 is {got}, {} records \
                 {want}; it was edited or damaged since. Rerun the sweep that made it into a \
                 new folder",
                path.display(),
                dir.join(FILE).display()
            );
        }
        n += 1;
    }
    Ok(if n == 0 {
        Checked::NoneRecorded
    } else {
        Checked::Verified(n)
    })
}

/// Ordered `key = value` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    lines: Vec<(String, String)>,
}

/// Appends a TOML value under `key`, tables and arrays flattened to dotted keys.
fn flatten(key: &str, v: &toml::Value, out: &mut Vec<(String, String)>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                flatten(&format!("{key}.{k}"), v, out);
            }
        }
        toml::Value::Array(a) if a.iter().any(|x| x.is_table() || x.is_array()) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{key}.{i}"), v, out);
            }
        }
        other => out.push((key.to_string(), other.to_string())),
    }
}

/// One line per value: newlines and other control characters escaped.
fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<char>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

impl Fingerprint {
    /// The fingerprint of a sweep of `groups` over `range`; `mode` is `per-seed` or
    /// `summary-only`.
    pub fn of_sweep(
        catalog: &Catalog,
        groups: &[Group],
        metas: &[GroupMeta],
        range: &SeedRange,
        mode: &str,
    ) -> Self {
        let mut l: Vec<(String, String)> = vec![
            ("tool.version".into(), env!("CARGO_PKG_VERSION").into()),
            ("output.mode".into(), mode.into()),
            ("seeds.count".into(), range.count.to_string()),
            (
                "seeds.first".into(),
                range
                    .first
                    .map(|f| f.to_string())
                    .unwrap_or_else(|| "each scenario's first_seed".into()),
            ),
            (
                SHARD_KEY.into(),
                range
                    .shard
                    .map(|s| format!("{}/{}", s.index, s.count))
                    .unwrap_or_else(|| "none".into()),
            ),
        ];
        for (i, m) in metas.iter().enumerate() {
            let k = format!("group.{i}");
            l.push((
                k.clone(),
                format!(
                    "scenario={} param={} profile={} mutant={}",
                    m.scenario,
                    m.param,
                    m.profile,
                    if m.mutant.is_empty() {
                        "none"
                    } else {
                        &m.mutant
                    }
                ),
            ));
            for (p, policy) in m.policies.iter().enumerate() {
                for (c, check) in m.checks.iter().enumerate() {
                    let t = m.tolerances[p][c];
                    l.push((
                        format!("{k}.policy.{policy}.{check}"),
                        format!("atol={:e} rtol={:e}", t.atol, t.rtol),
                    ));
                }
            }
        }
        let mut scenarios: Vec<usize> = groups.iter().map(|g| g.scenario).collect();
        scenarios.sort_unstable();
        scenarios.dedup();
        for si in scenarios {
            let c = catalog.scenarios[si].common();
            let k = format!("scenario.{}", c.name);
            l.push((format!("{k}.kind"), c.kind.clone()));
            l.push((format!("{k}.rng"), c.rng.name().into()));
            l.push((format!("{k}.first_seed"), c.first_seed.to_string()));
            flatten(
                &format!("{k}.model"),
                &toml::Value::Table(c.model.clone()),
                &mut l,
            );
            for (i, p) in c.params.iter().enumerate() {
                flatten(
                    &format!("{k}.params.{i}"),
                    &toml::Value::Table(p.clone()),
                    &mut l,
                );
            }
        }
        let mut profiles: BTreeMap<String, String> = BTreeMap::new();
        for g in groups {
            let mut p = g.profile.clone();
            p.name = String::new();
            p.description = String::new();
            profiles.insert(g.profile.name.clone(), format!("{p:?}"));
        }
        for (name, v) in profiles {
            l.push((format!("profile.{name}"), v));
        }
        Self {
            lines: l.into_iter().map(|(k, v)| (clean(&k), clean(&v))).collect(),
        }
    }

    /// The file text.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# seedsweep sweep fingerprint: everything that determines this folder's output.\n",
        );
        for (k, v) in &self.lines {
            s.push_str(k);
            s.push_str(" = ");
            s.push_str(v);
            s.push('\n');
        }
        s
    }

    /// Parses [`Fingerprint::to_text`]; `None` when the text is not a fingerprint.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (k, v) = line.split_once(" = ")?;
            lines.push((k.to_string(), v.to_string()));
        }
        if lines.is_empty() {
            return None;
        }
        Some(Self { lines })
    }

    /// Reads `dir/fingerprint.txt`: `Ok(None)` when the folder has none.
    pub fn read(dir: &std::path::Path) -> anyhow::Result<Option<Self>> {
        let path = dir.join(FILE);
        match std::fs::read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
            Ok(bytes) => {
                let text = String::from_utf8(bytes)
                    .ok()
                    .and_then(|t| Self::parse(&t))
                    .ok_or_else(|| {
                        anyhow::anyhow!("{} is not a seedsweep fingerprint", path.display())
                    })?;
                Ok(Some(text))
            }
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The shard the folder holds: `Ok(None)` for a whole-range sweep, `Err` naming what is
    /// wrong with the shard line.
    pub fn shard(&self) -> Result<Option<crate::engine::plan::Shard>, String> {
        match self.get(SHARD_KEY) {
            Some("none") => Ok(None),
            Some(v) => v
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<u64>().ok()?, n.parse::<u64>().ok()?)))
                .filter(|(i, n)| i < n)
                .map(|(index, count)| Some(crate::engine::plan::Shard { index, count }))
                .ok_or_else(|| format!("bad {SHARD_KEY} `{v}` in its fingerprint")),
            None => Err(format!("its fingerprint has no {SHARD_KEY}")),
        }
    }

    /// A copy without the checksum lines.
    pub fn without_checksums(&self) -> Self {
        Self {
            lines: self
                .lines
                .iter()
                .filter(|(k, _)| !k.starts_with(FILE_KEY_PREFIX))
                .cloned()
                .collect(),
        }
    }

    /// Whether the fingerprint records checksums.
    pub fn has_checksums(&self) -> bool {
        self.lines
            .iter()
            .any(|(k, _)| k.starts_with(FILE_KEY_PREFIX))
    }

    /// A copy with `key` set to `value`.
    pub fn with(&self, key: &str, value: &str) -> Self {
        let mut f = self.clone();
        for (k, v) in &mut f.lines {
            if k == key {
                *v = value.to_string();
            }
        }
        f
    }

    /// The keys that differ between `self` (`a_name`) and `other` (`b_name`), ignoring the
    /// keys in `ignore`, one line each (`key: X in a, Y in b`), at most `limit` lines plus a
    /// count of the rest.
    pub fn diff(
        &self,
        other: &Self,
        a_name: &str,
        b_name: &str,
        ignore: &[&str],
        limit: usize,
    ) -> Vec<String> {
        let a: BTreeMap<&str, &str> = self
            .lines
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let b: BTreeMap<&str, &str> = other
            .lines
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut keys: Vec<&str> = self.lines.iter().map(|(k, _)| k.as_str()).collect();
        for (k, _) in &other.lines {
            if !a.contains_key(k.as_str()) {
                keys.push(k);
            }
        }
        let mut out = Vec::new();
        let mut more = 0usize;
        for k in keys {
            if ignore.contains(&k) || k.starts_with(FILE_KEY_PREFIX) {
                continue;
            }
            let (x, y) = (a.get(k), b.get(k));
            if x == y {
                continue;
            }
            if out.len() == limit {
                more += 1;
                continue;
            }
            out.push(format!(
                "{k}: {} {a_name}, {} {b_name}",
                x.map(|v| format!("`{v}`"))
                    .unwrap_or_else(|| "absent".into()),
                y.map(|v| format!("`{v}`"))
                    .unwrap_or_else(|| "absent".into()),
            ));
        }
        if more > 0 {
            out.push(format!("... and {more} more"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_diff_names_the_key() {
        let a = Fingerprint {
            lines: vec![
                ("tool.version".into(), "1".into()),
                ("scenario.x.model.lr".into(), "0.05".into()),
            ],
        };
        assert_eq!(Fingerprint::parse(&a.to_text()), Some(a.clone()));
        let b = a.with("scenario.x.model.lr", "0.5");
        let d = b.diff(&a, "now", "in the folder", &[], 10);
        assert_eq!(d, ["scenario.x.model.lr: `0.5` now, `0.05` in the folder"]);
        assert!(a
            .diff(&b, "a", "b", &["scenario.x.model.lr"], 10)
            .is_empty());
    }
}
