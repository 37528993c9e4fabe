//! Named numerics profiles: a matmul model × an all-reduce model.
//!
//! The built-in profiles live in `configs/profiles.toml`, embedded in the binary; a user
//! config may add profiles and modifiers with the same tables. A profile spec on the command
//! line is a profile name followed by modifiers joined with `+`
//! (`cpu-fma+allreduce-bf16`): each modifier overrides the parts it names, left to right.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::kernels::allreduce::{AllReduceAlgo, Wire};
use crate::kernels::matmul::{Accum, KSplit, MatmulModel, Passes};
use crate::kernels::mkl_sgemm::OrderModel;
use crate::kernels::mkl_sqrt::SqrtKernel;
use crate::kernels::round::Tf32Mode;
use crate::kernels::torch_ops::{OneDnnIsa, TanhKernel, TorchIsa};
use crate::scenario::revealed_file::RevealedOrders;
use crate::sys::error::{unknown_name, InputError};
use std::sync::Arc;

/// A resolved numerics profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The spec it was selected by (`cpu-fma`, `cpu-fma+allreduce-bf16`).
    pub name: String,
    /// One line for `seedsweep list`.
    pub description: String,
    /// How every fp32 matmul rounds.
    pub matmul: MatmulModel,
    /// All-reduce order.
    pub allreduce: AllReduceAlgo,
    /// All-reduce buffer dtype.
    pub wire: Wire,
    /// Which torch CPU kernel build the elementwise and reduction kernels mirror.
    pub torch_isa: TorchIsa,
    /// The ISA of oneDNN's kernels (torch's exact gelu).
    pub onednn_isa: OneDnnIsa,
    /// The f32 tanh of the torch scenarios (MKL's `vmsTanh` or correctly rounded).
    pub tanh: TanhKernel,
    /// The f32 square root of Adam's update (MKL's `vsSqrt` or correctly rounded).
    pub sqrt: SqrtKernel,
    /// How a JAX program's elementwise arithmetic rounds (eager or jitted); `None` leaves it to
    /// the scenario (`maxtext-diloco`: eager, as the test runs). Torch scenarios ignore it.
    pub xla: Option<XlaMode>,
    /// Revealed per-element matmul orders (`matmul_orders`, e.g. MKL at 4 threads): every
    /// matmul whose role and shape they reveal runs by them; other shapes use `matmul`.
    pub orders: Option<Arc<RevealedOrders>>,
    /// A generative order model (`order_model`, MKL `sgemm` at one or two threads,
    /// [`crate::kernels::mkl_sgemm`]): every matmul of the four roles that `orders` does not
    /// reveal runs by it instead of `matmul`.
    pub order_model: Option<OrderModel>,
}

/// How JAX executes a program, which decides where XLA's CPU backend contracts a multiply
/// and an add into one FMA (measured with JAX 0.10.2, `scripts/crosscheck_jax.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XlaMode {
    /// Op by op (`diloco_train_step` called directly, as MaxText's test does): every
    /// elementwise op is its own XLA executable and rounds separately. Code that JAX compiles
    /// even then (the sync inside `jax.lax.cond`) contracts as under `Jit`.
    Eager,
    /// `jax.jit` of the whole step: one executable per step, in which XLA's CPU backend
    /// contracts a product feeding an add into one FMA (the scenario's doc lists where).
    Jit,
}

impl XlaMode {
    /// The name used in profile files (`eager`, `jit`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Eager => "eager",
            Self::Jit => "jit",
        }
    }
}

/// A profile or modifier table as written in TOML. Every part is optional in a modifier and
/// required in a profile.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileToml {
    /// One line describing it.
    pub description: Option<String>,
    /// `single`, `mkl`, `blocked:<kc>` or `chunks:<s>`.
    pub split: Option<String>,
    /// `fma`, `mul-add` or `pairwise`.
    pub accum: Option<String>,
    /// `f32`, `bf16`, `bf16x3`, `bf16x6`, `tf32-rne`, `tf32-rna` or `tf32-trunc`.
    pub passes: Option<String>,
    /// `ring`, `rank-order` or `tree`.
    pub allreduce: Option<String>,
    /// `f32` or `bf16`.
    pub wire: Option<String>,
    /// `avx2` (default) or `avx512`: the vector width of torch's CPU kernels.
    pub torch_isa: Option<String>,
    /// `avx512` (default) or `avx2`: the ISA of oneDNN's kernels (torch's exact gelu).
    pub onednn_isa: Option<String>,
    /// Must be `true` for a table that replaces an already defined (e.g. built-in) profile or
    /// modifier of the same name, which then changes for every scenario.
    #[serde(default, rename = "override")]
    pub overrides: bool,
    /// `mkl` (torch's CPU `torch.tanh`, MKL `vmsTanh`) or `cr` (correctly rounded, default).
    pub tanh: Option<String>,
    /// `mkl` (torch's CPU `torch.sqrt`, MKL `vsSqrt`, in Adam's update) or `cr` (correctly
    /// rounded, default).
    pub sqrt: Option<String>,
    /// `eager` or `jit`: how a JAX scenario's program executes (default: the scenario's).
    pub xla: Option<String>,
    /// `none` or a built-in revealed-order file (`mkl-threads-1`, `mkl-threads-2`,
    /// `mkl-threads-4`, `mkl-threads-8`): per-element matmul orders measured by `scripts/reveal_order.py`.
    pub matmul_orders: Option<String>,
    /// `none`, `mkl-sgemm-1t` or `mkl-sgemm-2t` (torch's f32 matmuls as MKL `sgemm` orders
    /// them at one or two threads, for every shape: [`crate::kernels::mkl_sgemm`]).
    pub order_model: Option<String>,
}

/// The `[profiles.*]` and `[modifiers.*]` tables of a profiles file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilesToml {
    /// Named profiles.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileToml>,
    /// Named modifiers.
    #[serde(default)]
    pub modifiers: BTreeMap<String, ProfileToml>,
}

/// The built-in profiles file.
pub const BUILTIN_PROFILES: &str = include_str!("../../configs/profiles.toml");

/// All known profiles and modifiers, validated.
#[derive(Debug, Clone, Default)]
pub struct ProfileRegistry {
    profiles: BTreeMap<String, Profile>,
    modifiers: BTreeMap<String, (String, ProfileToml)>,
    notes: Vec<String>,
}

/// Longest profile spec (`base+modifier+...`).
pub const MAX_SPEC_LEN: usize = 256;

fn parse_split(file: &str, key: &str, s: &str) -> Result<KSplit, InputError> {
    let bad = || {
        InputError::config(
            file,
            key,
            format!(
                "`{s}` is not a split; allowed: single, mkl, blocked:<kc>, chunks:<s> (kc, s >= 1)"
            ),
        )
    };
    match s {
        "single" => Ok(KSplit::Single),
        "mkl" => Ok(KSplit::Mkl),
        _ => {
            let (kind, n) = s.split_once(':').ok_or_else(bad)?;
            let n: usize = n.trim().parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            match kind {
                "blocked" => Ok(KSplit::Blocked(n)),
                "chunks" => Ok(KSplit::Chunks(n)),
                _ => Err(bad()),
            }
        }
    }
}

fn parse_accum(file: &str, key: &str, s: &str) -> Result<Accum, InputError> {
    match s {
        "fma" => Ok(Accum::Fma),
        "mul-add" => Ok(Accum::MulAdd),
        "pairwise" => Ok(Accum::Pairwise),
        _ => Err(InputError::config(
            file,
            key,
            format!("`{s}` is not an accumulation; allowed: fma, mul-add, pairwise"),
        )),
    }
}

fn parse_passes(file: &str, key: &str, s: &str) -> Result<Passes, InputError> {
    match s {
        "f32" => Ok(Passes::F32),
        "bf16" => Ok(Passes::Bf16x1),
        "bf16x3" => Ok(Passes::Bf16x3),
        "bf16x6" => Ok(Passes::Bf16x6),
        "tf32-rne" => Ok(Passes::Tf32(Tf32Mode::Rne)),
        "tf32-rna" => Ok(Passes::Tf32(Tf32Mode::Rna)),
        "tf32-trunc" => Ok(Passes::Tf32(Tf32Mode::Trunc)),
        _ => Err(InputError::config(
            file,
            key,
            format!("`{s}` is not a pass scheme; allowed: f32, bf16, bf16x3, bf16x6, tf32-rne, tf32-rna, tf32-trunc"),
        )),
    }
}

fn parse_algo(file: &str, key: &str, s: &str) -> Result<AllReduceAlgo, InputError> {
    match s {
        "ring" => Ok(AllReduceAlgo::Ring),
        "rank-order" => Ok(AllReduceAlgo::RankOrder),
        "tree" => Ok(AllReduceAlgo::Tree),
        _ => Err(InputError::config(
            file,
            key,
            format!("`{s}` is not an all-reduce algorithm; allowed: ring, rank-order, tree"),
        )),
    }
}

fn parse_wire(file: &str, key: &str, s: &str) -> Result<Wire, InputError> {
    match s {
        "f32" => Ok(Wire::F32),
        "bf16" => Ok(Wire::Bf16),
        _ => Err(InputError::config(
            file,
            key,
            format!("`{s}` is not a wire dtype; allowed: f32, bf16"),
        )),
    }
}

/// Applies the parts named in `t` to `p`.
fn apply(file: &str, prefix: &str, t: &ProfileToml, p: &mut Profile) -> Result<(), InputError> {
    if let Some(s) = &t.split {
        p.matmul.split = parse_split(file, &format!("{prefix}.split"), s)?;
    }
    if let Some(s) = &t.accum {
        p.matmul.accum = parse_accum(file, &format!("{prefix}.accum"), s)?;
    }
    if let Some(s) = &t.passes {
        p.matmul.passes = parse_passes(file, &format!("{prefix}.passes"), s)?;
    }
    if let Some(s) = &t.allreduce {
        p.allreduce = parse_algo(file, &format!("{prefix}.allreduce"), s)?;
    }
    if let Some(s) = &t.wire {
        p.wire = parse_wire(file, &format!("{prefix}.wire"), s)?;
    }
    if let Some(s) = &t.torch_isa {
        p.torch_isa = match s.as_str() {
            "avx2" => TorchIsa::Avx2,
            "avx512" => TorchIsa::Avx512,
            _ => {
                return Err(InputError::config(
                    file,
                    format!("{prefix}.torch_isa"),
                    format!("`{s}` is not allowed; allowed: avx2, avx512"),
                ))
            }
        };
    }
    if let Some(s) = &t.onednn_isa {
        p.onednn_isa = match s.as_str() {
            "avx2" => OneDnnIsa::Avx2,
            "avx512" => OneDnnIsa::Avx512,
            _ => {
                return Err(InputError::config(
                    file,
                    format!("{prefix}.onednn_isa"),
                    format!("`{s}` is not allowed; allowed: avx512, avx2"),
                ))
            }
        };
    }
    if let Some(s) = &t.tanh {
        p.tanh = match s.as_str() {
            "mkl" => TanhKernel::Mkl,
            "cr" => TanhKernel::CorrectlyRounded,
            _ => {
                return Err(InputError::config(
                    file,
                    format!("{prefix}.tanh"),
                    format!("`{s}` is not a tanh kernel; allowed: mkl, cr"),
                ))
            }
        };
    }
    if let Some(s) = &t.sqrt {
        p.sqrt = match s.as_str() {
            "mkl" => SqrtKernel::Mkl,
            "cr" => SqrtKernel::CorrectlyRounded,
            _ => {
                return Err(InputError::config(
                    file,
                    format!("{prefix}.sqrt"),
                    format!("`{s}` is not a sqrt kernel; allowed: mkl, cr"),
                ))
            }
        };
    }
    if let Some(s) = &t.matmul_orders {
        p.orders = match s.as_str() {
            "none" => None,
            name => match RevealedOrders::builtin(name) {
                Some(r) => Some(Arc::new(r?)),
                None => {
                    let names: Vec<&str> = crate::scenario::revealed_file::BUILTIN
                        .iter()
                        .map(|(n, _)| *n)
                        .collect();
                    return Err(InputError::config(
                        file,
                        format!("{prefix}.matmul_orders"),
                        format!(
                            "`{s}` is not a revealed-order file; allowed: none, {}",
                            names.join(", ")
                        ),
                    ));
                }
            },
        };
    }
    if let Some(s) = &t.order_model {
        p.order_model = match s.as_str() {
            "none" => None,
            name => Some(OrderModel::parse(name).ok_or_else(|| {
                InputError::config(
                    file,
                    format!("{prefix}.order_model"),
                    format!(
                        "`{s}` is not an order model; allowed: none, {}",
                        OrderModel::ALL.map(OrderModel::name).join(", ")
                    ),
                )
            })?),
        };
    }
    if let Some(s) = &t.xla {
        p.xla = Some(match s.as_str() {
            "eager" => XlaMode::Eager,
            "jit" => XlaMode::Jit,
            _ => {
                return Err(InputError::config(
                    file,
                    format!("{prefix}.xla"),
                    format!("`{s}` is not allowed; allowed: eager, jit"),
                ))
            }
        });
    }
    Ok(())
}

impl ProfileRegistry {
    /// The registry of the built-in profiles.
    pub fn builtin() -> Result<Self, InputError> {
        let mut r = Self::default();
        r.add_toml("built-in configs/profiles.toml", BUILTIN_PROFILES)?;
        Ok(r)
    }

    /// Adds (or replaces) the profiles and modifiers of a TOML document.
    pub fn add_toml(&mut self, file: &str, text: &str) -> Result<(), InputError> {
        let parsed: ProfilesToml = toml::from_str(text).map_err(|e| toml_error(file, e))?;
        self.add(file, &parsed)
    }

    /// Adds (or replaces) parsed profiles and modifiers.
    pub fn add(&mut self, file: &str, parsed: &ProfilesToml) -> Result<(), InputError> {
        for (kind, names) in [
            ("profile", parsed.profiles.iter().collect::<Vec<_>>()),
            ("modifier", parsed.modifiers.iter().collect()),
        ] {
            for (name, t) in names {
                let exists = if kind == "profile" {
                    self.profiles.contains_key(name)
                } else {
                    self.modifiers.contains_key(name)
                };
                if exists && !t.overrides {
                    return Err(InputError::config(
                        file,
                        format!("{kind}s.{name}"),
                        format!(
                            "redefines the {kind} `{name}` that is already defined (built-in or by \
                             an earlier config) for every scenario; add `override = true` to that \
                             table to replace it, or choose another name"
                        ),
                    ));
                }
                if exists {
                    self.notes.push(format!(
                        "{file} overrides the {kind} `{name}` for every scenario"
                    ));
                }
            }
        }
        for (name, t) in &parsed.profiles {
            let prefix = format!("profiles.{name}");
            validate_name(file, &prefix, name)?;
            for (part, v) in [
                ("split", &t.split),
                ("accum", &t.accum),
                ("passes", &t.passes),
                ("allreduce", &t.allreduce),
                ("wire", &t.wire),
            ] {
                if v.is_none() {
                    return Err(InputError::config(
                        file,
                        format!("{prefix}.{part}"),
                        "missing; a profile must set split, accum, passes, allreduce and wire",
                    ));
                }
            }
            let mut p = Profile {
                name: name.clone(),
                description: t.description.clone().unwrap_or_default(),
                matmul: MatmulModel {
                    split: KSplit::Single,
                    accum: Accum::Fma,
                    passes: Passes::F32,
                },
                allreduce: AllReduceAlgo::Ring,
                wire: Wire::F32,
                torch_isa: TorchIsa::Avx2,
                onednn_isa: OneDnnIsa::Avx512,
                tanh: TanhKernel::CorrectlyRounded,
                sqrt: SqrtKernel::CorrectlyRounded,
                xla: None,
                orders: None,
                order_model: None,
            };
            apply(file, &prefix, t, &mut p)?;
            self.profiles.insert(name.clone(), p);
        }
        for (name, t) in &parsed.modifiers {
            let prefix = format!("modifiers.{name}");
            validate_name(file, &prefix, name)?;
            // Validate now so a bad modifier fails at load time, not at use.
            let mut scratch = Profile {
                name: String::new(),
                description: String::new(),
                matmul: MatmulModel {
                    split: KSplit::Single,
                    accum: Accum::Fma,
                    passes: Passes::F32,
                },
                allreduce: AllReduceAlgo::Ring,
                wire: Wire::F32,
                torch_isa: TorchIsa::Avx2,
                onednn_isa: OneDnnIsa::Avx512,
                tanh: TanhKernel::CorrectlyRounded,
                sqrt: SqrtKernel::CorrectlyRounded,
                xla: None,
                orders: None,
                order_model: None,
            };
            apply(file, &prefix, t, &mut scratch)?;
            self.modifiers
                .insert(name.clone(), (file.to_string(), t.clone()));
        }
        Ok(())
    }

    /// One line per override of an existing profile or modifier (`override = true`).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Adds the profile a revealed-order file defines (its `[revealed]` `name` and `base`):
    /// the base profile with every revealed matmul executed by its programs.
    pub fn add_revealed(&mut self, orders: RevealedOrders) -> Result<String, InputError> {
        let file = orders.source.clone();
        let (Some(name), Some(base)) = (orders.meta.name.clone(), orders.meta.base.clone()) else {
            return Err(InputError::config(
                &file,
                "revealed",
                "a revealed-order file passed with --config needs `name` and `base` (the profile it defines and the profile it starts from)",
            ));
        };
        validate_name(&file, "revealed.name", &name)?;
        let mut p = self.profiles.get(&base).cloned().ok_or_else(|| {
            InputError::config(
                &file,
                "revealed.base",
                unknown_name("profile", &base, &self.profile_names()),
            )
        })?;
        p.description = format!(
            "{base} with the matmul orders revealed in {file} ({} {} thread(s), torch {}, {})",
            orders.meta.device, orders.meta.threads, orders.meta.torch, orders.meta.cpu_capability
        );
        p.orders = Some(Arc::new(orders));
        p.name = name.clone();
        self.profiles.insert(name.clone(), p);
        Ok(name)
    }

    /// Names of the profiles, sorted.
    pub fn profile_names(&self) -> Vec<&str> {
        self.profiles.keys().map(String::as_str).collect()
    }

    /// Names of the modifiers, sorted.
    pub fn modifier_names(&self) -> Vec<&str> {
        self.modifiers.keys().map(String::as_str).collect()
    }

    /// All profiles, sorted by name.
    pub fn profiles(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.values()
    }

    /// A modifier's description.
    pub fn modifier_description(&self, name: &str) -> Option<&str> {
        self.modifiers
            .get(name)
            .and_then(|(_, t)| t.description.as_deref())
    }

    /// Resolves a spec `base+mod+mod`; `flag` names where the spec came from, for errors.
    pub fn resolve(&self, spec: &str, flag: &str) -> Result<Profile, InputError> {
        if spec.len() > MAX_SPEC_LEN {
            return Err(InputError::flag(
                flag,
                format!(
                    "a profile spec of {} characters is not allowed; at most {MAX_SPEC_LEN}",
                    spec.len()
                ),
            ));
        }
        let all: Vec<&str> = spec.split('+').map(str::trim).collect();
        if let Some((i, m)) = all.iter().enumerate().find(|(i, m)| all[..*i].contains(m)) {
            let _ = i;
            return Err(InputError::flag(
                flag,
                format!("`{spec}` names `{m}` twice; give each modifier once"),
            ));
        }
        let mut parts = all.into_iter();
        let base = parts.next().unwrap_or_default();
        let mut p = self.profiles.get(base).cloned().ok_or_else(|| {
            InputError::flag(flag, unknown_name("profile", base, &self.profile_names()))
        })?;
        for m in parts {
            let (file, t) = self.modifiers.get(m).ok_or_else(|| {
                InputError::flag(
                    flag,
                    unknown_name("profile modifier", m, &self.modifier_names()),
                )
            })?;
            apply(file, &format!("modifiers.{m}"), t, &mut p)?;
            if let Some(d) = &t.description {
                p.description = format!("{}; {}", p.description, d);
            }
        }
        p.name = spec.to_string();
        Ok(p)
    }
}

/// Longest name (scenario, parametrization id, profile, modifier, policy).
pub const MAX_NAME_LEN: usize = 128;

/// Names are used in CSV cells and on the command line: keep them to `[A-Za-z0-9._-]`.
pub fn validate_name(file: &str, key: &str, name: &str) -> Result<(), InputError> {
    if name.len() > MAX_NAME_LEN {
        return Err(InputError::config(
            file,
            key,
            format!(
                "a name of {} characters is not allowed; at most {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(InputError::config(
            file,
            key,
            format!("name `{name}` may only use letters, digits, '-', '_' and '.'"),
        ));
    }
    Ok(())
}

/// Turns a TOML parse error into an [`InputError`] naming the file and, where toml knows it,
/// the key and line.
pub fn toml_error(file: &str, e: toml::de::Error) -> InputError {
    let msg = e.message().to_string();
    let location = e
        .span()
        .map(|s| format!(" (at byte {})", s.start))
        .unwrap_or_default();
    InputError::config(file, "(document)", format!("{msg}{location}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse_and_cpu_fma_is_mkl_fma() {
        let r = ProfileRegistry::builtin().unwrap();
        let p = r.resolve("cpu-fma", "--profile").unwrap();
        assert_eq!(p.matmul.split, KSplit::Mkl);
        assert_eq!(p.matmul.accum, Accum::Fma);
        assert_eq!(p.matmul.passes, Passes::F32);
        for name in [
            "cpu-nofma",
            "pairwise",
            "splitk-4",
            "tpu-bf16",
            "gpu-tf32",
            "f32",
        ] {
            r.resolve(name, "--profile").unwrap();
        }
    }

    #[test]
    fn torch_cpu_profiles_use_mkl_tanh_and_tanh_cr_overrides_it() {
        let r = ProfileRegistry::builtin().unwrap();
        for name in ["cpu-fma", "cpu-fma-avx512"] {
            assert_eq!(r.resolve(name, "--profile").unwrap().tanh, TanhKernel::Mkl);
            let p = r.resolve(&format!("{name}+tanh-cr"), "--profile").unwrap();
            assert_eq!(p.tanh, TanhKernel::CorrectlyRounded);
            assert_eq!(p.matmul.split, KSplit::Mkl, "only the tanh changes");
        }
        for name in ["f32", "cpu-nofma", "tpu-bf16", "gpu-tf32"] {
            let p = r.resolve(name, "--profile").unwrap();
            assert_eq!(p.tanh, TanhKernel::CorrectlyRounded, "{name}");
            let p = r.resolve(&format!("{name}+tanh-mkl"), "--profile").unwrap();
            assert_eq!(p.tanh, TanhKernel::Mkl, "{name}");
        }
        let e = ProfileRegistry::default()
            .add_toml("my.toml", "[modifiers.t]\ntanh='sleef'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("my.toml") && e.contains("modifiers.t.tanh") && e.contains("mkl, cr"),
            "{e}"
        );
    }

    #[test]
    fn torch_cpu_profiles_use_mkl_sqrt_and_sqrt_cr_overrides_it() {
        let r = ProfileRegistry::builtin().unwrap();
        for name in ["cpu-fma", "cpu-fma-avx512", "cpu-fma+mkl-threads-1"] {
            assert_eq!(r.resolve(name, "--profile").unwrap().sqrt, SqrtKernel::Mkl);
            let p = r.resolve(&format!("{name}+sqrt-cr"), "--profile").unwrap();
            assert_eq!(p.sqrt, SqrtKernel::CorrectlyRounded);
            assert_eq!(p.tanh, TanhKernel::Mkl, "only the sqrt changes");
        }
        for name in ["f32", "cpu-nofma", "tpu-bf16", "gpu-tf32"] {
            let p = r.resolve(name, "--profile").unwrap();
            assert_eq!(p.sqrt, SqrtKernel::CorrectlyRounded, "{name}");
            let p = r.resolve(&format!("{name}+sqrt-mkl"), "--profile").unwrap();
            assert_eq!(p.sqrt, SqrtKernel::Mkl, "{name}");
        }
        let e = ProfileRegistry::default()
            .add_toml("my.toml", "[modifiers.t]\nsqrt='hw'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("my.toml") && e.contains("modifiers.t.sqrt") && e.contains("mkl, cr"),
            "{e}"
        );
    }

    #[test]
    fn modifiers_compose_left_to_right() {
        let r = ProfileRegistry::builtin().unwrap();
        let p = r
            .resolve("cpu-fma+allreduce-bf16+allreduce-tree", "--profile")
            .unwrap();
        assert_eq!(p.wire, Wire::Bf16);
        assert_eq!(p.allreduce, AllReduceAlgo::Tree);
        assert_eq!(p.matmul.split, KSplit::Mkl);
        assert_eq!(p.name, "cpu-fma+allreduce-bf16+allreduce-tree");
    }

    #[test]
    fn unknown_profile_lists_the_valid_ones() {
        let r = ProfileRegistry::builtin().unwrap();
        let e = r.resolve("cpu-fmaa", "--profile").unwrap_err().to_string();
        assert!(e.contains("--profile"), "{e}");
        assert!(e.contains("cpu-fmaa") && e.contains("cpu-nofma"), "{e}");
    }

    #[test]
    fn xla_mode_is_optional_and_set_by_the_modifiers() {
        let r = ProfileRegistry::builtin().unwrap();
        assert_eq!(r.resolve("f32", "--profile").unwrap().xla, None);
        let e = r.resolve("tpu-bf16+xla-eager", "--profile").unwrap();
        assert_eq!(
            (e.xla, e.matmul.passes),
            (Some(XlaMode::Eager), Passes::Bf16x1)
        );
        let j = r.resolve("f32+xla-eager+xla-jit", "--profile").unwrap();
        assert_eq!(j.xla, Some(XlaMode::Jit));
        let mut r = ProfileRegistry::default();
        let e = r
            .add_toml("my.toml", "[modifiers.m]\nxla = 'lazy'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("my.toml") && e.contains("modifiers.m.xla") && e.contains("eager, jit"),
            "{e}"
        );
    }

    #[test]
    fn matmul_orders_name_a_builtin_file_or_none() {
        let mut r = ProfileRegistry::builtin().unwrap();
        let e = r
            .add_toml(
                "my.toml",
                "[modifiers.m]\nmatmul_orders = 'mkl-threads-3'\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("modifiers.m.matmul_orders")
                && e.contains("none, mkl-threads-1, mkl-threads-2"),
            "{e}"
        );
        let p = r
            .resolve("f32+mkl-threads-1+mkl-threads-4", "--profile")
            .unwrap();
        assert_eq!(
            (p.orders.as_ref().map(|o| o.meta.threads), p.order_model),
            (Some(4), None),
            "later modifiers win"
        );
        for (mods, model) in [
            ("mkl-threads-1+mkl-threads-2", OrderModel::MklSgemm2t),
            ("mkl-threads-2+mkl-threads-1", OrderModel::MklSgemm1t),
            ("mkl-threads-4+mkl-threads-2", OrderModel::MklSgemm2t),
        ] {
            let p = r.resolve(&format!("f32+{mods}"), "--profile").unwrap();
            assert_eq!(
                (p.orders.is_none(), p.order_model),
                (true, Some(model)),
                "later modifiers win: {mods}"
            );
        }
        // The built-in one- and two-thread files still load (the tests check the models
        // against them).
        for t in [1, 2] {
            let p = r
                .add_toml(
                    "my.toml",
                    &format!("[modifiers.m{t}]\nmatmul_orders = 'mkl-threads-{t}'\n"),
                )
                .and_then(|_| r.resolve(&format!("f32+m{t}"), "--profile"))
                .unwrap();
            assert_eq!(p.orders.as_ref().map(|o| o.meta.threads), Some(t));
        }
        let e = r
            .add_toml("my.toml", "[modifiers.m4]\norder_model = 'mkl-sgemm-4t'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("modifiers.m4.order_model")
                && e.contains("none, mkl-sgemm-1t, mkl-sgemm-2t"),
            "{e}"
        );
        // A revealed file needs a name and a base to be a profile.
        let head = "[revealed]\ndevice = 'cpu'\nthreads = 2\ntorch = 't'\ncpu_capability = 'c'\nmachine = 'm'\n";
        let o = RevealedOrders::parse("rev.toml", head).unwrap();
        let e = r.add_revealed(o).unwrap_err().to_string();
        assert!(
            e.contains("rev.toml") && e.contains("needs `name` and `base`"),
            "{e}"
        );
        let o = RevealedOrders::parse(
            "rev.toml",
            &format!("{head}name = 'x'\nbase = 'cpu-fmaa'\n"),
        )
        .unwrap();
        let e = r.add_revealed(o).unwrap_err().to_string();
        assert!(
            e.contains("revealed.base") && e.contains("cpu-nofma"),
            "{e}"
        );
        let o = RevealedOrders::parse("rev.toml", &format!("{head}name = 'x'\nbase = 'f32'\n"))
            .unwrap();
        assert_eq!(r.add_revealed(o).unwrap(), "x");
        let x = r.resolve("x", "--profile").unwrap();
        assert_eq!(
            (x.matmul, x.orders.is_some()),
            (r.resolve("f32", "--profile").unwrap().matmul, true)
        );
    }

    #[test]
    fn bad_part_names_file_and_key() {
        let mut r = ProfileRegistry::default();
        let e = r
            .add_toml(
                "my.toml",
                "[profiles.x]\nsplit='chunks:0'\naccum='fma'\npasses='f32'\nallreduce='ring'\nwire='f32'\n",
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("my.toml") && e.contains("profiles.x.split"),
            "{e}"
        );
        let e = r
            .add_toml("my.toml", "[profiles.y]\nsplit='mkl'\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("profiles.y.accum") && e.contains("missing"),
            "{e}"
        );
    }
}
