//! A hint on Ctrl-C (SIGINT) or SIGTERM during a sweep: the folder is kept and `--resume`
//! continues it. The handler only writes a prepared message to stderr and exits with
//! 128 + the signal number (both async-signal-safe calls). Before it exits it removes the
//! folder's lock if the lock still holds this writer's token (open, read, close and unlink
//! are async-signal-safe too), so that a retry on another host need not wait for the lease
//! (see [`crate::sweepdir::lock`]).

#[cfg(unix)]
mod imp {
    use std::sync::OnceLock;

    static MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();
    /// The held lock's path (NUL-terminated) and its token.
    static LOCK: OnceLock<(std::ffi::CString, Vec<u8>)> = OnceLock::new();

    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        fn open(path: *const std::ffi::c_char, flags: i32, ...) -> i32;
        fn read(fd: i32, buf: *mut u8, count: usize) -> isize;
        fn close(fd: i32) -> i32;
        fn unlink(path: *const std::ffi::c_char) -> i32;
        fn _exit(status: i32) -> !;
    }

    pub fn set_lock(path: &std::path::Path, token: &str) {
        use std::os::unix::ffi::OsStrExt;
        if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) {
            let _ = LOCK.set((c, format!("token={token} ").into_bytes()));
        }
    }

    /// Removes the lock if it holds this writer's token: only async-signal-safe calls and
    /// a fixed stack buffer.
    fn release_lock() {
        let Some((path, token)) = LOCK.get() else {
            return;
        };
        let mut buf = [0u8; 512];
        // SAFETY: open/read/close/unlink are async-signal-safe; `path` is NUL-terminated and
        // lives for the whole process; `buf` is a local buffer of the length passed.
        unsafe {
            let fd = open(path.as_ptr(), 0); // O_RDONLY
            if fd < 0 {
                return;
            }
            let n = read(fd, buf.as_mut_ptr(), buf.len());
            close(fd);
            if n > 0
                && buf[..n as usize]
                    .windows(token.len())
                    .any(|w| w == &token[..])
            {
                unlink(path.as_ptr());
            }
        }
    }

    extern "C" fn on_signal(sig: i32) {
        release_lock();
        if let Some(m) = MESSAGE.get() {
            // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is immutable
            // and lives for the whole process.
            unsafe {
                write(2, m.as_ptr(), m.len());
            }
        }
        // SAFETY: see above.
        unsafe { _exit(128 + sig) }
    }

    pub fn install(message: String) {
        if MESSAGE.set(message.into_bytes()).is_ok() {
            // SAFETY: installs a handler that only calls async-signal-safe functions.
            // SIGINT = 2 and SIGTERM = 15 on Linux and macOS.
            unsafe {
                signal(2, on_signal as extern "C" fn(i32) as usize);
                signal(15, on_signal as extern "C" fn(i32) as usize);
            }
        }
    }
}

/// Has the signal handler remove the lock at `path` (if it still holds `token`) when the
/// process is interrupted (the first lock of the process).
pub fn release_on_interrupt(path: &std::path::Path, token: &str) {
    #[cfg(unix)]
    imp::set_lock(path, token);
    #[cfg(not(unix))]
    let _ = (path, token);
}

/// Prints `message` to stderr if the process is interrupted from now on (once per process).
pub fn hint_on_interrupt(message: String) {
    #[cfg(unix)]
    imp::install(message);
    #[cfg(not(unix))]
    let _ = message;
}
