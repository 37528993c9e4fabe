//! Draws of a resolved graph: initial parameters (per seed) and inputs (per micro-step,
//! seed-independent).

use crate::scenario::config::RngKind;
use std::fmt::Write as _;

use crate::rng::chacha::ChaChaStream;
use crate::rng::torch::TorchGenerator;
use crate::scenario::ir::{
    ChaChaInit, DrawKind, FixedValues, Fixup, Op, ParamInit, ResolvedGraph, TorchInit, WeightLayout,
};

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
                        (DrawKind::Rand { seeded: false }, Some(t)) => {
                            v.f = vec![0.0; n];
                            t.rand(&mut v.f);
                        }
                        (DrawKind::Rand { seeded: false }, None) => {
                            v.f = vec![0.0; n];
                            ChaChaStream::new(seed, &d.name).fill_uniform(&mut v.f, 0.0, 1.0);
                        }
                        // Drawn per sweep seed with the parameters ([`draw_params`]).
                        (DrawKind::Rand { seeded: true }, _) => {}
                        (DrawKind::Randint { high }, Some(t)) => {
                            v.i = vec![0; n];
                            t.randint(high, &mut v.i);
                        }
                        (DrawKind::Randn, None) => {
                            v.f = vec![0.0; n];
                            ChaChaStream::new(seed, &d.name).fill_normal(&mut v.f, 0.0, 1.0);
                        }
                        // Supplied by the outer loop's data, per replica.
                        (DrawKind::Given, _) => {}
                        // Written in the file: nothing drawn, the generator not advanced.
                        (DrawKind::Fixed { .. }, _) => match &d.values {
                            Some(FixedValues::F32(f)) => v.f = f.clone(),
                            Some(FixedValues::I64(i)) => v.i = i.clone(),
                            None => unreachable!("a fixed input carries its values"),
                        },
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

/// The inputs drawn once per sweep seed ([`DrawKind::Rand`] with `seeded`), in table order.
pub fn seeded_inputs(g: &ResolvedGraph) -> impl Iterator<Item = &crate::scenario::ir::InputDraw> {
    g.inputs
        .draws
        .iter()
        .filter(|d| d.kind == DrawKind::Rand { seeded: true })
}

/// Draws the initial parameters of `seed` into `out` (indexed by parameter; a tied parameter's
/// entry is left empty: the computations use its table's storage and never read it), reusing
/// `out`'s buffers.
///
/// Torch: `manual_seed(seed)` on `gen` (created on first use), then each parameter in table
/// order by its [`TorchInit`], zero rows last. A tied parameter's draws are consumed without
/// being transformed ([`TorchGenerator::discard_fill`]) when a parameter drawn after it is
/// read, and skipped after the last one: nothing draws from `gen` again before the next
/// `manual_seed` (the inputs have generators of their own), so the words they would take
/// are never seen.
/// ChaCha: each untied drawn parameter from the stream named after it ([`TorchInit::chacha`]);
/// tied parameters draw nothing. [`ParamInit::Zeros`] / [`ParamInit::Ones`] draw nothing.
///
/// Seeded inputs ([`DrawKind::Rand`] with `seeded`) come first: right after `manual_seed`,
/// before any parameter, each in table order (`torch.rand`; ChaCha: `fill_uniform(0, 1)` from
/// the stream named after the input). Their values follow the parameters in `out`
/// (`out[params.len() + k]` for the k-th seeded input; [`seeded_inputs`]).
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
    let np = g.params.len();
    out.resize_with(np + seeded_inputs(g).count(), Vec::new);
    for (k, d) in seeded_inputs(g).enumerate() {
        let n: usize = d.shape.iter().product();
        let buf = &mut out[np + k];
        if buf.len() != n {
            buf.clear();
            buf.resize(n, 0.0);
        }
        match torch.as_deref_mut() {
            Some(t) => t.rand(buf),
            None => ChaChaStream::new(seed, &d.name).fill_uniform(buf, 0.0, 1.0),
        }
    }
    // After the last drawn parameter that is read, no draw is seen.
    let read_until = g
        .params
        .iter()
        .rposition(|p| matches!(p.init, ParamInit::Draw(_)) && p.tie.is_none())
        .map_or(0, |i| i + 1);
    for (i, (p, buf)) in g.params.iter().zip(out.iter_mut()).enumerate() {
        let n: usize = p.shape.iter().product();
        if p.tie.is_some() {
            buf.clear();
            if let (ParamInit::Draw(rule), Some(t), true) =
                (p.init, torch.as_deref_mut(), i < read_until)
            {
                t.discard_fill(n, matches!(rule, TorchInit::Normal { .. }));
            }
            continue;
        }
        if buf.len() != n {
            buf.clear();
            buf.resize(n, 0.0);
        }
        match p.init {
            ParamInit::Zeros => buf.fill(0.0),
            ParamInit::Ones => buf.fill(1.0),
            // Only outer-loop graphs have fixed values (`OuterData::Fixed`), and the outer loop
            // reads them from there; there is nothing to draw.
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
        if p.tie.is_some() {
            continue;
        }
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

/// Draws seed `seed`'s outer-loop data ([`crate::scenario::ir::OuterData::Teacher`]): the
/// initial parameters into `init` (indexed by parameter) and the global inputs `x` (the
/// model input, `replicas × batch` rows) and `y` (the targets). `name` is a reused buffer for
/// stream names and `teacher` for the teacher weights, so nothing is allocated once they have
/// grown.
///
/// Order: the j-th linear layer's kernel (1-based, layer order) from stream `init.w{j}`,
/// `N(0, 1/fan_in)` with the standard deviation `sqrt(1/fan_in)` computed in f64 and rounded
/// once to f32, passed to [`ChaChaStream::fill_normal`] (values in index order of the
/// `[in, out]` kernel); every bias 0. Then `data.teacher` (`T`, `[in, out]`,
/// `N(0, 1/in)`), `data.teacher.bias` (`N(0, 1)`), and per replica r in order
/// `data.replica{r}.x` (`N(0, 1)`) then `data.replica{r}.noise` (one normal per target,
/// example-major). Target `y[e][o]`: `acc = 0; acc += x[e][i]·T[i][o]` for i ascending, in
/// f64 (products of f32 values are exact there); then `acc + tb[o]`, then `+ noise_std·ε`
/// (f64), rounded once to f32.
#[allow(clippy::too_many_arguments)]
pub fn draw_teacher(
    g: &ResolvedGraph,
    replicas: usize,
    noise_std: f64,
    seed: u64,
    init: &mut Vec<Vec<f32>>,
    x: &mut Vec<f32>,
    y: &mut Vec<f32>,
    name: &mut String,
    teacher: &mut Vec<f32>,
) {
    init.resize_with(g.params.len(), Vec::new);
    for (p, buf) in g.params.iter().zip(init.iter_mut()) {
        let n: usize = p.shape.iter().product();
        buf.clear();
        buf.resize(n, 0.0);
    }
    let mut j = 0;
    let mut first_in = None;
    for l in &g.layers {
        if let Op::Linear {
            x: lx,
            weight,
            layout: WeightLayout::InOut,
            ..
        } = l.op
        {
            j += 1;
            let fan_in = g.width(lx);
            first_in.get_or_insert(lx);
            let std = (1.0 / fan_in as f64).sqrt() as f32;
            name.clear();
            let _ = write!(name, "init.w{j}");
            ChaChaStream::new(seed, name).fill_normal(&mut init[weight.0], 0.0, std);
        }
    }
    let (ni, no) = (first_in.map_or(0, |t| g.width(t)), g.width(g.loss.input));
    let nb = g.rows(g.loss.input);
    let std_in = (1.0 / ni as f64).sqrt() as f32;
    teacher.clear();
    teacher.resize(ni * no + no, 0.0);
    let (tw, tb) = teacher.split_at_mut(ni * no);
    ChaChaStream::new(seed, "data.teacher").fill_normal(tw, 0.0, std_in);
    ChaChaStream::new(seed, "data.teacher.bias").fill_normal(tb, 0.0, 1.0);
    x.clear();
    x.resize(replicas * nb * ni, 0.0);
    y.clear();
    y.resize(replicas * nb * no, 0.0);
    for r in 0..replicas {
        let xr = &mut x[r * nb * ni..(r + 1) * nb * ni];
        name.clear();
        let _ = write!(name, "data.replica{r}.x");
        ChaChaStream::new(seed, name).fill_normal(xr, 0.0, 1.0);
        name.clear();
        let _ = write!(name, "data.replica{r}.noise");
        let mut noise = ChaChaStream::new(seed, name);
        let yr = &mut y[r * nb * no..(r + 1) * nb * no];
        for e in 0..nb {
            for o in 0..no {
                let mut acc = 0.0f64;
                for i in 0..ni {
                    acc += xr[e * ni + i] as f64 * tw[i * no + o] as f64;
                }
                let eps = noise.normal_f32(0.0, 1.0) as f64;
                yr[e * no + o] = (acc + tb[o] as f64 + noise_std * eps) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every parameter drawn in table order, tied ones in full too, zero rows last: what
    /// `draw_params` drew before it skipped the values nobody reads.
    fn drawn_in_full(g: &ResolvedGraph, seed: u64) -> Vec<Vec<f32>> {
        let mut t = TorchGenerator::new(seed);
        let mut out: Vec<Vec<f32>> = Vec::new();
        for p in &g.params {
            let mut v = vec![0.0f32; p.shape.iter().product()];
            if let ParamInit::Draw(rule) = p.init {
                match rule {
                    TorchInit::KaimingUniform { fan_in } => {
                        t.kaiming_uniform_linear(&mut v, fan_in)
                    }
                    TorchInit::BiasUniform { fan_in } => t.linear_bias_uniform(&mut v, fan_in),
                    TorchInit::Normal {
                        mean,
                        std,
                        zero_row,
                    } => {
                        t.normal_(&mut v, mean, std);
                        if let Some(row) = zero_row {
                            let dim = *p.shape.last().unwrap_or(&1);
                            v[row * dim..(row + 1) * dim].fill(0.0);
                        }
                    }
                }
            }
            out.push(v);
        }
        out
    }

    /// T1 as written (the tied head drawn last: its draws skipped) and with the head
    /// constructed before the projection (its draws consumed untransformed between read
    /// ones): every untied parameter bit for bit as drawn in full, every tied entry empty.
    #[test]
    fn tied_parameters_are_skipped_and_every_read_draw_is_unchanged() {
        let t1 = include_str!("../../configs/deepspeed_tied_row_parallel.toml");
        let reordered =
            format!("{t1}\n[init]\norder = [\"embedding\", \"head\", \"projection\"]\n");
        for (text, tied_last) in [(t1.to_string(), true), (reordered, false)] {
            let file = crate::scenario::file::parse_file("t1.toml", &text).expect("T1 parses");
            for g in &file.lowered {
                let names: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
                let tied = g.params.iter().position(|p| p.tie.is_some());
                let last_read = g.params.iter().rposition(|p| p.tie.is_none());
                assert_eq!(tied > last_read, tied_last, "{names:?}");
                for seed in [8173, 8199] {
                    let (mut gen, mut out) = (None, Vec::new());
                    draw_params(g, seed, &mut gen, &mut out);
                    let full = drawn_in_full(g, seed);
                    for ((p, got), want) in g.params.iter().zip(&out).zip(&full) {
                        if p.tie.is_some() {
                            assert!(got.is_empty(), "{} {names:?}", p.name);
                        } else {
                            let bits =
                                |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(got), bits(want), "{} {names:?} seed {seed}", p.name);
                        }
                    }
                }
            }
        }
    }
}
