//! A lock file that stops two writers of one output folder.
//!
//! `DIR/.seedsweep.lock` is created exclusively (`O_EXCL`) and holds `pid host`. It is removed
//! when the writer finishes or fails. Stale-lock rule: a lock whose host is this machine and
//! whose process no longer exists (`/proc/PID` is gone; a writer killed with `kill -9` leaves
//! such a lock) is taken over. A lock of a live process, or of another host (a shared file
//! system), is respected: the error says which process holds it and to delete the file only
//! if no seedsweep runs there.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The lock's file name.
pub const FILE: &str = ".seedsweep.lock";

/// A held lock; dropping it releases the folder.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether the lock text names a process on this host that is gone.
fn is_stale(text: &str) -> bool {
    let mut it = text.split_whitespace();
    let (Some(pid), h) = (it.next().and_then(|p| p.parse::<u32>().ok()), it.next()) else {
        // Unreadable content: written by a writer killed between create and write.
        return text.trim().is_empty();
    };
    if h.unwrap_or("") != host() || !Path::new("/proc/self").exists() {
        return false;
    }
    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

impl Lock {
    /// Takes the lock of `dir` (which must exist), naming `flag` in the error.
    pub fn acquire(dir: &Path, flag: &str) -> anyhow::Result<Self> {
        let path = dir.join(FILE);
        for _ in 0..3 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    writeln!(f, "{} {}", std::process::id(), host())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    return Ok(Self { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    if is_stale(&text) {
                        // A dead writer's lock: take it over (the retry's create_new decides
                        // between two processes doing this at once).
                        let _ = std::fs::remove_file(&path);
                        continue;
                    }
                    anyhow::bail!(
                        "{flag}: {} is in use by another seedsweep (lock {} held by process {}); \
                         wait for it, or delete the lock if no seedsweep writes there",
                        dir.display(),
                        path.display(),
                        text.trim()
                    );
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("{flag}: cannot create {}", path.display()))
                }
            }
        }
        anyhow::bail!("{flag}: cannot take the lock {}", path.display())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_and_a_dead_ones_lock_is_taken_over() {
        let d = tempfile::tempdir().unwrap();
        let a = Lock::acquire(d.path(), "--out").unwrap();
        let e = Lock::acquire(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("in use by another seedsweep"), "{e}");
        drop(a);
        assert!(!d.path().join(FILE).exists());
        if Path::new("/proc/self").exists() {
            // PID 4194304 is above Linux's largest pid_max: no such process.
            std::fs::write(d.path().join(FILE), format!("4194304 {}\n", host())).unwrap();
            let _b = Lock::acquire(d.path(), "--out").unwrap();
        }
    }
}
