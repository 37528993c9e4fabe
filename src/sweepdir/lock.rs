//! A lock file that stops two writers of one output folder: a lease that the running writer
//! renews, so that a writer killed on any host (an OOM kill, a lost node, a pod retried on a
//! new hostname) cannot hold the folder forever.
//!
//! `DIR/.seedsweep.lock` is created exclusively (`O_EXCL`) and holds one line,
//! `pid=P host=H token=T renewed=K lease=L`: the writer's process and host, a random token,
//! a renewal count and the lease in seconds. While the writer lives, a background thread
//! rewrites the line with `renewed` one higher every `L / 4` seconds; it is removed when the
//! writer finishes or fails.
//!
//! The rule another writer applies to a lock it finds:
//! - **the same host and a process that is gone** (`/proc/P` missing; `kill -9`): stale at
//!   once, taken over;
//! - **the same host, a live process, and a line renewed less than `L` seconds ago** (file
//!   time against this host's clock): a live writer, refused at once;
//! - **anything else** (another host, or a live pid that may be another container's): the
//!   lock is watched for `L` seconds. Any change of its line is a live writer (refused); a
//!   line unchanged for a whole lease, three renewals missed, is a dead writer's, and is
//!   taken over. No clock is compared across hosts, so this holds on shared file systems.
//!
//! A lock written by a seedsweep from before leases (`P H` only, never renewed) is treated as
//! a lease of [`DEFAULT_LEASE_SECS`], except that on the same host a live process keeps it.
//!
//! Two live writers never share a folder: a renewing writer's line changes within every
//! lease, so it is never taken over. A writer that could not renew for a whole lease (stopped
//! with SIGSTOP, say) may have lost its lock; its renewal thread checks its token before each
//! renewal and, finding another's, ends the process at once (exit code 1) with a message.
//!
//! The lease is [`DEFAULT_LEASE_SECS`] seconds, or `SEEDSWEEP_LOCK_LEASE` (whole seconds,
//! 1 to 86,400) where set; a taker waits for the lease the lock records, not its own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::sys::error::InputError;

/// The lock's file name.
pub const FILE: &str = ".seedsweep.lock";

/// The lease, in seconds, when `SEEDSWEEP_LOCK_LEASE` is not set.
pub const DEFAULT_LEASE_SECS: u64 = 60;

/// The environment variable that sets the lease.
pub const LEASE_ENV: &str = "SEEDSWEEP_LOCK_LEASE";

/// A held lock; dropping it stops the renewals and releases the folder.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
    token: String,
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The lease in force: `SEEDSWEEP_LOCK_LEASE`, or [`DEFAULT_LEASE_SECS`].
pub fn lease_secs() -> Result<u64, InputError> {
    match std::env::var(LEASE_ENV) {
        Err(_) => Ok(DEFAULT_LEASE_SECS),
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|s| (1..=86_400).contains(s))
            .ok_or_else(|| {
                InputError::flag(
                    LEASE_ENV,
                    format!("`{v}` is not allowed; give whole seconds from 1 to 86400"),
                )
            }),
    }
}

/// What a lock's line says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    pid: Option<u32>,
    host: String,
    token: Option<String>,
    lease: Option<u64>,
}

impl Holder {
    /// Parses `pid=P host=H token=T renewed=K lease=L`, or the older `P H`.
    fn parse(text: &str) -> Self {
        let mut h = Holder {
            pid: None,
            host: String::new(),
            token: None,
            lease: None,
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.first().is_some_and(|w| !w.contains('=')) {
            h.pid = words.first().and_then(|p| p.parse().ok());
            h.host = words.get(1).unwrap_or(&"").to_string();
            return h;
        }
        for w in words {
            match w.split_once('=') {
                Some(("pid", v)) => h.pid = v.parse().ok(),
                Some(("host", v)) => h.host = v.to_string(),
                Some(("token", v)) => h.token = Some(v.to_string()),
                Some(("lease", v)) => h.lease = v.parse().ok().filter(|s| *s >= 1),
                _ => {}
            }
        }
        h
    }

    fn describe(&self) -> String {
        format!(
            "process {} on host {}",
            self.pid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "?".into()),
            if self.host.is_empty() {
                "?"
            } else {
                &self.host
            }
        )
    }
}

/// What to do with a lock found in place, judged without waiting.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A dead writer's: take it over now.
    Stale,
    /// A live writer's: refuse now.
    Live,
    /// Undecided: watch it for a lease.
    Watch,
}

/// Whether process `pid` exists and is not a zombie (a killed writer whose parent has not
/// reaped it yet, as a slow init in a container leaves it for seconds).
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name's closing parenthesis.
        Ok(stat) => !matches!(
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// The verdict on a lock with line `text`, last modified `age` ago on this host's clock.
fn judge(text: &str, age: Option<Duration>, here: &str, lease: u64) -> Verdict {
    if text.trim().is_empty() {
        // A writer killed between create and write (it writes one short line at once).
        return Verdict::Stale;
    }
    let h = Holder::parse(text);
    let procfs = Path::new("/proc/self").exists();
    if h.host == here && procfs {
        if let Some(pid) = h.pid {
            if pid != std::process::id() && !pid_alive(pid) {
                return Verdict::Stale;
            }
            match h.token {
                // A writer from before leases never renews: its live process keeps it.
                None => return Verdict::Live,
                Some(_) => {
                    let lease = Duration::from_secs(h.lease.unwrap_or(lease));
                    if age.is_some_and(|a| a < lease) {
                        return Verdict::Live;
                    }
                }
            }
        }
    }
    Verdict::Watch
}

fn read_lock(path: &Path) -> Option<(String, Option<Duration>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    Some((text, age))
}

/// Removes the lock at `path` if it still holds `text` (another taker may have replaced it).
fn remove_if_unchanged(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        let _ = std::fs::remove_file(path);
    }
}

fn line(pid: u32, host: &str, token: &str, renewed: u64, lease: u64) -> String {
    format!("pid={pid} host={host} token={token} renewed={renewed} lease={lease}\n")
}

/// What a renewal found.
#[derive(Debug, PartialEq, Eq)]
enum Renewal {
    /// The line was rewritten with the next count (or the removed lock created again).
    Renewed,
    /// Another writer's lock is in its place.
    Lost,
    /// The lock could not be read or written this time (an I/O error); try again later.
    Failed,
}

/// Rewrites the lock with the next renewal count if it still holds `token`; a lock removed
/// meanwhile (by hand) is created again, exclusively, so that nobody else takes it.
fn renew(path: &Path, token: &str, renewed: u64, lease: u64) -> Renewal {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut f) => {
                    let _ = f.write_all(
                        line(std::process::id(), &host(), token, renewed, lease).as_bytes(),
                    );
                    Renewal::Renewed
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Renewal::Lost,
                Err(_) => Renewal::Failed,
            };
        }
        Err(_) => return Renewal::Failed,
    };
    if Holder::parse(&text).token.as_deref() != Some(token) {
        return Renewal::Lost;
    }
    match std::fs::OpenOptions::new().write(true).open(path) {
        // The line only grows (the count has as many digits or more): no truncation needed.
        Ok(mut f) => {
            match f.write_all(line(std::process::id(), &host(), token, renewed, lease).as_bytes()) {
                Ok(()) => Renewal::Renewed,
                Err(_) => Renewal::Failed,
            }
        }
        Err(_) => Renewal::Failed,
    }
}

fn new_token() -> String {
    format!("{:016x}", crate::sys::atomic_write::random_u64())
}

impl Lock {
    /// Takes the lock of `dir` (which must exist), naming `flag` in the error; may wait up to
    /// a lease to decide whether a lock in place is a live writer's (see the module doc).
    pub fn acquire(dir: &Path, flag: &str) -> anyhow::Result<Self> {
        let lease = lease_secs()?;
        let path = dir.join(FILE);
        let here = host();
        for _ in 0..4 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    let token = new_token();
                    f.write_all(line(std::process::id(), &here, &token, 0, lease).as_bytes())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    drop(f);
                    crate::sys::interrupt::release_on_interrupt(&path, &token);
                    return Ok(Self::start(path, token, lease));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let Some((text, age)) = read_lock(&path) else {
                        continue; // released meanwhile
                    };
                    match judge(&text, age, &here, lease) {
                        Verdict::Stale => remove_if_unchanged(&path, &text),
                        Verdict::Live => return Err(in_use(flag, dir, &path, &text, None)),
                        Verdict::Watch => {
                            let held = Holder::parse(&text);
                            let wait = held.lease.unwrap_or(lease);
                            eprintln!(
                                "note: {} is locked by {}; waiting up to {wait} s for it to \
                                 renew its lease (a dead writer's lock is taken over then)",
                                dir.display(),
                                held.describe()
                            );
                            match watch(&path, &text, Duration::from_secs(wait)) {
                                Watched::Unchanged => remove_if_unchanged(&path, &text),
                                Watched::Gone => {}
                                Watched::Renewed => {
                                    return Err(in_use(flag, dir, &path, &text, Some(wait)))
                                }
                            }
                        }
                    }
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("{flag}: cannot create {}", path.display()))
                }
            }
        }
        anyhow::bail!(
            "{flag}: cannot take the lock {}: other writers keep taking it; wait for them to finish",
            path.display()
        )
    }

    fn start(path: PathBuf, token: String, lease: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let every = Duration::from_millis(lease * 1000 / 4);
        let (p, t, s) = (path.clone(), token.clone(), stop.clone());
        let renewer = std::thread::Builder::new()
            .name("seedsweep-lock".into())
            .spawn(move || {
                let mut renewed = 0u64;
                loop {
                    std::thread::park_timeout(every);
                    if s.load(Ordering::Acquire) {
                        return;
                    }
                    renewed += 1;
                    if renew(&p, &t, renewed, lease) == Renewal::Lost {
                        if s.load(Ordering::Acquire) {
                            return;
                        }
                        let who = std::fs::read_to_string(&p)
                            .map(|x| Holder::parse(&x).describe())
                            .unwrap_or_else(|_| "another writer".into());
                        eprintln!(
                            "error: lost the lock {} to {who}: this writer did not renew it for \
                             longer than its {lease} s lease (it was stopped or starved), so \
                             another took the folder over; stopping without writing more",
                            p.display()
                        );
                        std::process::exit(1);
                    }
                }
            })
            .ok();
        Self {
            path,
            token,
            stop,
            renewer,
        }
    }
}

/// What watching a lock for a lease saw.
#[derive(Debug, PartialEq, Eq)]
enum Watched {
    /// Its line changed: a live writer.
    Renewed,
    /// It was removed: its writer finished.
    Gone,
    /// The same line for the whole lease: a dead writer's.
    Unchanged,
}

fn watch(path: &Path, text: &str, lease: Duration) -> Watched {
    let start = Instant::now();
    let poll = (lease / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        match std::fs::read_to_string(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Watched::Gone,
            Ok(now) if now != text => return Watched::Renewed,
            _ => {}
        }
        if start.elapsed() >= lease {
            return Watched::Unchanged;
        }
        std::thread::sleep(poll);
    }
}

fn in_use(flag: &str, dir: &Path, path: &Path, text: &str, watched: Option<u64>) -> anyhow::Error {
    let h = Holder::parse(text);
    let seen = match watched {
        Some(s) => format!(" (it renewed its lease while watched for up to {s} s)"),
        None => String::new(),
    };
    anyhow::anyhow!(
        "{flag}: {} is in use by another seedsweep: {} holds its lock {}{seen}. Wait for it to \
         finish; if it was killed, its lock is taken over by the next run once it has gone \
         unrenewed for its lease",
        dir.display(),
        h.describe(),
        path.display()
    )
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.renewer.take() {
            h.thread().unpark();
            let _ = h.join();
        }
        // Only our own lock is removed (never one that another writer took over).
        if let Ok(text) = std::fs::read_to_string(&self.path) {
            if Holder::parse(&text).token.as_deref() == Some(self.token.as_str()) {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_and_a_dead_ones_lock_is_taken_over() {
        let d = tempfile::tempdir().unwrap();
        let a = Lock::acquire(d.path(), "--out").unwrap();
        let t = Instant::now();
        let e = Lock::acquire(d.path(), "--out").unwrap_err().to_string();
        assert!(e.contains("in use by another seedsweep"), "{e}");
        // A fresh lease of this host's live process is refused without watching it.
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(a);
        assert!(!d.path().join(FILE).exists());
        if Path::new("/proc/self").exists() {
            // PID 4194304 is above Linux's largest pid_max: no such process.
            std::fs::write(d.path().join(FILE), format!("4194304 {}\n", host())).unwrap();
            let _b = Lock::acquire(d.path(), "--out").unwrap();
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_zombie_writer_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let start = Instant::now();
        while pid_alive(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "child never exited"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "reaped too early"
        );
        child.wait().unwrap();
        assert!(pid_alive(std::process::id()));
    }

    #[test]
    fn lines_parse_in_both_formats() {
        let h = Holder::parse("pid=12 host=node-a token=ab12 renewed=7 lease=30\n");
        assert_eq!(h.pid, Some(12));
        assert_eq!(h.host, "node-a");
        assert_eq!(h.token.as_deref(), Some("ab12"));
        assert_eq!(h.lease, Some(30));
        let old = Holder::parse("4321 node-b\n");
        assert_eq!(
            (old.pid, old.host.as_str(), old.token, old.lease),
            (Some(4321), "node-b", None, None)
        );
        assert_eq!(
            Holder::parse("pid=1 host=x lease=0").lease,
            None,
            "a zero lease is no lease"
        );
    }

    #[test]
    fn the_rule_without_waiting() {
        let here = host();
        let me = std::process::id();
        let fresh = Some(Duration::from_secs(1));
        let old = Some(Duration::from_secs(7200));
        // Another host: never decided by clocks, always watched.
        let other = line(me, "some-other-host", "aa", 5, 60);
        assert_eq!(judge(&other, fresh, &here, 60), Verdict::Watch);
        assert_eq!(judge(&other, old, &here, 60), Verdict::Watch);
        assert_eq!(judge("", fresh, &here, 60), Verdict::Stale);
        if Path::new("/proc/self").exists() {
            // This host: a dead pid is stale at once; a live one with a fresh lease is live;
            // a live pid whose lease is long unrenewed is watched (a reused pid).
            assert_eq!(
                judge(&line(4194304, &here, "aa", 5, 60), fresh, &here, 60),
                Verdict::Stale
            );
            let parent = std::os::unix::process::parent_id();
            let live = line(parent, &here, "aa", 5, 60);
            assert_eq!(judge(&live, fresh, &here, 60), Verdict::Live);
            assert_eq!(judge(&live, old, &here, 60), Verdict::Watch);
            // Before leases: a live process keeps it, a dead one does not.
            assert_eq!(
                judge(&format!("{parent} {here}\n"), old, &here, 60),
                Verdict::Live
            );
            assert_eq!(
                judge(&format!("4194304 {here}\n"), old, &here, 60),
                Verdict::Stale
            );
        }
    }

    #[test]
    fn a_killed_writer_on_another_host_is_taken_over_after_its_lease() {
        let d = tempfile::tempdir().unwrap();
        // What a writer SIGKILLed on another host leaves: a lease of 1 s never renewed.
        std::fs::write(d.path().join(FILE), line(77, "pod-2-aaaaa", "dead", 4, 1)).unwrap();
        let t = Instant::now();
        let l = Lock::acquire(d.path(), "--out").unwrap();
        let waited = t.elapsed();
        // It watched for the lock's own lease (1 s) before taking it over, and no longer than
        // a few polls past it (generous for a loaded CI machine).
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        let text = std::fs::read_to_string(d.path().join(FILE)).unwrap();
        assert_eq!(
            Holder::parse(&text).token.as_deref(),
            Some(l.token.as_str())
        );
        drop(l);
        assert!(!d.path().join(FILE).exists());
    }

    #[test]
    fn a_live_writer_on_another_host_is_never_taken_over() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(FILE);
        // A 5 s lease renewed every 250 ms (more often than the quarter the rule needs): a taker
        // sees a change within about one renewal; the long lease keeps a stalled test thread on a
        // loaded machine from passing for a dead writer.
        std::fs::write(&path, line(77, "pod-2-bbbbb", "live", 0, 5)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (path.clone(), stop.clone());
        let other = std::thread::spawn(move || {
            let mut k = 0;
            while !s.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(250));
                k += 1;
                // In place, as `renew` writes (the line only grows): `fs::write` truncates
                // first, and a reader between its truncation and its write would see an empty
                // lock (a dead writer's, killed between create and write).
                let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.write_all(line(77, "pod-2-bbbbb", "live", k, 5).as_bytes())
                    .unwrap();
            }
        });
        for _ in 0..3 {
            let e = Lock::acquire(d.path(), "--out").unwrap_err().to_string();
            assert!(e.contains("in use by another seedsweep"), "{e}");
            assert!(e.contains("pod-2-bbbbb"), "{e}");
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(Holder::parse(&text).token.as_deref(), Some("live"));
        }
        stop.store(true, Ordering::Release);
        other.join().unwrap();
    }

    #[test]
    fn a_held_lock_is_renewed_and_only_its_own_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(FILE);
        std::fs::write(&path, line(std::process::id(), &host(), "mine", 0, 1)).unwrap();
        let l = Lock::start(path.clone(), "mine".into(), 1);
        let first = std::fs::read_to_string(&path).unwrap();
        // Renewals come every 250 ms; 10 s allows for a loaded machine.
        let start = Instant::now();
        let mut later = first.clone();
        while later == first && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
            later = std::fs::read_to_string(&path).unwrap();
        }
        assert_ne!(first, later, "no renewal within 10 s of a 1 s lease");
        assert_eq!(Holder::parse(&later).token.as_deref(), Some("mine"));
        // Another writer's lock in its place is left alone when this one is dropped (the
        // renewer stops first, so it cannot end the process here).
        l.stop.store(true, Ordering::Release);
        std::fs::write(&path, line(1, "elsewhere", "theirs", 0, 1)).unwrap();
        drop(l);
        assert!(path.exists());
        assert_eq!(renew(&path, "mine", 9, 1), Renewal::Lost);
        // A lock removed by hand is created again by its holder's next renewal.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(renew(&path, "mine", 10, 1), Renewal::Renewed);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(Holder::parse(&text).token.as_deref(), Some("mine"));
    }
}
