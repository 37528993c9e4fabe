//! A hint on Ctrl-C (SIGINT) or SIGTERM during a sweep: the folder is kept and `--resume`
//! continues it. The handler only writes a prepared message to stderr and exits with
//! 128 + the signal number (both async-signal-safe calls); the lock it leaves behind is stale
//! and taken over by the next writer (see [`crate::lock`]).

#[cfg(unix)]
mod imp {
    use std::sync::OnceLock;

    static MESSAGE: OnceLock<Vec<u8>> = OnceLock::new();

    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
        fn write(fd: i32, buf: *const u8, count: usize) -> isize;
        fn _exit(status: i32) -> !;
    }

    extern "C" fn on_signal(sig: i32) {
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

/// Prints `message` to stderr if the process is interrupted from now on (once per process).
pub fn hint_on_interrupt(message: String) {
    #[cfg(unix)]
    imp::install(message);
    #[cfg(not(unix))]
    let _ = message;
}
