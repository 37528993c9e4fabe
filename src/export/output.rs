//! Safe output opening, shared by every command that writes a file.
//!
//! Rules (the same for `--out FILE`, `--markdown FILE` and every file inside an output folder):
//! - `-` means stdout.
//! - A symlink is followed (to any depth, up to 40 links): the file it points to is written,
//!   the link itself stays.
//! - A regular file, or a path that does not exist yet, is written atomically: a temporary
//!   file beside the (resolved) target, synced, then renamed over it. A reader never sees a
//!   half-written file.
//! - Anything else that exists (a FIFO, a character or block device such as `/dev/null`) is
//!   opened for writing in place and written; it is never removed or replaced.
//! - A folder given as a file path is refused, before any work when the command checks its
//!   outputs first with [`check`].

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::error::InputError;

/// Where the bytes of one output go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Standard output (`-`).
    Stdout,
    /// An existing FIFO or device, written in place.
    InPlace(PathBuf),
    /// A regular file or a new path (symlinks already followed), written atomically.
    Atomic(PathBuf),
}

/// Follows symlinks from `path` to the path that is really written; `Ok(None)` when nothing
/// exists there (a new file, possibly the dangling target of a link).
fn resolve_links(path: &Path) -> anyhow::Result<(PathBuf, Option<std::fs::Metadata>)> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((p, None)),
            Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", p.display())),
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&p)
                    .with_context(|| format!("cannot read the symlink {}", p.display()))?;
                p = if link.is_absolute() {
                    link
                } else {
                    p.parent().unwrap_or(Path::new(".")).join(link)
                };
            }
            Ok(m) => return Ok((p, Some(m))),
        }
    }
    anyhow::bail!("{}: too many levels of symbolic links", path.display())
}

/// Decides how `path` is written, naming `flag` in errors: a folder is refused.
pub fn target(path: &Path, flag: &str) -> anyhow::Result<Target> {
    if path.as_os_str() == "-" {
        return Ok(Target::Stdout);
    }
    if path.as_os_str().is_empty() {
        return Err(InputError::flag(flag, "empty path; give a file path or - for stdout").into());
    }
    let (real, meta) = resolve_links(path)?;
    match meta {
        None => Ok(Target::Atomic(real)),
        Some(m) if m.is_dir() => Err(InputError::flag(
            flag,
            format!(
                "{} is a folder; give a file path (or - for stdout)",
                path.display()
            ),
        )
        .into()),
        Some(m) if m.is_file() => Ok(Target::Atomic(real)),
        Some(_) => Ok(Target::InPlace(real)),
    }
}

/// Checks before any work that `path` can be written: not a folder, and for a file written
/// atomically, its folder exists (it is created) and is writable.
pub fn check(path: &Path, flag: &str) -> anyhow::Result<Target> {
    let t = target(path, flag)?;
    if let Target::Atomic(p) = &t {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        super::prepare_dir(dir, flag)?;
    }
    Ok(t)
}

/// Writes `bytes` to `path` under the rules of this module.
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    match target(path, "output")? {
        Target::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)
                .and_then(|()| out.flush())
                .context("cannot write to stdout")
        }
        Target::InPlace(p) => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .with_context(|| format!("cannot open {} for writing", p.display()))?;
            f.write_all(bytes)
                .and_then(|()| f.flush())
                .with_context(|| format!("cannot write {}", p.display()))
        }
        Target::Atomic(p) => atomic(&p, bytes),
    }
}

/// The temporary file [`write`] uses for `path` in this process.
pub fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    dir.join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Whether `file_name` is a temporary file of [`write`] for the file named `name`.
pub fn is_temp_of(file_name: &str, name: &str) -> bool {
    file_name
        .strip_prefix(&format!(".{name}.tmp-"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = temp_path(path);
    let result = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_only_for_their_file() {
        assert!(is_temp_of(".summary.csv.tmp-123", "summary.csv"));
        assert!(!is_temp_of(".summary.csv.tmp-", "summary.csv"));
        assert!(!is_temp_of(".summary.csv.tmp-12x", "summary.csv"));
        assert!(!is_temp_of(".seeds.csv.tmp-1", "summary.csv"));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.txt");
        std::fs::write(&real, "old").unwrap();
        let link = d.path().join("link.txt");
        std::os::unix::fs::symlink("real.txt", &link).unwrap();
        write(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn a_folder_is_refused_naming_the_flag() {
        let d = tempfile::tempdir().unwrap();
        let e = check(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("--out") && e.contains("is a folder"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn devices_are_written_in_place() {
        assert_eq!(
            target(Path::new("/dev/null"), "--out").unwrap(),
            Target::InPlace("/dev/null".into())
        );
        write(Path::new("/dev/null"), b"x").unwrap();
        assert!(!std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_file());
    }
}
