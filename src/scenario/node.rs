//! Typed reading of a TOML table with key paths: every getter knows the path of the key it
//! reads (`layers[2].parallel`), so every error names the file, the key and what is allowed.
//!
//! A `[[params]]` entry is applied as a patch over the file before it is read (see
//! [`super::params`]); [`Ctx::remap`] turns the path of a patched key back into the path the
//! user wrote (`params[1].head.bias`).

use std::collections::BTreeMap;

use crate::sys::error::InputError;

/// A dim's value: one size, or a leading shape that splices into shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimValue {
    /// One size.
    Int(usize),
    /// A list of sizes.
    List(Vec<usize>),
}

/// Largest size a dim or shape entry may have.
pub const MAX_SIZE: usize = 1 << 20;

/// The file being read and where its patched keys came from.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The file name, for errors.
    pub file: String,
    /// `(path in the patched file, path the user wrote)`, most specific first.
    pub remap: Vec<(String, String)>,
    /// The parametrization being read, named in errors when the file has several.
    pub param: Option<String>,
}

impl Ctx {
    /// A context without patches.
    pub fn new(file: &str) -> Self {
        Self {
            file: file.to_string(),
            remap: Vec::new(),
            param: None,
        }
    }

    /// The path the user wrote for `path`.
    pub fn user_path(&self, path: &str) -> String {
        for (patched, user) in &self.remap {
            if path == patched {
                return user.clone();
            }
            if let Some(rest) = path.strip_prefix(patched.as_str()) {
                if rest.starts_with('.') || rest.starts_with('[') {
                    return format!("{user}{rest}");
                }
            }
        }
        path.to_string()
    }

    /// An error at `path`.
    pub fn err(&self, path: &str, msg: impl Into<String>) -> InputError {
        let mut msg = msg.into();
        if let Some(id) = &self.param {
            msg = format!("{msg} (in parametrization `{id}`)");
        }
        InputError::config(&self.file, self.user_path(path), msg)
    }
}

/// The TOML type name of a value, for errors.
pub fn type_name(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// A table being read at a key path.
pub struct Obj<'a> {
    /// Context.
    pub ctx: &'a Ctx,
    /// The table's own path (`""` for the document).
    pub path: String,
    /// The table.
    pub table: &'a toml::Table,
}

impl<'a> Obj<'a> {
    /// Reads `table` at `path`, refusing keys outside `allowed`.
    pub fn new(
        ctx: &'a Ctx,
        path: impl Into<String>,
        table: &'a toml::Table,
        allowed: &[&str],
    ) -> Result<Self, InputError> {
        let o = Self {
            ctx,
            path: path.into(),
            table,
        };
        for k in table.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(o.err(
                    k,
                    format!(
                        "unknown key `{k}`; allowed keys here: {}",
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(o)
    }

    /// The path of `key` in this table.
    pub fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error at `key`.
    pub fn err(&self, key: &str, msg: impl Into<String>) -> InputError {
        self.ctx.err(&self.key_path(key), msg)
    }

    /// Whether `key` is present.
    pub fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    fn wrong(&self, key: &str, v: &toml::Value, want: &str) -> InputError {
        self.err(
            key,
            format!("{} is not allowed; allowed: {want}", type_name(v)),
        )
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>, InputError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.wrong(key, v, "a string")),
        }
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&'a str, InputError> {
        self.opt_str(key)?
            .ok_or_else(|| self.err(key, format!("`{key}` is required here")))
    }

    /// A required name (letters, digits, `-`, `_`; with `dots`, also `.`).
    pub fn name(&self, key: &str, dots: bool) -> Result<&'a str, InputError> {
        let s = self.str(key)?;
        check_name(self, key, s, dots)?;
        Ok(s)
    }

    /// One of `allowed`, or `default` when absent.
    pub fn choice(
        &self,
        key: &str,
        allowed: &[&'static str],
        default: &'static str,
    ) -> Result<&'static str, InputError> {
        match self.opt_str(key)? {
            None => Ok(default),
            Some(s) => allowed.iter().copied().find(|a| *a == s).ok_or_else(|| {
                self.err(
                    key,
                    format!("`{s}` is not allowed; allowed: {}", allowed.join(", ")),
                )
            }),
        }
    }

    /// A required choice.
    pub fn req_choice(
        &self,
        key: &str,
        allowed: &[&'static str],
    ) -> Result<&'static str, InputError> {
        if !self.has(key) {
            return Err(self.err(
                key,
                format!("`{key}` is required here; allowed: {}", allowed.join(", ")),
            ));
        }
        self.choice(key, allowed, "")
    }

    /// An optional boolean.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, InputError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, v, "true, false")),
        }
    }

    /// A boolean with a default.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, InputError> {
        Ok(self.opt_bool(key)?.unwrap_or(default))
    }

    /// An optional integer in `lo..=hi`.
    pub fn opt_int(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, InputError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Integer(i)) => {
                if *i < lo || *i > hi {
                    Err(self.err(key, format!("{i} is out of range; allowed: {lo}..={hi}")))
                } else {
                    Ok(Some(*i))
                }
            }
            Some(v) => Err(self.wrong(key, v, &format!("an integer in {lo}..={hi}"))),
        }
    }

    /// An integer in `lo..=hi` with a default.
    pub fn int(&self, key: &str, lo: i64, hi: i64, default: i64) -> Result<i64, InputError> {
        Ok(self.opt_int(key, lo, hi)?.unwrap_or(default))
    }

    /// A required integer in `lo..=hi`.
    pub fn req_int(&self, key: &str, lo: i64, hi: i64) -> Result<i64, InputError> {
        self.opt_int(key, lo, hi)?.ok_or_else(|| {
            self.err(
                key,
                format!("`{key}` is required here; allowed: an integer in {lo}..={hi}"),
            )
        })
    }

    /// An optional finite number (integers are taken as numbers) satisfying `ok`, whose
    /// range `allowed` describes.
    pub fn opt_float(
        &self,
        key: &str,
        ok: impl Fn(f64) -> bool,
        allowed: &str,
    ) -> Result<Option<f64>, InputError> {
        let v = match self.table.get(key) {
            None => return Ok(None),
            Some(toml::Value::Float(f)) => *f,
            Some(toml::Value::Integer(i)) => *i as f64,
            Some(v) => return Err(self.wrong(key, v, allowed)),
        };
        if !(v.is_finite() && ok(v)) {
            return Err(self.err(
                key,
                format!(
                    "{} is not allowed; allowed: {allowed}",
                    crate::check::python_repr::py_repr(v)
                ),
            ));
        }
        Ok(Some(v))
    }

    /// A number with a default.
    pub fn float(
        &self,
        key: &str,
        ok: impl Fn(f64) -> bool,
        allowed: &str,
        default: f64,
    ) -> Result<f64, InputError> {
        Ok(self.opt_float(key, ok, allowed)?.unwrap_or(default))
    }

    /// A required number.
    pub fn req_float(
        &self,
        key: &str,
        ok: impl Fn(f64) -> bool,
        allowed: &str,
    ) -> Result<f64, InputError> {
        self.opt_float(key, ok, allowed)?
            .ok_or_else(|| self.err(key, format!("`{key}` is required here; allowed: {allowed}")))
    }

    /// An optional sub-table, read with `allowed` keys.
    pub fn opt_table(&self, key: &str, allowed: &[&str]) -> Result<Option<Obj<'a>>, InputError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::Table(t)) => {
                Ok(Some(Obj::new(self.ctx, self.key_path(key), t, allowed)?))
            }
            Some(v) => Err(self.wrong(key, v, "a table")),
        }
    }

    /// An array of tables (absent: empty), each read with `allowed` keys.
    pub fn tables(&self, key: &str, allowed: &[&str]) -> Result<Vec<Obj<'a>>, InputError> {
        let arr = match self.table.get(key) {
            None => return Ok(Vec::new()),
            Some(toml::Value::Array(a)) => a,
            Some(v) => return Err(self.wrong(key, v, "an array of tables ([[...]])")),
        };
        let mut out = Vec::new();
        for (i, v) in arr.iter().enumerate() {
            let path = format!("{}[{i}]", self.key_path(key));
            match v {
                toml::Value::Table(t) => out.push(Obj::new(self.ctx, path, t, allowed)?),
                v => {
                    return Err(self.ctx.err(
                        &path,
                        format!("{} is not allowed; allowed: a table", type_name(v)),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// An optional list of strings.
    pub fn opt_strings(&self, key: &str) -> Result<Option<Vec<&'a str>>, InputError> {
        let arr = match self.table.get(key) {
            None => return Ok(None),
            Some(toml::Value::Array(a)) => a,
            Some(v) => return Err(self.wrong(key, v, "a list of strings")),
        };
        let mut out = Vec::new();
        for (i, v) in arr.iter().enumerate() {
            match v {
                toml::Value::String(s) => out.push(s.as_str()),
                v => {
                    return Err(self.ctx.err(
                        &format!("{}[{i}]", self.key_path(key)),
                        format!("{} is not allowed; allowed: a string", type_name(v)),
                    ))
                }
            }
        }
        Ok(Some(out))
    }

    /// A size: an integer in 1..=[`MAX_SIZE`] or the name of an integer dim.
    pub fn opt_size(
        &self,
        key: &str,
        dims: &BTreeMap<String, DimValue>,
    ) -> Result<Option<usize>, InputError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(v) => size_value(self.ctx, &self.key_path(key), v, dims).map(Some),
        }
    }

    /// A required size.
    pub fn size(&self, key: &str, dims: &BTreeMap<String, DimValue>) -> Result<usize, InputError> {
        self.opt_size(key, dims)?.ok_or_else(|| {
            self.err(
                key,
                format!(
                    "`{key}` is required here; allowed: an integer in 1..={MAX_SIZE} or a dim ({})",
                    dim_names(dims)
                ),
            )
        })
    }

    /// A required shape: a list of sizes and dim names (list dims splice).
    pub fn shape(
        &self,
        key: &str,
        dims: &BTreeMap<String, DimValue>,
    ) -> Result<Vec<usize>, InputError> {
        let path = self.key_path(key);
        let arr = match self.table.get(key) {
            None => {
                return Err(self.err(
                    key,
                    "`shape` is required here; allowed: a list of sizes and dim names",
                ))
            }
            Some(toml::Value::Array(a)) => a,
            Some(v) => return Err(self.wrong(key, v, "a list of sizes and dim names")),
        };
        let mut out = Vec::new();
        for (i, v) in arr.iter().enumerate() {
            let p = format!("{path}[{i}]");
            match v {
                toml::Value::String(s) => match dims.get(s.as_str()) {
                    Some(DimValue::Int(n)) => out.push(*n),
                    Some(DimValue::List(l)) => out.extend_from_slice(l),
                    None => return Err(unknown_dim(self.ctx, &p, s, dims)),
                },
                v => out.push(size_value(self.ctx, &p, v, dims)?),
            }
        }
        if out.is_empty() || out.len() > 6 {
            return Err(self.err(
                key,
                format!(
                    "a shape of {} dims is not allowed; allowed: 1 to 6 dims",
                    out.len()
                ),
            ));
        }
        Ok(out)
    }
}

fn dim_names(dims: &BTreeMap<String, DimValue>) -> String {
    if dims.is_empty() {
        "none defined in [dims]".to_string()
    } else {
        dims.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

fn unknown_dim(ctx: &Ctx, path: &str, name: &str, dims: &BTreeMap<String, DimValue>) -> InputError {
    ctx.err(
        path,
        format!(
            "unknown dim `{name}`; allowed: an integer or a dim of [dims] ({})",
            dim_names(dims)
        ),
    )
}

/// One size at `path`: an integer in 1..=[`MAX_SIZE`] or the name of an integer dim.
pub fn size_value(
    ctx: &Ctx,
    path: &str,
    v: &toml::Value,
    dims: &BTreeMap<String, DimValue>,
) -> Result<usize, InputError> {
    match v {
        toml::Value::Integer(i) if (1..=MAX_SIZE as i64).contains(i) => Ok(*i as usize),
        toml::Value::Integer(i) => Err(ctx.err(
            path,
            format!("{i} is out of range; allowed: 1..={MAX_SIZE}"),
        )),
        toml::Value::String(s) => match dims.get(s.as_str()) {
            Some(DimValue::Int(n)) => Ok(*n),
            Some(DimValue::List(l)) => Err(ctx.err(
                path,
                format!(
                    "dim `{s}` is the list {l:?}, which is not allowed here; allowed: an integer or an integer dim"
                ),
            )),
            None => Err(unknown_dim(ctx, path, s, dims)),
        },
        v => Err(ctx.err(
            path,
            format!(
                "{} is not allowed; allowed: an integer in 1..={MAX_SIZE} or a dim name",
                type_name(v)
            ),
        )),
    }
}

/// Checks a name at `key`: 1 to 64 letters, digits, `-`, `_` (and `.` when `dots`).
pub fn check_name(o: &Obj<'_>, key: &str, s: &str, dots: bool) -> Result<(), InputError> {
    if s.len() > 64 {
        return Err(o.err(
            key,
            format!(
                "a name of {} characters is not allowed; allowed: at most 64",
                s.len()
            ),
        ));
    }
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || (dots && c == '.'));
    if !ok {
        let extra = if dots { ", '_' and '.'" } else { " and '_'" };
        return Err(o.err(
            key,
            format!("name `{s}` is not allowed; allowed: 1 to 64 letters, digits, '-'{extra}"),
        ));
    }
    Ok(())
}
