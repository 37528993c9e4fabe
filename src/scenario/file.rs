//! One scenario file: its top-level keys, policies and profiles, and one resolved graph per
//! parametrization.

use std::collections::BTreeMap;

use crate::check::comparison::Comparison;
use crate::scenario::config::{resolve_policies, CommonConfig, Policy, PolicyToml, RngKind};
use crate::scenario::profile::{toml_error, ProfileToml, ProfilesToml};
use crate::sys::error::InputError;

use super::node::{check_name, Ctx, Obj};
use super::params;
use super::resolve::{resolve, Graph};
use super::spec::{parse_spec, GRAPH_KEYS};

/// Top-level keys of a scenario file.
pub const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "first_seed",
    "rng",
    "default_profiles",
    "default_policies",
    "compare",
    "dims",
    "parallel",
    "data",
    "inputs",
    "layers",
    "loss",
    "train",
    "init",
    "checks",
    "params",
    "policies",
    "profiles",
    "modifiers",
];

/// The scenario kind of files in the language (`CommonConfig::kind`).
pub const KIND: &str = "graph";

/// A parsed, validated scenario file.
#[derive(Debug, Clone)]
pub struct ScenarioFile {
    /// The common part, as every scenario has it (`model` holds the graph tables, for fingerprints; `params` the raw
    /// `[[params]]` entries).
    pub common: CommonConfig,
    /// The comparison the test asserts.
    pub compare: Comparison,
    /// One resolved graph per parametrization, in file order.
    pub graphs: Vec<Graph>,
    /// The same, lowered to the executor's IR.
    pub lowered: Vec<crate::scenario::ir::ResolvedGraph>,
    /// Every check name of the file, in file order.
    pub check_names: Vec<String>,
    /// The resolved policies (the shared built-ins plus the file's own); empty for a file
    /// with an outer loop, whose check names come from its outer loop's schedule (resolved
    /// when the executor prepares it).
    pub policies: Vec<Policy>,
    /// Per parametrization: the layout the reference computation runs under
    /// (`[parallel.reference]`, `compare = "layout-vs-layout"`), resolved and lowered like
    /// the sharded one; `None` (and empty for a file without it): the reference is unsharded.
    pub references: Vec<Option<ReferenceLayout>>,
    /// A file with a DiLoCo outer loop (`[train.outer]`, read by [`super::outer`]): `graphs`
    /// is empty and `lowered` holds its one graph.
    pub outer: bool,
}

/// The reference computation's layout of one parametrization (`[parallel.reference]`): the
/// same graph resolved and lowered under the reference's degrees.
#[derive(Debug, Clone)]
pub struct ReferenceLayout {
    /// The graph resolved under the reference layout.
    pub graph: Graph,
    /// The same, lowered.
    pub lowered: crate::scenario::ir::ResolvedGraph,
}

impl ScenarioFile {
    /// Overrides the generator of the file and of every lowered graph (`--rng`).
    pub fn set_rng(&mut self, rng: RngKind) {
        self.common.rng = rng;
        for g in &mut self.lowered {
            g.rng = rng;
        }
        for r in self.references.iter_mut().flatten() {
            r.lowered.rng = rng;
        }
    }

    /// Whether the file compares two layouts (`compare = "layout-vs-layout"`).
    pub fn layout_vs_layout(&self) -> bool {
        self.references.iter().any(Option::is_some)
    }
}

/// An error found resolving, lowering or validating the reference layout, reported at
/// `parallel.reference` (of the parametrization) with the key it names.
pub(crate) fn under_reference(file: &str, at: &str, e: InputError) -> InputError {
    match e {
        InputError::Config { key, msg, .. } => InputError::config(
            file,
            at,
            format!("under the reference layout, key `{key}`: {msg}"),
        ),
        e => e,
    }
}

fn name_list(o: &Obj<'_>, key: &str, default: &str) -> Result<Vec<String>, InputError> {
    match o.opt_strings(key)? {
        None => Ok(vec![default.to_string()]),
        Some(l) => {
            if l.is_empty() {
                return Err(o.err(
                    key,
                    "an empty list is not allowed; list at least one name (or leave the key out)",
                ));
            }
            if let Some((i, n)) = l.iter().enumerate().find(|(i, n)| l[..*i].contains(n)) {
                return Err(o.ctx.err(
                    &format!("{key}[{i}]"),
                    format!("`{n}` is listed twice; list each name once"),
                ));
            }
            Ok(l.iter().map(|s| s.to_string()).collect())
        }
    }
}

/// Parses and validates a scenario file: every parametrization is resolved (shapes, shards,
/// collectives, checks) before this returns.
pub fn parse_file(file: &str, text: &str) -> Result<ScenarioFile, InputError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| toml_error(file, e))?;
    let ctx = Ctx::new(file);
    let top = Obj::new(&ctx, "", &table, TOP_KEYS)?;
    let name = top.str("name")?;
    check_name(&top, "name", name, true)?;
    let description = top.opt_str("description")?.unwrap_or("").to_string();
    let first_seed = top.int("first_seed", 0, i64::MAX, 0)? as u64;
    let rng = match top.choice("rng", &["torch", "chacha"], "torch")? {
        "chacha" => RngKind::ChaCha,
        _ => RngKind::Torch,
    };
    let compare_name = top.choice(
        "compare",
        &["sharded-vs-ref", "sharded-vs-f64", "layout-vs-layout"],
        "sharded-vs-ref",
    )?;
    // Two layouts are compared as the sharded computation against the reference one (the
    // reference then runs under `[parallel.reference]`): the comparison is sharded-vs-ref.
    let layouts = compare_name == "layout-vs-layout";
    let compare = match compare_name {
        "sharded-vs-f64" => Comparison::ShardedVsF64,
        _ => Comparison::ShardedVsRef,
    };
    let profiles = name_list(&top, "default_profiles", "cpu-fma")?;
    let default_policies = name_list(&top, "default_policies", "torch-default")?;
    // Policies, profiles and modifiers: the same tables as every config.
    let (policy_tables, extra) = policy_and_profile_tables(&ctx, &table)?;
    // The graph part, once per parametrization.
    let mut graph_doc = toml::Table::new();
    for k in GRAPH_KEYS.iter().chain(["params"].iter()) {
        if let Some(v) = table.get(*k) {
            graph_doc.insert(k.to_string(), v.clone());
        }
    }
    let patched = params::apply(file, &graph_doc)?;
    let mut graphs = Vec::new();
    let mut lowered = Vec::new();
    let mut references = Vec::new();
    for p in &patched {
        let doc = Obj::new(&p.ctx, "", &p.doc, GRAPH_KEYS)?;
        let spec = parse_spec(&doc)?;
        let g = resolve(&p.ctx, &p.id, &spec)?;
        let low = super::lower::lower(&p.ctx, &g, rng)?;
        references.push(reference_layout(&p.ctx, &p.id, &spec, &low, layouts, rng)?);
        lowered.push(low);
        graphs.push(g);
    }
    if !layouts {
        references.clear();
    }
    let mut check_names: Vec<String> = Vec::new();
    for g in &graphs {
        for c in &g.spec.checks {
            if !check_names.contains(&c.name) {
                check_names.push(c.name.clone());
            }
        }
    }
    let raw_params = match table.get("params") {
        Some(toml::Value::Array(a)) => a.iter().filter_map(|v| v.as_table().cloned()).collect(),
        _ => Vec::new(),
    };
    let common = CommonConfig {
        file: file.to_string(),
        kind: KIND.to_string(),
        name: name.to_string(),
        description,
        first_seed,
        rng,
        profiles,
        default_policies,
        policy_tables,
        extra_profiles: extra,
        // Every graph key, for the sweep folder's fingerprint (`--resume` names a changed key).
        model: {
            let mut m = graph_doc.clone();
            m.remove("params");
            m
        },
        params: raw_params,
    };
    let names: Vec<&str> = check_names.iter().map(|s| s.as_str()).collect();
    let policies = resolve_policies(&common, &names)?;
    let known: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
    for (i, p) in common.default_policies.iter().enumerate() {
        if !known.contains(&p.as_str()) {
            return Err(ctx.err(
                &format!("default_policies[{i}]"),
                format!(
                    "unknown policy `{p}`; allowed: {} (the shared ones and this file's [policies.*])",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(ScenarioFile {
        common,
        compare,
        graphs,
        lowered,
        references,
        check_names,
        policies,
        outer: false,
    })
}

/// The reference layout of one parametrization: `[parallel.reference]` resolved and lowered
/// as the sharded layout is (the same spec with the reference's degrees), required exactly
/// when `compare = "layout-vs-layout"`, recording the same checks.
fn reference_layout(
    ctx: &Ctx,
    id: &str,
    spec: &super::spec::Spec,
    sharded: &crate::scenario::ir::ResolvedGraph,
    layouts: bool,
    rng: RngKind,
) -> Result<Option<ReferenceLayout>, InputError> {
    let Some(layout) = &spec.parallel.reference else {
        if layouts {
            return Err(ctx.err(
                "parallel.reference",
                "compare = \"layout-vs-layout\" runs the reference under another layout; \
                 allowed: a [parallel.reference] table (tp, dp, dp_replicate, dp_shard, \
                 zero_stage, grad_sync), or another compare",
            ));
        }
        return Ok(None);
    };
    if !layouts {
        return Err(ctx.err(
            "parallel.reference",
            "a reference layout is compared only with compare = \"layout-vs-layout\"; \
             allowed: set compare = \"layout-vs-layout\", or remove [parallel.reference]",
        ));
    }
    let at = ctx.user_path("parallel.reference");
    let mut rs = spec.clone();
    rs.parallel = (**layout).clone();
    let wrap = |e| under_reference(&ctx.file, &at, e);
    let graph = resolve(ctx, id, &rs).map_err(wrap)?;
    let lowered = super::lower::lower(ctx, &graph, rng).map_err(wrap)?;
    // The same checks (the error-bound columns' reductions may differ: they are the sharded
    // layout's).
    let key = |g: &crate::scenario::ir::ResolvedGraph| -> Vec<_> {
        g.checks
            .iter()
            .map(|c| (c.name.clone(), c.tensor, c.shape.clone(), c.at))
            .collect()
    };
    if key(&lowered) != key(sharded) {
        return Err(ctx.err(
            "parallel.reference",
            "the reference layout records other checks than the sharded one (an optional \
             check skipped in one layout only, such as a gradient under zero_stage >= 2); \
             allowed: layouts that record the same checks",
        ));
    }
    if lowered.parallel == sharded.parallel
        && lowered.train.grad_reduce == sharded.train.grad_reduce
    {
        return Err(ctx.err(
            "parallel.reference",
            "the reference layout is the sharded layout itself; allowed: another layout",
        ));
    }
    Ok(Some(ReferenceLayout { graph, lowered }))
}

/// Whether a config text is a scenario file in the language (it has `[[layers]]`, or a
/// `[loss]` on its inputs alone, and no `scenario = "..."` kind); [`crate::scenario::load`]
/// refuses the retired `scenario = "<kind>"` configs.
pub fn is_scenario_file(text: &str) -> bool {
    match toml::from_str::<toml::Table>(text) {
        Ok(t) => {
            (t.contains_key("layers") || t.contains_key("loss")) && !t.contains_key("scenario")
        }
        Err(_) => false,
    }
}

/// The `[policies.*]`, `[profiles.*]` and `[modifiers.*]` tables of a scenario file (the same
/// tables as every config), each entry parsed, errors naming `policies.<name>` and so on.
pub(crate) fn policy_and_profile_tables(
    ctx: &Ctx,
    table: &toml::Table,
) -> Result<(BTreeMap<String, PolicyToml>, ProfilesToml), InputError> {
    let mut policy_tables: BTreeMap<String, PolicyToml> = BTreeMap::new();
    if let Some(v) = table.get("policies") {
        let toml::Value::Table(t) = v else {
            return Err(ctx.err(
                "policies",
                "must be a table of policies ([policies.<name>])",
            ));
        };
        for (n, v) in t {
            let p: PolicyToml = v.clone().try_into().map_err(|e: toml::de::Error| {
                ctx.err(&format!("policies.{n}"), e.message().to_string())
            })?;
            policy_tables.insert(n.clone(), p);
        }
    }
    let mut extra = ProfilesToml::default();
    for (key, dst) in [
        ("profiles", &mut extra.profiles),
        ("modifiers", &mut extra.modifiers),
    ] {
        let Some(v) = table.get(key) else { continue };
        let toml::Value::Table(t) = v else {
            return Err(ctx.err(key, "must be a table"));
        };
        for (n, v) in t {
            let p: ProfileToml = v.clone().try_into().map_err(|e: toml::de::Error| {
                ctx.err(&format!("{key}.{n}"), e.message().to_string())
            })?;
            dst.insert(n.clone(), p);
        }
    }
    Ok((policy_tables, extra))
}
