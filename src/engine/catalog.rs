//! The catalog: every scenario and profile this run knows (the built-ins plus `--config`
//! files), and the resolution of the user's selection flags against it.

use std::path::Path;

use crate::check::Tolerance;
use crate::exec::scenario::Scenario;
use crate::scenario::config::{RngKind, BUILTIN_SCENARIOS};
use crate::scenario::mutant::Mutant;
use crate::scenario::profile::{Profile, ProfileRegistry};
use crate::sys::error::{unknown_name, InputError};

/// Scenarios and profiles.
pub struct Catalog {
    /// Scenarios, built-ins first in a fixed order, then configs (a config with a built-in's
    /// name replaces it in place).
    pub scenarios: Vec<Box<dyn Scenario>>,
    /// Known profiles and modifiers.
    pub profiles: ProfileRegistry,
    /// Names of the scenarios that came from `--config` files.
    pub from_configs: Vec<String>,
    /// What the configs override (profiles, modifiers, shared policies), one line each, for
    /// the commands to print.
    pub notes: Vec<String>,
}

/// What the user selected; `None` means the defaults.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// `--scenario` names.
    pub scenarios: Option<Vec<String>>,
    /// `--param` ids.
    pub params: Option<Vec<String>>,
    /// `--profile` specs.
    pub profiles: Option<Vec<String>>,
    /// `--policy` names.
    pub policies: Option<Vec<String>>,
    /// `--mutants` names, or `all` for every mutant each scenario supports. `None` runs the
    /// clean computation only.
    pub mutants: Option<Vec<String>>,
}

/// One (scenario, parametrization, profile) with its resolved policies.
pub struct Group {
    /// Index into [`Catalog::scenarios`].
    pub scenario: usize,
    /// Parametrization index within the scenario.
    pub param: usize,
    /// The profile.
    pub profile: Profile,
    /// Selected policy names, in order.
    pub policy_names: Vec<String>,
    /// `tolerances[p][c]`: policy p's tolerance for check c of this parametrization.
    pub tolerances: Vec<Vec<Tolerance>>,
    /// The bug injected into the sharded computation; `None` for the clean run.
    pub mutant: Option<Mutant>,
}

impl Catalog {
    /// Loads the built-ins, then each config file in order. `rng` overrides every
    /// scenario's generator when given.
    pub fn load(configs: &[impl AsRef<Path>], rng: Option<RngKind>) -> anyhow::Result<Self> {
        let mut profiles = ProfileRegistry::builtin()?;
        let mut commons = Vec::new();
        for (file, text) in BUILTIN_SCENARIOS {
            commons.push(crate::scenario::load(
                &format!("built-in configs/{file}"),
                text,
            )?);
        }
        let mut from_configs = Vec::new();
        for path in configs {
            let path = path.as_ref();
            let text = crate::scenario::config::read_config(path, "--config")?;
            if crate::scenario::revealed_file::is_revealed_file(&text) {
                // A revealed-order file (scripts/reveal_order.py): it defines one profile.
                let orders = crate::scenario::revealed_file::RevealedOrders::parse(
                    &path.display().to_string(),
                    &text,
                )?;
                profiles.add_revealed(orders)?;
                continue;
            }
            let source = crate::scenario::load(&path.display().to_string(), &text)?;
            let common = &source.common;
            if from_configs.contains(&common.name) {
                return Err(InputError::flag(
                    "--config",
                    format!(
                        "{} defines scenario `{}` again (an earlier --config file defines it too); give one config per scenario",
                        path.display(),
                        common.name
                    ),
                )
                .into());
            }
            let name = common.name.clone();
            from_configs.push(name.clone());
            match commons.iter().position(|c| c.common.name == name) {
                Some(i) => commons[i] = source,
                None => commons.push(source),
            }
        }
        let mut scenarios: Vec<Box<dyn Scenario>> = Vec::new();
        for mut source in commons {
            if let Some(r) = rng {
                source.set_rng(r);
            }
            let common = &source.common;
            profiles.add(&common.file, &common.extra_profiles)?;
            for spec in &common.profiles {
                profiles.resolve(spec, "default_profiles").map_err(|e| {
                    InputError::config(&common.file, "default_profiles", e.to_string())
                })?;
            }
            scenarios.push(Box::new(crate::exec::build::build(source)?));
        }
        for s in &scenarios {
            let names: Vec<&str> = s.policies().iter().map(|p| p.name.as_str()).collect();
            for p in &s.common().default_policies {
                if !names.contains(&p.as_str()) {
                    return Err(InputError::config(
                        &s.common().file,
                        "default_policies",
                        unknown_name("policy", p, &names),
                    )
                    .into());
                }
            }
        }
        let mut notes: Vec<String> = profiles.notes().to_vec();
        let shared: Vec<String> = crate::scenario::config::builtin_policies()?
            .into_iter()
            .map(|p| p.name)
            .collect();
        for s in &scenarios {
            let c = s.common();
            if from_configs.contains(&c.name) {
                for (name, t) in &c.policy_tables {
                    if t.overrides && shared.contains(name) {
                        notes.push(format!(
                            "{} overrides the shared policy `{name}` for scenario {}",
                            c.file, c.name
                        ));
                    }
                }
            }
        }
        Ok(Self {
            scenarios,
            profiles,
            from_configs,
            notes,
        })
    }

    /// Scenario names, in catalog order.
    pub fn scenario_names(&self) -> Vec<&str> {
        self.scenarios
            .iter()
            .map(|s| s.common().name.as_str())
            .collect()
    }

    /// Index of a scenario by name.
    pub fn scenario_index(&self, name: &str, flag: &str) -> Result<usize, InputError> {
        self.scenarios
            .iter()
            .position(|s| s.common().name == name)
            .ok_or_else(|| {
                InputError::flag(flag, unknown_name("scenario", name, &self.scenario_names()))
            })
    }

    /// Resolves a selection into groups, in (scenario, param, profile) order.
    /// Without `--scenario`, the config files' scenarios when any were given, else all.
    pub fn select(&self, sel: &Selection) -> Result<Vec<Group>, InputError> {
        let scenario_idx: Vec<usize> = match &sel.scenarios {
            Some(names) => names
                .iter()
                .map(|n| self.scenario_index(n, "--scenario"))
                .collect::<Result<_, _>>()?,
            None if !self.from_configs.is_empty() => self
                .from_configs
                .iter()
                .map(|n| self.scenario_index(n, "--config"))
                .collect::<Result<_, _>>()?,
            None => (0..self.scenarios.len()).collect(),
        };
        if let Some(params) = &sel.params {
            for p in params {
                let known = scenario_idx
                    .iter()
                    .any(|&s| self.scenarios[s].param_ids().contains(&p.as_str()));
                if !known {
                    let mut valid: Vec<&str> = Vec::new();
                    for &s in &scenario_idx {
                        valid.extend(self.scenarios[s].param_ids());
                    }
                    return Err(InputError::flag(
                        "--param",
                        unknown_name("parametrization", p, &valid),
                    ));
                }
            }
        }
        let mutant_names: Option<Vec<String>> = sel.mutants.clone();
        if let Some(names) = &mutant_names {
            for name in names {
                if name == "all" {
                    continue;
                }
                let m = Mutant::parse(name).ok_or_else(|| {
                    let mut valid: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
                    valid.push("all");
                    InputError::flag("--mutants", unknown_name("mutant", name, &valid))
                })?;
                if !scenario_idx
                    .iter()
                    .any(|&s| self.scenarios[s].mutants().contains(&m))
                {
                    return Err(InputError::flag(
                        "--mutants",
                        format!("mutant `{name}` does not apply to any selected scenario"),
                    ));
                }
            }
        }
        let mut groups = Vec::new();
        for &si in &scenario_idx {
            let s = &self.scenarios[si];
            if let Some(params) = &sel.params {
                // A scenario none of whose parametrizations is selected takes no part, so its
                // policies and profiles are not checked against the flags either.
                if !s
                    .param_ids()
                    .iter()
                    .any(|id| params.iter().any(|p| p == id))
                {
                    continue;
                }
            }
            let profile_specs: Vec<String> = match &sel.profiles {
                Some(p) => p.clone(),
                None => s.common().profiles.clone(),
            };
            let profiles: Vec<Profile> = profile_specs
                .iter()
                .map(|spec| self.profiles.resolve(spec, "--profile"))
                .collect::<Result<_, _>>()?;
            let policy_names: Vec<String> = match &sel.policies {
                Some(p) => p.clone(),
                None => s.common().default_policies.clone(),
            };
            let mut policies = Vec::new();
            for name in &policy_names {
                let p = s
                    .policies()
                    .iter()
                    .find(|p| &p.name == name)
                    .ok_or_else(|| {
                        let valid: Vec<&str> =
                            s.policies().iter().map(|p| p.name.as_str()).collect();
                        InputError::flag(
                            "--policy",
                            format!(
                                "{} (scenario {})",
                                unknown_name("policy", name, &valid),
                                s.common().name
                            ),
                        )
                    })?;
                policies.push(p);
            }
            for (pi, id) in s.param_ids().iter().enumerate() {
                if let Some(params) = &sel.params {
                    if !params.iter().any(|p| p == id) {
                        continue;
                    }
                }
                for profile in &profiles {
                    let tolerances: Vec<Vec<Tolerance>> = policies
                        .iter()
                        .map(|p| s.checks(pi).iter().map(|c| p.tolerance(c.name)).collect())
                        .collect();
                    let mut mutants: Vec<Option<Mutant>> = vec![None];
                    if let Some(names) = &mutant_names {
                        for &m in s.mutants() {
                            if names.iter().any(|n| n == "all" || n == m.name()) {
                                mutants.push(Some(m));
                            }
                        }
                    }
                    for mutant in mutants {
                        groups.push(Group {
                            scenario: si,
                            param: pi,
                            profile: profile.clone(),
                            policy_names: policy_names.clone(),
                            tolerances: tolerances.clone(),
                            mutant,
                        });
                    }
                }
            }
        }
        Ok(groups)
    }
}
