//! Draws of a resolved graph: initial parameters (per seed) and inputs (per micro-step,
//! seed-independent).

use crate::config::RngKind;
use crate::graph::ir::{ChaChaInit, DrawKind, Fixup, ParamInit, ResolvedGraph, TorchInit};
use crate::rng::chacha::ChaChaStream;
use crate::rng::torch::TorchGenerator;

/// One drawn input of one micro-step: floats for `randn`, integers for `randint`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputValue {
    /// `randn` values (empty for an integer input).
    pub f: Vec<f32>,
    /// `randint` values (empty for a float input).
    pub i: Vec<i64>,
}

/// Draws every micro-step's inputs: for global micro-step `i`, each draw in table order from
/// `torch.manual_seed(seed_base + i)` (ChaCha: the stream named after the input, key
/// `seed_base + i`), then the fix-ups in order. Returns `[micro][input]`.
pub fn draw_inputs(g: &ResolvedGraph) -> Vec<Vec<InputValue>> {
    let micros = g.train.steps * g.train.micro_steps;
    (0..micros)
        .map(|i| {
            let seed = g.inputs.seed_base + i as u64;
            let mut torch = (g.rng == RngKind::Torch).then(|| TorchGenerator::new(seed));
            let mut out: Vec<InputValue> = g
                .inputs
                .draws
                .iter()
                .map(|d| {
                    let n: usize = d.shape.iter().product();
                    let mut v = InputValue::default();
                    match (d.kind, torch.as_mut()) {
                        (DrawKind::Randn, Some(t)) => {
                            v.f = vec![0.0; n];
                            t.randn(&mut v.f);
                        }
                        (DrawKind::Randint { high }, Some(t)) => {
                            v.i = vec![0; n];
                            t.randint(high, &mut v.i);
                        }
                        (DrawKind::Randn, None) => {
                            v.f = vec![0.0; n];
                            ChaChaStream::new(seed, &d.name).fill_normal(&mut v.f, 0.0, 1.0);
                        }
                        (DrawKind::Randint { high }, None) => {
                            let mut s = ChaChaStream::new(seed, &d.name);
                            v.i = (0..n)
                                .map(|_| (s.next_u32() as u64 % high) as i64)
                                .collect();
                        }
                    }
                    v
                })
                .collect();
            for f in &g.inputs.fixups {
                match *f {
                    Fixup::Set {
                        input,
                        index,
                        value,
                    } => out[input.0].i[index] = value,
                }
            }
            out
        })
        .collect()
}

/// Draws the initial parameters of `seed` into `out` (indexed by parameter; a tied parameter's
/// entry holds its own discarded draws), reusing `out`'s buffers.
///
/// Torch: `manual_seed(seed)` on `gen` (created on first use), then each parameter in table
/// order by its [`TorchInit`] (tied ones too: their draws are consumed), zero rows last.
/// ChaCha: each untied drawn parameter from the stream named after it ([`TorchInit::chacha`]);
/// tied parameters draw nothing. [`ParamInit::Zeros`] / [`ParamInit::Ones`] draw nothing.
pub fn draw_params(
    g: &ResolvedGraph,
    seed: u64,
    gen: &mut Option<TorchGenerator>,
    out: &mut Vec<Vec<f32>>,
) {
    out.resize_with(g.params.len(), Vec::new);
    let torch = match g.rng {
        RngKind::Torch => {
            let t = gen.get_or_insert_with(|| TorchGenerator::new(seed));
            t.reseed(seed);
            Some(t)
        }
        RngKind::ChaCha => None,
    };
    let mut torch = torch;
    for (p, buf) in g.params.iter().zip(out.iter_mut()) {
        let n: usize = p.shape.iter().product();
        if buf.len() != n {
            buf.clear();
            buf.resize(n, 0.0);
        }
        match p.init {
            ParamInit::Zeros => buf.fill(0.0),
            ParamInit::Ones => buf.fill(1.0),
            // Only the outer-loop engine runs graphs with fixed values (`OuterData::Fixed`),
            // and it reads them from there; there is nothing to draw.
            ParamInit::Fixed => {}
            ParamInit::Draw(rule) => match torch.as_deref_mut() {
                Some(t) => match rule {
                    TorchInit::KaimingUniform { fan_in } => t.kaiming_uniform_linear(buf, fan_in),
                    TorchInit::BiasUniform { fan_in } => t.linear_bias_uniform(buf, fan_in),
                    TorchInit::Normal { mean, std, .. } => t.normal_(buf, mean, std),
                },
                None if p.tie.is_some() => {}
                None => {
                    let mut s = ChaChaStream::new(seed, &p.name);
                    match rule.chacha() {
                        ChaChaInit::Uniform { fan_in } => {
                            let bound = 1.0 / (fan_in as f32).sqrt();
                            s.fill_uniform(buf, -bound, bound);
                        }
                        ChaChaInit::Normal { mean, std } => s.fill_normal(buf, mean, std),
                    }
                }
            },
        }
    }
    for (p, buf) in g.params.iter().zip(out.iter_mut()) {
        if let ParamInit::Draw(TorchInit::Normal {
            zero_row: Some(row),
            ..
        }) = p.init
        {
            let dim = *p.shape.last().unwrap_or(&1);
            buf[row * dim..(row + 1) * dim].fill(0.0);
        }
    }
}
