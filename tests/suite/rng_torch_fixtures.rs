//! Bit-exactness of `seedsweep::rng::torch` against PyTorch 2.15 CPU draws.
//!
//! The fixture `../shared/fixtures/torch_cpu_rng.json` (beside the repository) holds every float
//! as its IEEE-754 binary32 bit pattern; every element of every vector is compared by bits.

use seedsweep::rng::torch::TorchGenerator;
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/torch_cpu_rng.json"
);

fn fixture() -> Value {
    let text = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| {
        panic!(
            "cannot read the torch RNG fixture at {FIXTURE}: {e}. \
             The directory `../shared/fixtures/` must be present beside the repository \
             (it is not part of the crate)."
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{FIXTURE} is not valid JSON: {e}"))
}

fn cases<'a>(fx: &'a Value, kind: &str) -> &'a [Value] {
    let list = fx[kind]
        .as_array()
        .unwrap_or_else(|| panic!("fixture key `{kind}` is missing or not an array"));
    assert!(!list.is_empty(), "fixture key `{kind}` has no cases");
    list
}

fn uint(case: &Value, key: &str) -> u64 {
    case[key]
        .as_u64()
        .unwrap_or_else(|| panic!("fixture field `{key}` is missing or not an unsigned integer"))
}

fn bits(case: &Value, key: &str) -> Vec<u32> {
    case[key]
        .as_array()
        .unwrap_or_else(|| panic!("fixture field `{key}` is missing or not an array"))
        .iter()
        .map(|v| {
            let b = v.as_u64().expect("bit patterns are unsigned integers");
            u32::try_from(b).expect("bit patterns fit in u32")
        })
        .collect()
}

fn ints(case: &Value, key: &str) -> Vec<i64> {
    case[key]
        .as_array()
        .unwrap_or_else(|| panic!("fixture field `{key}` is missing or not an array"))
        .iter()
        .map(|v| v.as_i64().expect("token ids are integers"))
        .collect()
}

/// Collects mismatches across all vectors of one test, so a failure lists every bad vector.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
    vectors: usize,
    elements: usize,
}

impl Report {
    fn check_f32(&mut self, name: &str, seed: u64, expected: &[u32], actual: &[f32]) {
        let actual: Vec<u32> = actual.iter().map(|v| v.to_bits()).collect();
        self.check(name, seed, expected, &actual, |b| {
            format!("{b:#010x} ({:e})", f32::from_bits(*b))
        });
    }

    fn check<T: PartialEq>(
        &mut self,
        name: &str,
        seed: u64,
        expected: &[T],
        actual: &[T],
        show: impl Fn(&T) -> String,
    ) {
        self.vectors += 1;
        self.elements += expected.len();
        if expected.len() != actual.len() {
            self.failures.push(format!(
                "{name} (seed {seed}): expected {} elements, produced {}",
                expected.len(),
                actual.len()
            ));
            return;
        }
        let bad: Vec<usize> = (0..expected.len())
            .filter(|&i| expected[i] != actual[i])
            .collect();
        if let Some(&i) = bad.first() {
            self.failures.push(format!(
                "{name} (seed {seed}): {} of {} elements differ; first at index {i}: \
                 expected {}, actual {}",
                bad.len(),
                expected.len(),
                show(&expected[i]),
                show(&actual[i])
            ));
        }
    }

    fn finish(self, min_vectors: usize) {
        assert!(
            self.failures.is_empty(),
            "{} of {} vectors differ from torch:\n{}",
            self.failures.len(),
            self.vectors,
            self.failures.join("\n")
        );
        assert!(
            self.vectors >= min_vectors && self.elements > 0,
            "only {} vectors ({} elements) were checked, expected at least {min_vectors}",
            self.vectors,
            self.elements
        );
    }
}

/// The parameters of the fixture's model, built in torch's order.
struct Model {
    seed: u64,
    embedding: Vec<f32>,
    projection_weight: Vec<f32>,
    projection_bias: Vec<f32>,
    lm_head_weight: Vec<f32>,
}

/// `torch.manual_seed(seed)`; `nn.Embedding(vocab, hidden, padding_idx)` (normal_(0, 1) on the
/// whole weight, then the padding row zeroed); `nn.Linear(hidden, hidden)` (kaiming weight, then
/// bias); `nn.Linear(hidden, vocab, bias=False)` (kaiming weight).
fn build_model(case: &Value) -> Model {
    let seed = uint(case, "seed");
    let vocab = uint(case, "vocab") as usize;
    let hidden = uint(case, "hidden") as usize;
    let padding = case["padding_idx"].as_u64().map(|p| p as usize);
    let mut g = TorchGenerator::new(seed);

    let mut embedding = vec![0f32; vocab * hidden];
    g.normal_(&mut embedding, 0.0, 1.0);
    if let Some(p) = padding {
        embedding[p * hidden..(p + 1) * hidden].fill(0.0);
    }
    let mut projection_weight = vec![0f32; hidden * hidden];
    g.kaiming_uniform_linear(&mut projection_weight, hidden);
    let mut projection_bias = vec![0f32; hidden];
    g.linear_bias_uniform(&mut projection_bias, hidden);
    let mut lm_head_weight = vec![0f32; vocab * hidden];
    g.kaiming_uniform_linear(&mut lm_head_weight, hidden);

    Model {
        seed,
        embedding,
        projection_weight,
        projection_bias,
        lm_head_weight,
    }
}

fn check_model_part(key: &str, part: impl Fn(&Model) -> &[f32]) {
    let fx = fixture();
    let mut report = Report::default();
    for case in cases(&fx, "model_init") {
        let model = build_model(case);
        let name = format!(
            "model_init.{key} (H={}, padding_idx={})",
            case["hidden"], case["padding_idx"]
        );
        report.check_f32(&name, model.seed, &bits(case, key), part(&model));
    }
    report.finish(8);
}

#[test]
fn embedding_init_matches_torch_bit_for_bit() {
    check_model_part("embedding_weight_bits", |m| &m.embedding);
}

#[test]
fn linear_weight_init_matches_torch_bit_for_bit() {
    check_model_part("projection_weight_bits", |m| &m.projection_weight);
}

#[test]
fn linear_bias_init_matches_torch_bit_for_bit() {
    check_model_part("projection_bias_bits", |m| &m.projection_bias);
}

#[test]
fn untied_lm_head_init_matches_torch_bit_for_bit() {
    check_model_part("lm_head_weight_before_tying_bits", |m| &m.lm_head_weight);
}

#[test]
fn step_input_token_ids_match_torch_randint() {
    let fx = fixture();
    let mut report = Report::default();
    for case in cases(&fx, "step_inputs") {
        let seed = uint(case, "seed");
        let mut g = TorchGenerator::new(seed);
        let mut input_ids = [0i64; 10];
        let mut labels = [0i64; 10];
        g.randint(67, &mut input_ids);
        g.randint(67, &mut labels);
        let show = |v: &i64| v.to_string();
        report.check(
            "step_inputs.input_ids",
            seed,
            &ints(case, "input_ids"),
            &input_ids,
            show,
        );
        report.check(
            "step_inputs.labels",
            seed,
            &ints(case, "labels"),
            &labels,
            show,
        );
    }
    report.finish(6);
}

#[test]
fn rand_matches_torch_bit_for_bit() {
    let fx = fixture();
    let mut report = Report::default();
    for case in cases(&fx, "rand") {
        let seed = uint(case, "seed");
        let expected = bits(case, "bits");
        let mut out = vec![0f32; expected.len()];
        TorchGenerator::new(seed).rand(&mut out);
        report.check_f32("rand", seed, &expected, &out);
    }
    report.finish(3);
}

/// Covers both `normal_` paths: 7 elements (scalar double Box-Muller with the cached second
/// sample and `random64()` uniforms), 16 (one AVX2 block) and 37 (two blocks plus the redrawn
/// tail block).
#[test]
fn randn_matches_torch_bit_for_bit_on_both_normal_paths() {
    let fx = fixture();
    let mut report = Report::default();
    let mut scalar_path = 0;
    for case in cases(&fx, "randn") {
        let seed = uint(case, "seed");
        let expected = bits(case, "bits");
        if expected.len() < 16 {
            scalar_path += 1;
        }
        let mut out = vec![0f32; expected.len()];
        TorchGenerator::new(seed).randn(&mut out);
        report.check_f32(&format!("randn({})", expected.len()), seed, &expected, &out);
    }
    assert!(
        scalar_path > 0,
        "the fixture should exercise the scalar path"
    );
    report.finish(9);
}
