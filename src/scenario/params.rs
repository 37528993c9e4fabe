//! `[[params]]`: each entry is a patch over the file. A key names a dim (`hidden = 35`), a
//! layer or input (`head.bias = true`), a table (`parallel.zero_stage = 2`) or a check
//! (`checks.bias.optional = true`); the patched file is then read as a whole, and errors in
//! patched keys name the entry's key (`params[1].head.bias`).

use crate::sys::error::InputError;

use super::node::{check_name, Ctx, Obj};

/// Tables a params entry may patch key by key.
pub const PATCHABLE_TABLES: &[&str] = &["parallel", "train", "loss", "data", "init"];

/// One parametrization before parsing: its id, the patched document and its context.
#[derive(Debug, Clone)]
pub struct Patched {
    /// pytest id.
    pub id: String,
    /// The document with the entry applied.
    pub doc: toml::Table,
    /// Context, remapping patched keys to the entry's.
    pub ctx: Ctx,
}

fn names_of(doc: &toml::Table, array: &str) -> Vec<String> {
    match doc.get(array) {
        Some(toml::Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.get("name").and_then(|n| n.as_str()).map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// Merges `patch` into the table at `target` (`doc[table]` or `doc[array][index]`).
fn merge(
    dst: &mut toml::Table,
    patch: &toml::Table,
    dst_path: &str,
    user_path: &str,
    remap: &mut Vec<(String, String)>,
) {
    for (k, v) in patch {
        let dp = format!("{dst_path}.{k}");
        let up = format!("{user_path}.{k}");
        match (dst.get_mut(k), v) {
            (Some(toml::Value::Table(d)), toml::Value::Table(p)) => {
                merge(d, p, &dp, &up, remap);
            }
            _ => {
                dst.insert(k.clone(), v.clone());
                remap.push((dp, up));
            }
        }
    }
}

/// Applies every `[[params]]` entry of `doc` (the graph part of the file, `params` included)
/// and returns one patched document per parametrization; a file without `[[params]]` has one,
/// with id `default`.
pub fn apply(file: &str, doc: &toml::Table) -> Result<Vec<Patched>, InputError> {
    let ctx0 = Ctx::new(file);
    let mut base = doc.clone();
    let entries =
        match base.remove("params") {
            None => {
                return Ok(vec![Patched {
                    id: "default".into(),
                    doc: base,
                    ctx: ctx0,
                }])
            }
            Some(toml::Value::Array(a)) if !a.is_empty() => {
                crate::scenario::config::check_params_count(file, a.len())?;
                a
            }
            Some(_) => return Err(ctx0.err(
                "params",
                "must be a non-empty array of tables ([[params]] with an `id` each), or left out",
            )),
        };
    let dims: Vec<String> = match base.get("dims") {
        Some(toml::Value::Table(t)) => t.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let layers = names_of(&base, "layers");
    let inputs = names_of(&base, "inputs");
    let checks = names_of(&base, "checks");
    for d in &dims {
        if layers.contains(d) || inputs.contains(d) || PATCHABLE_TABLES.contains(&d.as_str()) {
            return Err(ctx0.err(
                &format!("dims.{d}"),
                format!("`{d}` also names a layer, an input or a table, so [[params]] could not tell which one `{d} = ...` sets; allowed: a distinct dim name"),
            ));
        }
    }
    let allowed = || {
        let mut parts = Vec::new();
        if !dims.is_empty() {
            parts.push(format!("dims ({})", dims.join(", ")));
        }
        if !layers.is_empty() {
            parts.push(format!("layers ({})", layers.join(", ")));
        }
        if !inputs.is_empty() {
            parts.push(format!("inputs ({})", inputs.join(", ")));
        }
        parts.push(format!("tables ({}, checks)", PATCHABLE_TABLES.join(", ")));
        parts.join("; ")
    };
    let mut out: Vec<Patched> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let path = format!("params[{i}]");
        let toml::Value::Table(entry) = e else {
            return Err(ctx0.err(&path, "must be a table with an `id`"));
        };
        let o = Obj {
            ctx: &ctx0,
            path: path.clone(),
            table: entry,
        };
        let id = o.str("id")?;
        check_name(&o, "id", id, true)?;
        if out.iter().any(|p| p.id == id) {
            return Err(o.err("id", format!("duplicate id `{id}`; ids must be unique")));
        }
        let mut doc = base.clone();
        let mut remap = Vec::new();
        for (k, v) in entry {
            if k == "id" {
                continue;
            }
            let up = format!("{path}.{k}");
            if dims.contains(k) {
                if let Some(toml::Value::Table(t)) = doc.get_mut("dims") {
                    t.insert(k.clone(), v.clone());
                }
                remap.push((format!("dims.{k}"), up));
                continue;
            }
            let toml::Value::Table(patch) = v else {
                let what = if layers.contains(k)
                    || inputs.contains(k)
                    || k == "checks"
                    || PATCHABLE_TABLES.contains(&k.as_str())
                {
                    format!(
                        "`{k}` takes keys (`{k}.<key> = ...`), not {}",
                        super::node::type_name(v)
                    )
                } else {
                    format!("`{k}` names no dim, layer, input or table")
                };
                return Err(ctx0.err(&up, format!("{what}; allowed: {}", allowed())));
            };
            if PATCHABLE_TABLES.contains(&k.as_str()) {
                let t = doc
                    .entry(k.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(t) = t {
                    merge(t, patch, k, &up, &mut remap);
                }
                continue;
            }
            let (array, idx) = if let Some(j) = layers.iter().position(|n| n == k) {
                ("layers", j)
            } else if let Some(j) = inputs.iter().position(|n| n == k) {
                ("inputs", j)
            } else if k == "checks" {
                // checks.<name>.<key>
                for (cname, cpatch) in patch {
                    let cup = format!("{up}.{cname}");
                    let Some(j) = checks.iter().position(|n| n == cname) else {
                        return Err(ctx0.err(
                            &cup,
                            format!("no check is named `{cname}`; checks: {}", checks.join(", ")),
                        ));
                    };
                    let toml::Value::Table(cpatch) = cpatch else {
                        return Err(ctx0.err(&cup, "allowed: checks.<name>.<key> = value"));
                    };
                    if let Some(toml::Value::Table(t)) = doc
                        .get_mut("checks")
                        .and_then(|a| a.as_array_mut())
                        .and_then(|a| a.get_mut(j))
                    {
                        merge(t, cpatch, &format!("checks[{j}]"), &cup, &mut remap);
                    }
                }
                continue;
            } else {
                return Err(ctx0.err(
                    &up,
                    format!(
                        "`{k}` names no dim, layer, input or table; allowed: {}",
                        allowed()
                    ),
                ));
            };
            if patch.contains_key("name") {
                return Err(ctx0.err(
                    &format!("{up}.name"),
                    "a parametrization cannot rename a layer or input; allowed: any other key",
                ));
            }
            if let Some(toml::Value::Table(t)) = doc
                .get_mut(array)
                .and_then(|a| a.as_array_mut())
                .and_then(|a| a.get_mut(idx))
            {
                merge(t, patch, &format!("{array}[{idx}]"), &up, &mut remap);
            }
        }
        // Most specific first, so `layers[3].bias` wins over a shorter prefix.
        remap.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        out.push(Patched {
            id: id.to_string(),
            doc,
            ctx: Ctx {
                file: file.to_string(),
                remap,
                param: (entries.len() > 1).then(|| id.to_string()),
            },
        });
    }
    Ok(out)
}
