//! Errors caused by user input. Each names the flag, or the file and key, and says what is
//! allowed. I/O errors travel as `anyhow` errors with context instead.

/// A bad flag value or a bad configuration entry.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A command-line flag with a value that cannot be used.
    #[error("invalid value for {flag}: {msg}")]
    Flag {
        /// The flag, spelled as on the command line (`--seeds`).
        flag: String,
        /// What is wrong and what is allowed.
        msg: String,
    },
    /// Work refused before it starts, with no flag or entry at fault (the machine's memory).
    #[error("{0}")]
    Refused(String),
    /// A configuration entry that cannot be used.
    #[error("{file}: key `{key}`: {msg}")]
    Config {
        /// The configuration file (or `built-in <name>`).
        file: String,
        /// The dotted key path (`profiles.cpu-fma.split`).
        key: String,
        /// What is wrong and what is allowed.
        msg: String,
    },
}

impl InputError {
    /// A flag error.
    pub fn flag(flag: &str, msg: impl Into<String>) -> Self {
        Self::Flag {
            flag: flag.into(),
            msg: msg.into(),
        }
    }
    /// A configuration error.
    pub fn config(file: &str, key: impl Into<String>, msg: impl Into<String>) -> Self {
        Self::Config {
            file: file.into(),
            key: key.into(),
            msg: msg.into(),
        }
    }
}

/// "`x` is not one of: a, b, c" — the standard wording for an unknown name.
pub fn unknown_name(kind: &str, name: &str, valid: &[&str]) -> String {
    format!(
        "unknown {kind} `{name}`; valid {kind}s: {}",
        valid.join(", ")
    )
}
