//! Safe output opening, shared by every command that writes a file.
//!
//! Rules (the same for `--out FILE`, `--markdown FILE` and every file inside an output folder):
//! - `-` means stdout.
//! - A symlink is followed (to any depth, up to 40 links): the file it points to is written,
//!   the link itself stays.
//! - A regular file, or a path that does not exist yet, is written atomically: a temporary
//!   file beside the (resolved) target, synced, then renamed over it. A reader never sees a
//!   half-written file. The temporary file has an unpredictable name
//!   (`.NAME.tmp-PID-RANDOM`) and is created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a link
//!   planted in its place is never written through; the rename goes ahead only over a
//!   regular file or nothing.
//! - Anything else that exists (a FIFO, a character or block device such as `/dev/null`) is
//!   opened for writing in place and written; it is never removed or replaced.
//! - A folder given as a file path is refused, before any work when the command checks its
//!   outputs first with [`check`].

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::sys::error::InputError;

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
        prepare_dir(dir, flag)?;
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

/// A random 64-bit value from the OS's hash keys: for unpredictable file names, never for
/// anything that reaches a result.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// Creates `path` for writing with `O_CREAT | O_EXCL` (and `O_NOFOLLOW` on Linux): it fails if
/// anything, a symlink included, is already there.
pub fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    o.open(path)
}

/// Opens a file seedsweep owns in a sweep folder (a `.partial` file): created or truncated,
/// or (`append`) opened at its end; a symlink there is refused (`O_NOFOLLOW` on Linux), never
/// followed.
pub fn open_owned(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true).write(true).append(append).truncate(!append);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    o.open(path)
}

/// A new temporary file beside `path`, `.NAME.tmp-PID-RANDOM`, created exclusively (tries a
/// few random names if one is taken).
pub fn temp_file(path: &Path) -> anyhow::Result<(std::fs::File, PathBuf)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let mut last = None;
    for _ in 0..8 {
        let tmp = dir.join(format!(
            ".{name}.tmp-{}-{:016x}",
            std::process::id(),
            random_u64()
        ));
        match create_new(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", tmp.display())),
        }
    }
    Err(last.expect("eight tries were made"))
        .with_context(|| format!("cannot create a temporary file beside {}", path.display()))
}

/// Whether `file_name` is a temporary file of [`write`] for the file named `name`
/// (`.NAME.tmp-PID-RANDOM`, or `.NAME.tmp-PID` from older versions).
pub fn is_temp_of(file_name: &str, name: &str) -> bool {
    let Some(rest) = file_name.strip_prefix(&format!(".{name}.tmp-")) else {
        return false;
    };
    let (pid, random) = match rest.split_once('-') {
        Some((p, r)) => (p, Some(r)),
        None => (rest, None),
    };
    !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && random.is_none_or(|r| r.len() == 16 && r.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)
        .with_context(|| format!("cannot write {}", f.tmp.display()))?;
    f.commit()
}

/// A file written piece by piece that appears at its path only whole: the pieces go to a
/// temporary file beside it ([`temp_file`]), which [`AtomicFile::commit`] syncs and renames
/// over the path (only over a regular file or nothing). Dropped uncommitted, the temporary
/// file is removed and the path is left as it was.
pub struct AtomicFile {
    f: std::io::BufWriter<std::fs::File>,
    tmp: PathBuf,
    path: PathBuf,
    done: bool,
}

impl AtomicFile {
    /// Starts the file that will appear at `path`.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let (f, tmp) = temp_file(path)?;
        Ok(Self {
            f: std::io::BufWriter::new(f),
            tmp,
            path: path.to_path_buf(),
            done: false,
        })
    }

    /// Flushes and syncs what was written and moves it to the path.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let (tmp, path) = (self.tmp.clone(), self.path.clone());
        self.f
            .flush()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        self.f
            .get_ref()
            .sync_all()
            .with_context(|| format!("cannot sync {}", tmp.display()))?;
        // Only over a regular file or nothing (a link or device put there meanwhile stays).
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.file_type().is_file() => anyhow::bail!(
                "{} is no longer a regular file (a link, FIFO, device or folder appeared \
                 there); not replacing it",
                path.display()
            ),
            _ => {}
        }
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        self.done = true;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.f.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.f.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Creates `dir` (and parents) and proves it is writable by creating and removing a probe
/// file, so that a bad `--out` fails before any work starts.
pub fn prepare_dir(dir: &Path, flag: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag}: cannot create directory {}", dir.display()))?;
    // An unpredictable name created exclusively: a link planted there is never followed.
    let probe = dir.join(format!(
        ".seedsweep-write-probe-{}-{:016x}",
        std::process::id(),
        random_u64()
    ));
    create_new(&probe)
        .with_context(|| format!("{flag}: directory {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to `path` under the rules of this module: atomically (a temporary file in the
/// same folder, synced, then renamed) where the target is a regular file or absent, following
/// symlinks, in place for a FIFO or device, to stdout for `-`. A reader never sees a
/// half-written file, and a link, FIFO or device is never replaced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_recognised_only_for_their_file() {
        assert!(is_temp_of(".summary.csv.tmp-123", "summary.csv"));
        assert!(is_temp_of(
            ".summary.csv.tmp-123-00ff00ff00ff00ff",
            "summary.csv"
        ));
        assert!(!is_temp_of(".summary.csv.tmp-123-00ff", "summary.csv"));
        assert!(!is_temp_of(
            ".summary.csv.tmp-123-00ff00ff00ff00fg",
            "summary.csv"
        ));
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

    #[cfg(unix)]
    #[test]
    fn temporary_names_are_unpredictable_and_links_there_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("summary.csv");
        let (_, a) = temp_file(&target).unwrap();
        let (_, b) = temp_file(&target).unwrap();
        assert_ne!(a, b);
        // A link planted where the old scheme put the temporary file is left alone.
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let old = d
            .path()
            .join(format!(".summary.csv.tmp-{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &old).unwrap();
        write(&target, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        // create_new and open_owned refuse a link.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link).is_err());
        #[cfg(target_os = "linux")]
        assert!(open_owned(&link, false).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
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
