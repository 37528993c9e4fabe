//! Configuration files: the scenario configs in `configs/` (embedded in the binary) and the
//! ones a user passes with `--config FILE`.
//!
//! Parsing is strict: unknown keys are errors, and every error names the file and key and
//! says what is allowed.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::check::Tolerance;
use crate::scenario::profile::{toml_error, validate_name, ProfileToml, ProfilesToml};
use crate::sys::error::{unknown_name, InputError};

/// The built-in policies file.
pub const BUILTIN_POLICIES: &str = include_str!("../../configs/policies.toml");

/// The built-in scenario configs, `(file name, text)`.
pub const BUILTIN_SCENARIOS: &[(&str, &str)] = &[
    (
        "deepspeed_tied_row_parallel.toml",
        include_str!("../../configs/deepspeed_tied_row_parallel.toml"),
    ),
    (
        "deepspeed_row_parallel.toml",
        include_str!("../../configs/deepspeed_row_parallel.toml"),
    ),
    (
        "maxtext_diloco.toml",
        include_str!("../../configs/maxtext_diloco.toml"),
    ),
    ("diloco.toml", include_str!("../../configs/diloco.toml")),
    // Issue 8's new built-ins, in the scenario language, validated against torch in
    // tests/suite/builtin_fixtures.rs.
    (
        "deepspeed_tp_row_parallel.toml",
        include_str!("../../configs/deepspeed_tp_row_parallel.toml"),
    ),
    (
        "deepspeed_uneven_tp3_row_parallel.toml",
        include_str!("../../configs/deepspeed_uneven_tp3_row_parallel.toml"),
    ),
    (
        "deepspeed_tp_column_parallel.toml",
        include_str!("../../configs/deepspeed_tp_column_parallel.toml"),
    ),
    (
        "megatron_tp_mlp.toml",
        include_str!("../../configs/megatron_tp_mlp.toml"),
    ),
    (
        "fsdp_zero2_grad_acc.toml",
        include_str!("../../configs/fsdp_zero2_grad_acc.toml"),
    ),
    (
        "megatron_vocab_parallel_cross_entropy.toml",
        include_str!("../../configs/megatron_vocab_parallel_cross_entropy.toml"),
    ),
    // Issue 35: Megatron's test as written (fixed, vocab-sharded logits; per-token losses),
    // validated against torch in tests/suite/elementwise.rs.
    (
        "megatron_vocab_parallel_ce_test.toml",
        include_str!("../../configs/megatron_vocab_parallel_ce_test.toml"),
    ),
    // Issue 35: PyTorch's test_ring_attention_sdpa (ring attention over cp = 2, 4, 8 ranks
    // against plain sdpa), validated against torch's own ring code in
    // tests/suite/ring_attention.rs.
    (
        "pytorch_ring_attention_sdpa_test.toml",
        include_str!("../../configs/pytorch_ring_attention_sdpa_test.toml"),
    ),
    // Issue 35: two data-parallel layouts compared (HSDP 2 x 4 against FSDP 8), validated
    // against torch in tests/suite/hsdp.rs.
    (
        "torchtitan_fsdp_vs_hsdp.toml",
        include_str!("../../configs/torchtitan_fsdp_vs_hsdp.toml"),
    ),
    // Issue 35: MaxText's routed-MoE test_dense, scaled down, expert parallel 4 against the
    // unsharded block, validated against torch in tests/suite/moe.rs.
    (
        "maxtext_moe_dense_test.toml",
        include_str!("../../configs/maxtext_moe_dense_test.toml"),
    ),
    // Issue 35: the same block as MaxText's test compares it, the dense path's einsum combine
    // against the loop's elementwise one (#4550), validated in tests/suite/moe.rs.
    (
        "maxtext_moe_dense_vs_loop.toml",
        include_str!("../../configs/maxtext_moe_dense_vs_loop.toml"),
    ),
];

/// A tolerance as written in TOML.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToleranceToml {
    /// Absolute tolerance, >= 0.
    pub atol: f64,
    /// Relative tolerance, >= 0.
    pub rtol: f64,
}

/// A policy as written in TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyToml {
    /// One line describing it.
    #[serde(default)]
    pub description: String,
    /// Tolerance of every check without an override.
    pub default: ToleranceToml,
    /// Per-check overrides.
    #[serde(default)]
    pub checks: BTreeMap<String, ToleranceToml>,
    /// Must be `true` for a table that replaces a shared built-in policy of the same name.
    #[serde(default, rename = "override")]
    pub overrides: bool,
}

/// A named tolerance policy: a default and per-check overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Its name (`old`, `torch-default`).
    pub name: String,
    /// One line describing it.
    pub description: String,
    /// Tolerance of checks without an override.
    pub default: Tolerance,
    /// Per-check overrides, by check name.
    pub checks: BTreeMap<String, Tolerance>,
}

impl Policy {
    /// The tolerance this policy gives `check`.
    pub fn tolerance(&self, check: &str) -> Tolerance {
        self.checks.get(check).copied().unwrap_or(self.default)
    }
}

/// Largest atol or rtol a policy may set.
pub const MAX_TOLERANCE: f64 = 1e6;

/// The most `[[params]]` entries (parametrizations) one file may have.
pub const MAX_PARAMS: usize = 4096;

/// The largest config file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Reads the config or scenario file at `path` as text, naming `flag`: at most
/// [`MAX_CONFIG_BYTES`] are read (`/dev/zero` or a wrong file is refused, not read until memory
/// runs out), and the text must be UTF-8.
pub fn read_config(path: &std::path::Path, flag: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("{flag}: cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("{flag}: cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(InputError::flag(
            flag,
            format!(
                "{} is larger than {} MiB, the most a config may be; is it the right file?",
                path.display(),
                MAX_CONFIG_BYTES >> 20
            ),
        )
        .into());
    }
    String::from_utf8(bytes).map_err(|e| {
        InputError::flag(
            flag,
            format!(
                "{} is not UTF-8 text (invalid byte at offset {}); a config is a TOML file",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
        .into()
    })
}

/// Refuses more than [`MAX_PARAMS`] parametrizations in `file`.
pub fn check_params_count(file: &str, n: usize) -> Result<(), InputError> {
    if n > MAX_PARAMS {
        return Err(InputError::config(
            file,
            "params",
            format!("{n} parametrizations is too many; allowed: at most {MAX_PARAMS}"),
        ));
    }
    Ok(())
}

/// Largest learning rate (`lr`, `inner_lr`, `outer_lr`): larger ones overflow fp32 updates.
pub const MAX_LR: f64 = 100.0;

/// Checks `0 < lr < MAX_LR` for a learning-rate key.
pub fn lr_in_range(file: &str, key: &str, v: f64) -> Result<(), InputError> {
    if !(v.is_finite() && v > 0.0 && v < MAX_LR) {
        return Err(InputError::config(
            file,
            key,
            format!(
                "{} is not allowed; allowed: 0 < {key} < {MAX_LR}",
                crate::check::python_repr::py_repr(v)
            ),
        ));
    }
    Ok(())
}

fn tolerance(file: &str, key: &str, t: ToleranceToml) -> Result<Tolerance, InputError> {
    for (part, v) in [("atol", t.atol), ("rtol", t.rtol)] {
        if !(v.is_finite() && (0.0..=MAX_TOLERANCE).contains(&v)) {
            return Err(InputError::config(
                file,
                format!("{key}.{part}"),
                format!(
                    "{} is not allowed; a tolerance must be a number in 0..={MAX_TOLERANCE:e}",
                    crate::check::python_repr::py_repr(v)
                ),
            ));
        }
    }
    Ok(Tolerance {
        atol: t.atol,
        rtol: t.rtol,
    })
}

/// Validates a policy table. `check_names`, when given, are the checks the overrides may name.
pub fn policy_from_toml(
    file: &str,
    name: &str,
    t: &PolicyToml,
    check_names: Option<&[&str]>,
) -> Result<Policy, InputError> {
    let key = format!("policies.{name}");
    validate_name(file, &key, name)?;
    let default = tolerance(file, &format!("{key}.default"), t.default)?;
    let mut checks = BTreeMap::new();
    for (check, tol) in &t.checks {
        if let Some(valid) = check_names {
            if !valid.contains(&check.as_str()) {
                return Err(InputError::config(
                    file,
                    format!("{key}.checks.{check}"),
                    unknown_name("check", check, valid),
                ));
            }
        }
        checks.insert(
            check.clone(),
            tolerance(file, &format!("{key}.checks.{check}"), *tol)?,
        );
    }
    Ok(Policy {
        name: name.to_string(),
        description: t.description.clone(),
        default,
        checks,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoliciesFile {
    #[serde(default)]
    policies: BTreeMap<String, PolicyToml>,
}

/// The built-in shared policies (`torch-default`, `chex-default`, ...).
pub fn builtin_policies() -> Result<Vec<Policy>, InputError> {
    let file = "built-in configs/policies.toml";
    let parsed: PoliciesFile = toml::from_str(BUILTIN_POLICIES).map_err(|e| toml_error(file, e))?;
    parsed
        .policies
        .iter()
        .map(|(n, t)| policy_from_toml(file, n, t, None))
        .collect()
}

/// Which generator draws a scenario's initial weights and inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RngKind {
    /// torch's CPU generator, bit for bit.
    Torch,
    /// ChaCha20 streams keyed by (seed, stream name).
    ChaCha,
}

impl RngKind {
    /// Parses `torch` or `chacha`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "torch" => Some(Self::Torch),
            "chacha" => Some(Self::ChaCha),
            _ => None,
        }
    }
    /// The name as written in configs and flags.
    pub fn name(self) -> &'static str {
        match self {
            Self::Torch => "torch",
            Self::ChaCha => "chacha",
        }
    }
}

/// A scenario config file as written (top-level keys other than the `[policies.*]`,
/// `[profiles.*]` and `[modifiers.*]` tables), before the scenario validates its own parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioToml {
    scenario: String,
    name: Option<String>,
    #[serde(default)]
    description: String,
    first_seed: Option<u64>,
    rng: Option<String>,
    default_profiles: Option<Vec<String>>,
    default_policies: Option<Vec<String>>,
    #[serde(default)]
    model: toml::Table,
    #[serde(default)]
    params: Vec<toml::Table>,
}

/// The common, validated part of a scenario config.
#[derive(Debug, Clone)]
pub struct CommonConfig {
    /// Where it came from, for error messages.
    pub file: String,
    /// Scenario kind.
    pub kind: String,
    /// Display name.
    pub name: String,
    /// One line describing it.
    pub description: String,
    /// Default first seed.
    pub first_seed: u64,
    /// Generator.
    pub rng: RngKind,
    /// Default profile specs.
    pub profiles: Vec<String>,
    /// Default policies, in order.
    pub default_policies: Vec<String>,
    /// Policy tables as written; resolved against the scenario's checks by the scenario.
    pub policy_tables: BTreeMap<String, PolicyToml>,
    /// Extra profiles and modifiers the config defines.
    pub extra_profiles: ProfilesToml,
    /// The `[model]` table.
    pub model: toml::Table,
    /// The `[[params]]` tables.
    pub params: Vec<toml::Table>,
}

/// Parses the common part of a retired `scenario = "<kind>"` config (no route of the product
/// reads these any more; the T1/T2 golden test reads its legacy tables with it). Policies sit under `[policies.<name>]` and
/// extra profiles under `[profiles.<name>]` / `[modifiers.<name>]`, as in the shared files.
pub fn parse_scenario_config(file: &str, text: &str) -> Result<CommonConfig, InputError> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| toml_error(file, e))?;
    let policies_value = table.remove("policies");
    let profiles_value = table.remove("profiles");
    let modifiers_value = table.remove("modifiers");
    let raw: ScenarioToml =
        toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                InputError::config(file, "(top level)", e.message().to_string())
            })?;

    let policy_tables: BTreeMap<String, PolicyToml> = match policies_value {
        None => BTreeMap::new(),
        Some(v) => {
            let t = v
                .as_table()
                .ok_or_else(|| InputError::config(file, "policies", "must be a table of policies"))?
                .clone();
            let mut out = BTreeMap::new();
            for (name, v) in t {
                let p: PolicyToml = v.try_into().map_err(|e: toml::de::Error| {
                    InputError::config(file, format!("policies.{name}"), e.message().to_string())
                })?;
                out.insert(name, p);
            }
            out
        }
    };
    let mut extra = ProfilesToml::default();
    for (key, v, dst) in [
        ("profiles", profiles_value, &mut extra.profiles),
        ("modifiers", modifiers_value, &mut extra.modifiers),
    ] {
        let Some(v) = v else { continue };
        match v {
            toml::Value::Table(t) => {
                for (name, v) in t {
                    let p: ProfileToml = v.try_into().map_err(|e: toml::de::Error| {
                        InputError::config(file, format!("{key}.{name}"), e.message().to_string())
                    })?;
                    dst.insert(name, p);
                }
            }
            _ => {
                return Err(InputError::config(file, key, "must be a table"));
            }
        }
    }
    let rng = match raw.rng.as_deref() {
        None => RngKind::Torch,
        Some(s) => RngKind::parse(s).ok_or_else(|| {
            InputError::config(
                file,
                "rng",
                format!("`{s}` is not allowed; allowed: torch, chacha"),
            )
        })?,
    };
    let name = raw.name.clone().unwrap_or_else(|| raw.scenario.clone());
    validate_name(file, "name", &name)?;
    for (key, list) in [
        ("default_profiles", &raw.default_profiles),
        ("default_policies", &raw.default_policies),
    ] {
        if let Some(l) = list {
            if l.is_empty() {
                return Err(InputError::config(
                    file,
                    key,
                    "an empty list is not allowed; list at least one name (or leave the key out)",
                ));
            }
            if let Some((i, n)) = l.iter().enumerate().find(|(i, n)| l[..*i].contains(n)) {
                return Err(InputError::config(
                    file,
                    format!("{key}[{i}]"),
                    format!("`{n}` is listed twice; list each name once"),
                ));
            }
        }
    }
    check_params_count(file, raw.params.len())?;
    Ok(CommonConfig {
        file: file.to_string(),
        kind: raw.scenario,
        name,
        description: raw.description,
        first_seed: raw.first_seed.unwrap_or(0),
        rng,
        profiles: raw.default_profiles.unwrap_or_default(),
        default_policies: raw.default_policies.unwrap_or_default(),
        policy_tables,
        extra_profiles: extra,
        model: raw.model,
        params: raw.params,
    })
}

/// Deserializes a scenario's `[model]` table or one `[[params]]` entry, naming `key` in errors.
pub fn section<T: serde::de::DeserializeOwned>(
    file: &str,
    key: &str,
    table: &toml::Table,
) -> Result<T, InputError> {
    toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| InputError::config(file, key, e.message().to_string()))
}

/// Checks `lo <= v <= hi` for an integer setting.
pub fn in_range(file: &str, key: &str, v: usize, lo: usize, hi: usize) -> Result<(), InputError> {
    if v < lo || v > hi {
        return Err(InputError::config(
            file,
            key,
            format!("{v} is out of range; allowed: {lo}..={hi}"),
        ));
    }
    Ok(())
}

/// Resolves the policies of a scenario: the shared built-ins, then the config's own tables
/// (which replace built-ins of the same name). Overrides must name one of `check_names`.
pub fn resolve_policies(
    common: &CommonConfig,
    check_names: &[&str],
) -> Result<Vec<Policy>, InputError> {
    let mut all: BTreeMap<String, Policy> = builtin_policies()?
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect();
    for (name, t) in &common.policy_tables {
        if all.contains_key(name) && !t.overrides {
            return Err(InputError::config(
                &common.file,
                format!("policies.{name}"),
                format!(
                    "redefines the shared built-in policy `{name}`; add `override = true` to \
                     that table to replace it for this scenario, or choose another name"
                ),
            ));
        }
        all.insert(
            name.clone(),
            policy_from_toml(&common.file, name, t, Some(check_names))?,
        );
    }
    Ok(all.into_values().collect())
}
