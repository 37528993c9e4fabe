//! Errors in scenario files (docs/scenario-language.md): one test per class, each asserting
//! that the message names the file, the key path and what is allowed. All of them are found
//! while parsing and resolving, before anything runs.

use seedsweep::scenario::parse_file;

const FILE: &str = "my_test.toml";

/// A small valid file to break: column-parallel -> gelu -> row-parallel, mse.
const BASE: &str = r#"
name = "mlp"
[dims]
tokens = 8
hidden = 16
ffn = 64
[parallel]
tp = 4
shard_rule = "megatron"
[[inputs]]
name = "x"
draw = "randn"
shape = ["tokens", "hidden"]
grad = true
[[inputs]]
name = "target"
draw = "randn"
shape = ["tokens", "hidden"]
[[layers]]
name = "fc1"
op = "linear"
input = "x"
out = "ffn"
parallel = "column"
[[layers]]
name = "act"
op = "gelu"
[[layers]]
name = "fc2"
op = "linear"
out = "hidden"
parallel = "row"
[loss]
op = "mse"
target = "target"
[train]
steps = 2
micro_steps = 2
optimizer = "adamw"
lr = 1e-3
[[checks]]
name = "out"
tensor = "fc2.out"
[[checks]]
name = "input_grad"
tensor = "x.grad"
[[checks]]
name = "fc1_weight"
tensor = "fc1.weight"
"#;

/// The error for `text`, as the user sees it.
fn err(text: &str) -> String {
    match parse_file(FILE, text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts the message names the file, `key` and every `allowed` fragment.
fn assert_names(msg: &str, key: &str, allowed: &[&str]) {
    assert!(msg.starts_with(&format!("{FILE}: key `{key}`:")), "{msg}");
    assert!(msg.contains("allowed"), "{msg}");
    for a in allowed {
        assert!(msg.contains(a), "`{a}` missing from: {msg}");
    }
}

fn replace(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

#[test]
fn the_base_file_and_the_shipped_files_are_valid() {
    parse_file(FILE, BASE).unwrap();
    for f in [
        "configs/deepspeed_row_parallel.toml",
        "configs/deepspeed_tied_row_parallel.toml",
        "configs/examples/megatron_mlp_tp4.toml",
        "configs/examples/tp2_prenorm_block.toml",
        "configs/examples/production_head_v32000_h512.toml",
        "configs/examples/t1_h8192.toml",
        // captured from the Python examples by `python -m seedsweep capture` (README section
        // "From your pytest test"): still valid files of the language
        "python/examples/captures/test_tp_mlp.test_tp_mlp_adamw.torch-default.toml",
        "python/examples/captures/test_tp_mlp.test_tp_mlp_adamw.tight.toml",
        "python/examples/captures/test_tp_classifier.test_tp_classifier_sgd.default.toml",
        "python/examples/captures/test_tp_prenorm_block.test_tp_prenorm_block_adam.toml",
        "configs/examples/swiglu_tp2.toml",
        "configs/megatron_vocab_parallel_ce_test.toml",
        "python/examples/captures/test_row_parallel_head.test_row_parallel_head_sgd.toml",
        "python/examples/captures/test_tp_attention.test_tp_attention_adamw.toml",
        "python/examples/captures/test_tp_swiglu.test_tp_swiglu_adamw.toml",
    ] {
        let text = std::fs::read_to_string(f).unwrap();
        parse_file(f, &text).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn malformed_toml_names_the_file() {
    let msg = err("name = \"x\"\n[dims\n");
    assert!(msg.starts_with(FILE), "{msg}");
}

#[test]
fn unknown_keys_name_the_path_and_the_allowed_keys() {
    assert_names(
        &err(&replace("name = \"mlp\"", "name = \"mlp\"\nnmae = 1")),
        "nmae",
        &["description", "first_seed", "layers"],
    );
    // A key another op has.
    assert_names(
        &err(&replace("op = \"gelu\"", "op = \"gelu\"\npadding_idx = 0")),
        "layers[1].padding_idx",
        &["name, op, input, parallel, attr"],
    );
    assert_names(
        &err(&replace("tp = 4", "tp = 4\ntpp = 2")),
        "parallel.tpp",
        &["tp, dp, shard_rule, tp_grain, zero_stage"],
    );
}

#[test]
fn unknown_ops_and_choices_list_what_is_allowed() {
    assert_names(
        &err(&replace("op = \"gelu\"", "op = \"swish\"")),
        "layers[1].op",
        &[
            "embedding",
            "linear",
            "gelu-tanh",
            "rmsnorm",
            "residual-add",
        ],
    );
    assert_names(
        &err(&replace("parallel = \"row\"", "parallel = \"vocab\"")),
        "layers[2].parallel",
        &["none, column, column-gather, row"],
    );
    assert_names(
        &err(&replace("optimizer = \"adamw\"", "optimizer = \"lamb\"")),
        "train.optimizer",
        &["sgd, momentum, nesterov, adam, adamw"],
    );
}

#[test]
fn wrong_types_and_ranges_say_what_is_allowed() {
    assert_names(
        &err(&replace("tp = 4", "tp = 65")),
        "parallel.tp",
        &["1..=64"],
    );
    assert_names(
        &err(&replace("lr = 1e-3", "lr = \"fast\"")),
        "train.lr",
        &["0 < lr < 100"],
    );
    assert_names(
        &err(&replace("steps = 2", "steps = 0")),
        "train.steps",
        &["1..=1000"],
    );
}

#[test]
fn nesterov_is_refused_where_torch_refuses_it() {
    let nesterov = "optimizer = \"nesterov\"\nlr = 1e-3";
    assert_names(
        &err(&replace(
            "optimizer = \"adamw\"\nlr = 1e-3",
            &format!("{nesterov}\ndampening = 0.1"),
        )),
        "train.dampening",
        &["0 only", "optimizer = \"momentum\""],
    );
    assert_names(
        &err(&replace(
            "optimizer = \"adamw\"\nlr = 1e-3",
            &format!("{nesterov}\nmomentum = 0.0"),
        )),
        "train.momentum",
        &["0 < momentum < 1"],
    );
    // Both are fine with plain momentum, as in torch.
    parse_file(
        FILE,
        &replace(
            "optimizer = \"adamw\"\nlr = 1e-3",
            "optimizer = \"momentum\"\nlr = 1e-3\nmomentum = 0.0\ndampening = 0.1",
        ),
    )
    .unwrap();
}

#[test]
fn an_unknown_dim_lists_the_dims() {
    assert_names(
        &err(&replace("out = \"ffn\"", "out = \"fnn\"")),
        "layers[0].out",
        &["unknown dim `fnn`", "ffn, hidden, tokens"],
    );
    assert_names(
        &err(&replace(
            "shape = [\"tokens\", \"hidden\"]",
            "shape = [\"tokens\", \"hiden\"]",
        )),
        "inputs[0].shape[1]",
        &["hiden", "ffn, hidden, tokens"],
    );
}

#[test]
fn a_tp_degree_that_does_not_divide_under_megatron_is_refused() {
    let msg = err(&replace("tp = 4", "tp = 3"));
    assert_names(
        &msg,
        "layers[0].out",
        &["64", "tp = 3", "shard_rule = \"deepspeed\""],
    );
    // DeepSpeed's rule takes uneven shards, but not an empty one.
    let text = replace("tp = 4\nshard_rule = \"megatron\"", "tp = 3");
    parse_file(FILE, &text).unwrap();
    let msg =
        err(&replace("tp = 4\nshard_rule = \"megatron\"", "tp = 20")
            .replace("ffn = 64", "ffn = 16"));
    assert_names(&msg, "layers[0].out", &["rank 16 gets nothing", "tp <= 16"]);
}

#[test]
fn a_tensor_name_that_does_not_exist_lists_the_ones_that_do() {
    let msg = err(&replace("op = \"gelu\"", "op = \"gelu\"\ninput = \"fc\""));
    assert_names(
        &msg,
        "layers[1].input",
        &["no tensor is named `fc`", "x, target, fc1"],
    );
    // Used before it is computed.
    let msg = err(&replace("op = \"gelu\"", "op = \"gelu\"\ninput = \"fc2\""));
    assert_names(
        &msg,
        "layers[1].input",
        &["computed after this one", "an earlier layer"],
    );
    // A check on an unknown tensor.
    let msg = err(&replace("tensor = \"fc2.out\"", "tensor = \"fc3.out\""));
    assert_names(
        &msg,
        "checks[0].tensor",
        &["no tensor is named `fc3.out`", "fc2.out"],
    );
}

const TIED: &str = r#"
name = "tied"
[dims]
vocab = 11
hidden = 6
[parallel]
tp = 2
[[inputs]]
name = "ids"
draw = "randint"
high = "vocab"
shape = [2, 3]
[[inputs]]
name = "labels"
draw = "randint"
high = "vocab"
shape = [2, 3]
[[layers]]
name = "embedding"
op = "embedding"
input = "ids"
num = "vocab"
dim = "hidden"
[[layers]]
name = "head"
op = "linear"
out = "vocab"
bias = false
parallel = "row"
tie = "embedding"
[loss]
op = "cross-entropy"
labels = "labels"
[train]
steps = 1
optimizer = "sgd"
lr = 0.1
[[checks]]
name = "logits"
tensor = "head.out"
[[checks]]
name = "tied_grad"
tensor = "embedding.weight.grad"
"#;

#[test]
fn a_tie_between_different_shapes_is_refused() {
    parse_file(FILE, TIED).unwrap();
    // The head projects to 10 classes; the table has 11 rows.
    let msg = err(&TIED.replace("out = \"vocab\"", "out = 10").replace(
        "high = \"vocab\"\nshape = [2, 3]\n[[layers]]",
        "high = 10\nshape = [2, 3]\n[[layers]]",
    ));
    assert_names(
        &msg,
        "layers[1].tie",
        &["a tie between different shapes", "[10, 6]", "[11, 6]"],
    );
    let msg = err(&TIED.replace("tie = \"embedding\"", "tie = \"embeding\""));
    assert_names(
        &msg,
        "layers[1].tie",
        &["no layer is named `embeding`", "embedding"],
    );
}

#[test]
fn a_check_on_a_tensor_that_is_never_computed_is_refused_unless_optional() {
    // x.grad without grad = true.
    let msg = err(&replace("grad = true\n", ""));
    assert_names(
        &msg,
        "checks[1].tensor",
        &["never computed", "grad = true", "optional = true"],
    );
    // The bias of a layer without one.
    let text = replace("parallel = \"row\"", "parallel = \"row\"\nbias = false")
        + "[[checks]]\nname = \"fc2_bias\"\ntensor = \"fc2.bias\"\n";
    assert_names(
        &err(&text),
        "checks[3].tensor",
        &["layer `fc2` (linear) has no bias", "optional = true"],
    );
    // Optional: skipped, and the file is valid.
    let file = parse_file(FILE, &(text + "optional = true\n")).unwrap();
    assert_eq!(file.graphs[0].skipped.len(), 1);
    assert_eq!(file.graphs[0].checks.len(), 3);
    // A full gradient under ZeRO stage 2.
    let msg = err(&TIED.replace("tp = 2", "tp = 2\nzero_stage = 2"));
    assert_names(
        &msg,
        "checks[1].tensor",
        &["zero_stage = 2", "optional = true"],
    );
}

#[test]
fn the_loss_needs_its_labels_of_the_right_shape() {
    let msg = err(&TIED.replace("labels = \"labels\"", ""));
    assert_names(&msg, "loss.labels", &["randint input"]);
    let msg = err(&TIED.replace("labels = \"labels\"", "labels = \"lables\""));
    assert_names(
        &msg,
        "loss.labels",
        &["no input is named `lables`", "ids, labels"],
    );
    let msg = err(&TIED.replacen(
        "shape = [2, 3]\n[[layers]]",
        "shape = [2, 4]\n[[layers]]",
        1,
    ));
    assert_names(
        &msg,
        "loss.labels",
        &["[2, 4]", "need labels of shape [2, 3]"],
    );
    let msg = err(&replace(
        "target = \"target\"",
        "target = \"x\"\nlabels = \"x\"",
    ));
    assert_names(&msg, "loss.labels", &["mse takes `target`"]);
}

#[test]
fn shard_mismatches_between_layers_are_found() {
    // A column-parallel output read by an op that needs the whole tensor.
    let msg = err(&replace("parallel = \"row\"", "parallel = \"none\""));
    assert_names(
        &msg,
        "layers[2].input",
        &[
            "split on axis 1 by column-parallel `fc1`",
            "row-parallel",
            "column-gather",
        ],
    );
    // The mse on an output that stays split.
    let msg = err(&replace("parallel = \"row\"", "parallel = \"column\""));
    assert_names(&msg, "layers[2].input", &["needs the whole tensor"]);
    // Vocab-parallel cross-entropy on whole logits.
    let msg = err(&TIED.replace(
        "labels = \"labels\"",
        "labels = \"labels\"\nparallel = \"vocab\"",
    ));
    assert_names(
        &msg,
        "loss.parallel",
        &[
            "vocab-parallel cross-entropy needs logits split",
            "column-parallel head",
        ],
    );
    // Ids into a linear layer.
    let msg = err(&TIED.replace(
        "op = \"embedding\"\ninput = \"ids\"\nnum = \"vocab\"\ndim = \"hidden\"",
        "op = \"linear\"\ninput = \"ids\"\nout = \"hidden\"",
    ));
    assert_names(&msg, "layers[0].input", &["int64", "through an embedding"]);
}

#[test]
fn residual_add_needs_one_shape() {
    let text = replace(
        "[loss]",
        "[[layers]]\nname = \"res\"\nop = \"residual-add\"\ninputs = [\"fc2\", \"act\"]\n[loss]",
    );
    assert_names(
        &err(&text),
        "layers[3].inputs",
        &["different shapes", "[8, 16]", "[8, 64]"],
    );
}

#[test]
fn checks_at_a_time_the_tensor_does_not_have_are_refused() {
    let msg = err(&replace(
        "tensor = \"fc2.out\"",
        "tensor = \"fc2.out\"\nat = \"step\"",
    ));
    assert_names(
        &msg,
        "checks[0].at",
        &["every micro-step", "\"micro-step\""],
    );
    let msg = err(&replace(
        "tensor = \"fc1.weight\"",
        "tensor = \"fc1.weight\"\nat = \"micro-step\"",
    ));
    assert_names(&msg, "checks[2].at", &["\"step\", \"update\""]);
    // sgd-update restates plain SGD only.
    let msg = err(&replace(
        "tensor = \"fc1.weight\"",
        "tensor = \"fc1.weight\"\nkind = \"sgd-update\"",
    ));
    assert_names(&msg, "checks[2].kind", &["adamw", "optimizer = \"sgd\""]);
}

#[test]
fn checks_out_of_recording_order_are_refused() {
    let text = BASE.replace("[[checks]]\nname = \"out\"\ntensor = \"fc2.out\"\n", "")
        + "[[checks]]\nname = \"out\"\ntensor = \"fc2.out\"\n";
    assert_names(
        &err(&text),
        "checks[2]",
        &[
            "records before `fc1_weight`",
            "activations and the loss, then gradients, then parameters",
        ],
    );
}

#[test]
fn params_errors_name_the_entry_and_its_key() {
    let with = |entries: &str| format!("{TIED}{entries}");
    // A key that names nothing.
    let msg = err(&with("[[params]]\nid = \"a\"\nhiden = 7\n"));
    assert_names(
        &msg,
        "params[0].hiden",
        &[
            "dims (hidden, vocab)",
            "layers (embedding, head)",
            "inputs (ids, labels)",
        ],
    );
    // A bad value in a patched layer key names the entry's key, and the parametrization.
    let msg = err(&with(
        "[[params]]\nid = \"a\"\n[[params]]\nid = \"b\"\nhead.bias = \"yes\"\n",
    ));
    assert_names(
        &msg,
        "params[1].head.bias",
        &["true, false", "parametrization `b`"],
    );
    let msg = err(&with(
        "[[params]]\nid = \"a\"\n[[params]]\nid = \"b\"\nparallel.tp = 99\n",
    ));
    assert_names(&msg, "params[1].parallel.tp", &["1..=64"]);
    // Duplicate ids.
    let msg = err(&with("[[params]]\nid = \"a\"\n[[params]]\nid = \"a\"\n"));
    assert!(
        msg.starts_with(&format!("{FILE}: key `params[1].id`: duplicate id `a`")),
        "{msg}"
    );
    // A dim override that breaks a shape is found in that parametrization.
    let msg = err(&with(
        "[[params]]\nid = \"a\"\n[[params]]\nid = \"b\"\nhidden = 1\n",
    ));
    assert_names(
        &msg,
        "layers[1].input",
        &["rank 1 gets nothing", "parametrization `b`"],
    );
}

#[test]
fn policies_may_only_override_checks_the_file_has() {
    let text = format!("{BASE}[policies.mine]\ndefault = {{ atol = 1e-5, rtol = 1e-5 }}\nchecks.ouput = {{ atol = 0.0, rtol = 0.0 }}\n");
    let msg = err(&text);
    assert!(
        msg.starts_with(&format!("{FILE}: key `policies.mine.checks.ouput`")),
        "{msg}"
    );
    assert!(msg.contains("out, input_grad, fc1_weight"), "{msg}");
    let msg =
        err(&format!("{BASE}default_policies = [\"strict\"]\n").replace("[train]", "[train]"));
    // A top-level key after a table belongs to that table: TOML's rule, named as such.
    assert!(msg.contains("checks[2].default_policies"), "{msg}");
    let msg = err(&format!("default_policies = [\"strict\"]\n{BASE}"));
    assert_names(
        &msg,
        "default_policies[0]",
        &["unknown policy `strict`", "torch-default"],
    );
}

#[test]
fn the_check_command_exits_1_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, replace("parallel = \"row\"", "parallel = \"rows\"")).unwrap();
    let out = assert_cmd::Command::cargo_bin("seedsweep")
        .unwrap()
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("bad.toml: key `layers[2].parallel`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("allowed: none, column, column-gather, row"),
        "{stderr}"
    );
    std::fs::write(&path, BASE).unwrap();
    let out = assert_cmd::Command::cargo_bin("seedsweep")
        .unwrap()
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("forward  fc2          all-reduce     fc2.out [8, 16] over tp ranks 0..3"),
        "{stdout}"
    );
}

#[test]
fn a_dim_nothing_uses_is_refused() {
    let msg = err(&replace("ffn = 64", "ffn = 64\nfnn = 32"));
    assert_names(&msg, "dims.fnn", &["never used", "refer to it by name"]);
}

#[test]
fn a_graph_too_large_to_hold_is_refused_before_anything_is_allocated() {
    let msg = err(&replace("ffn = 64", "ffn = 1048576").replace("hidden = 16", "hidden = 2048"));
    assert_names(&msg, "dims", &["at most 1073741824", "smaller dims"]);
}

#[test]
fn a_softmax_needs_the_whole_last_dim() {
    // gelu -> softmax on fc1's column-parallel output, which stays split on its last dim.
    let msg = err(&replace("op = \"gelu\"", "op = \"softmax\""));
    assert_names(
        &msg,
        "layers[1].input",
        &[
            "a softmax over the last dim needs the whole tensor",
            "split on axis 1 by column-parallel `fc1`",
            "column-gather",
        ],
    );
    // Gathered, it is accepted, and ids are refused.
    parse_file(
        FILE,
        &replace("op = \"gelu\"", "op = \"softmax\"").replacen(
            "parallel = \"column\"",
            "parallel = \"column-gather\"",
            1,
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let msg = err(&TIED.replacen(
        "[loss]",
        "[[layers]]\nname = \"sm\"\nop = \"softmax\"\ninput = \"ids\"\n[loss]",
        1,
    ));
    assert_names(
        &msg,
        "layers[2].input",
        &["int64", "op `softmax` needs float32"],
    );
}

/// A causal attention block at tp 2: column-parallel q, k, v, sdpa, row-parallel output.
const ATTN: &str = r#"
name = "attn"
dims = { batch = 2, seq = 4, hidden = 16, heads = 4 }
parallel = { tp = 2, shard_rule = "megatron" }
inputs = [
  { name = "x", draw = "randn", shape = ["batch", "seq", "hidden"] },
  { name = "t", draw = "randn", shape = ["batch", "seq", "hidden"] },
]
layers = [
  { name = "q", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "k", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "v", op = "linear", input = "x", out = "hidden", parallel = "column" },
  { name = "attn", op = "sdpa", inputs = ["q", "k", "v"], heads = "heads", causal = true },
  { name = "o", op = "linear", out = "hidden", parallel = "row" },
]
loss = { op = "mse", target = "t" }
train = { steps = 1, optimizer = "sgd", lr = 0.1 }
checks = [{ name = "out", tensor = "attn.out" }]
"#;

fn attn(from: &str, to: &str) -> String {
    assert!(ATTN.contains(from), "{from}");
    ATTN.replacen(from, to, 1)
}

#[test]
fn sdpa_inputs_heads_and_shards_are_checked() {
    parse_file(FILE, ATTN).unwrap_or_else(|e| panic!("{e}"));
    parse_file(
        "configs/examples/attention_tp2.toml",
        &std::fs::read_to_string("configs/examples/attention_tp2.toml").unwrap(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // heads that do not divide the width
    let msg = err(&attn("heads = 4 }", "heads = 5 }"));
    assert_names(
        &msg,
        "layers[3].heads",
        &["5 heads do not divide the width 16"],
    );
    // heads whose features the shard rule splits inside a head: 2 heads of 8 over tp 4
    let msg = err(&attn("heads = 4 }", "heads = 2 }").replace("tp = 2,", "tp = 4,"));
    assert_names(
        &msg,
        "layers[3].heads",
        &["inside a head of 8 features", "tp = 4"],
    );
    // q, k, v of different shapes
    let msg = err(&attn(
        "{ name = \"v\", op = \"linear\", input = \"x\", out = \"hidden\"",
        "{ name = \"v\", op = \"linear\", input = \"x\", out = 8",
    ));
    assert_names(
        &msg,
        "layers[3].inputs",
        &["q, k and v of different shapes", "[2, 4, 8]"],
    );
    // split differently: v whole
    let msg = err(&attn(
        "out = \"hidden\", parallel = \"column\" },\n  { name = \"attn\"",
        "out = \"hidden\", parallel = \"column-gather\" },\n  { name = \"attn\"",
    ));
    assert_names(&msg, "layers[3].inputs", &["q, k and v split differently"]);
    // not 3-D
    let msg = err(&attn(
        "[\"batch\", \"seq\", \"hidden\"] },\n  { name = \"t\"",
        "[\"batch\", \"seq\", \"heads\", \"hidden\"] },\n  { name = \"t\"",
    ));
    assert_names(
        &msg,
        "layers[3].inputs[0]",
        &["a 3-D tensor [batch, seq, heads·head_dim]"],
    );
    // two, or a repeated, input; an `input` key; a missing `heads`
    let msg = err(&attn(
        "inputs = [\"q\", \"k\", \"v\"]",
        "inputs = [\"q\", \"k\"]",
    ));
    assert_names(&msg, "layers[3].inputs", &["exactly three, [q, k, v]"]);
    let msg = err(&attn(
        "inputs = [\"q\", \"k\", \"v\"]",
        "inputs = [\"q\", \"k\", \"k\"]",
    ));
    assert_names(&msg, "layers[3].inputs", &["`k` is named twice"]);
    let msg = err(&attn("heads = \"heads\", ", ""));
    assert!(msg.contains("layers[3].heads"), "{msg}");
    let msg = err(&attn("causal = true", "causal = true, scale = -1.0"));
    assert_names(&msg, "layers[3].scale", &["a number > 0"]);
}

/// BASE with a second column layer `up` of `out` parallelism `up_par` and `glu = act * up`
/// between the activation and the row layer.
fn swiglu(up_par: &str) -> String {
    replace(
        "[[layers]]\nname = \"fc2\"",
        &format!(
            "[[layers]]\nname = \"up\"\nop = \"linear\"\ninput = \"x\"\nout = \"ffn\"\nparallel = \"{up_par}\"\n\
             [[layers]]\nname = \"glu\"\nop = \"mul\"\ninputs = [\"act\", \"up\"]\n\
             [[layers]]\nname = \"fc2\""
        ),
    )
}

#[test]
fn mul_of_differently_split_operands_is_refused() {
    parse_file(FILE, &swiglu("column")).unwrap();
    assert_names(
        &err(&swiglu("column-gather")),
        "layers[3].inputs",
        &[
            "mul of differently split tensors",
            "`act.out`",
            "`up.out`",
            "split the same way",
        ],
    );
}

#[test]
fn mul_of_different_shapes_and_of_ids_is_refused() {
    let text = replace(
        "[loss]",
        "[[layers]]\nname = \"m\"\nop = \"mul\"\ninputs = [\"fc2\", \"act\"]\n[loss]",
    );
    assert_names(
        &err(&text),
        "layers[3].inputs",
        &["mul of different shapes", "[8, 16]", "[8, 64]"],
    );
    let text = replace(
        "[[layers]]\nname = \"fc1\"",
        "[[inputs]]\nname = \"ids\"\ndraw = \"randint\"\nhigh = 4\nshape = [\"tokens\", \"hidden\"]\n\
         [[layers]]\nname = \"m\"\nop = \"add\"\ninputs = [\"x\", \"ids\"]\n[[layers]]\nname = \"fc1\"",
    );
    assert_names(&err(&text), "layers[0].inputs[1]", &["int64", "float32"]);
}

/// BASE's target as a fixed input with `values` (and more keys).
fn fixed_target(rest: &str) -> String {
    replace(
        "name = \"target\"\ndraw = \"randn\"",
        &format!("name = \"target\"\ndraw = \"fixed\"\n{rest}"),
    )
}

#[test]
fn fixed_values_of_the_wrong_count_are_refused() {
    let ok: Vec<String> = (0..128).map(|i| format!("{}.5", i % 7)).collect();
    parse_file(
        FILE,
        &fixed_target(&format!("values = [{}]", ok.join(", "))),
    )
    .unwrap();
    parse_file(
        FILE,
        &fixed_target("values = { range = [0, 7], repeat = [8, 2] }"),
    )
    .unwrap();
    assert_names(
        &err(&fixed_target("values = [1.0, 2.0, 3.0]")),
        "inputs[1].values",
        &["3 values for shape [8, 16]", "exactly 128 values"],
    );
    assert_names(
        &err(&fixed_target(
            "values = { range = [0, 7], repeat = [8, 4] }",
        )),
        "inputs[1].values",
        &["256 values", "exactly 128"],
    );
    assert_names(
        &err(&fixed_target("values = { range = [7, 0] }")),
        "inputs[1].values.range",
        &["step 1 does not go from 7 towards 0"],
    );
    assert_names(
        &err(&fixed_target("values = { range = [0, 7], arange = [8] }")),
        "inputs[1].values",
        &["exactly one of range"],
    );
    assert_names(
        &err(&fixed_target("values = [1.0, \"x\"]")),
        "inputs[1].values[1]",
        &["a finite number"],
    );
    assert_names(
        &err(&fixed_target("high = 4\nvalues = [1.0]")),
        "inputs[1].high",
        &["only with draw = \"randint\""],
    );
}

/// The built-in written as Megatron's test writes it, to break.
const MEGATRON_TEST: &str = include_str!("../../configs/megatron_vocab_parallel_ce_test.toml");

fn megatron(from: &str, to: &str) -> String {
    assert!(MEGATRON_TEST.contains(from), "{from}");
    MEGATRON_TEST.replacen(from, to, 1)
}

#[test]
fn fixed_labels_must_be_integers_in_range() {
    parse_file(FILE, MEGATRON_TEST).unwrap();
    let labels: Vec<String> = (0..16).map(|i| (i * 8).to_string()).collect();
    parse_file(
        FILE,
        &megatron(
            "values = { arange = [0, 32, 2] }",
            &format!("values = [{}]", labels.join(", ")),
        ),
    )
    .unwrap();
    let mut bad = labels.clone();
    bad[3] = "128".into();
    assert_names(
        &err(&megatron(
            "values = { arange = [0, 32, 2] }",
            &format!("values = [{}]", bad.join(", ")),
        )),
        "inputs[1].values[3]",
        &["128 is out of range", "0..128", "0..=127"],
    );
    let mut frac = labels;
    frac[2] = "2.5".into();
    assert_names(
        &err(&megatron(
            "values = { arange = [0, 32, 2] }",
            &format!("dtype = \"int64\"\nvalues = [{}]", frac.join(", ")),
        )),
        "inputs[1].values[2]",
        &["2.5 is not an integer", "integers for an int64 input"],
    );
}

#[test]
fn sharded_inputs_and_per_rank_values_are_checked() {
    assert_names(
        &err(&megatron("parallel = \"last-dim\"", "parallel = \"none\"")),
        "inputs[0].per_rank",
        &["parallel = \"last-dim\""],
    );
    assert_names(
        &err(&megatron("repeat = [16, 4]", "repeat = [16, 2]")),
        "inputs[0].values",
        &["256 values for one rank's shard [16, 32]", "exactly 512"],
    );
    assert_names(
        &err(&megatron("tp = 4\nshard_rule = \"megatron\"\n", "tp = 3\n")),
        "inputs[0].per_rank",
        &["splits unevenly", "[43, 43, 42]"],
    );
    // Whole logits cannot feed the vocab-parallel loss, and a sharded input has no gradient.
    assert_names(
        &err(&megatron(
            "\nper_rank = true",
            "\ngrad = true\nper_rank = true",
        )),
        "inputs[0].grad",
        &["not modelled", "false"],
    );
}

#[test]
fn per_token_losses_need_a_vocab_parallel_cross_entropy() {
    let text = replace("tensor = \"fc2.out\"", "tensor = \"loss.tokens\"");
    assert_names(
        &err(&text),
        "checks[0].tensor",
        &[
            "vocab-parallel cross-entropy only",
            "loss.parallel = \"vocab\"",
        ],
    );
}

#[test]
fn a_file_without_layers_names_the_loss_input() {
    let text = megatron("input = \"vocab_parallel_logits\"\n", "");
    assert_names(
        &err(&text),
        "loss.input",
        &[
            "with no [[layers]]",
            "input = \"<name of an [[inputs]] entry>\"",
        ],
    );
}

/// The built-in HSDP file (`configs/torchtitan_fsdp_vs_hsdp.toml`) with `from` replaced by
/// `to` once.
fn hsdp(from: &str, to: &str) -> String {
    let base = std::fs::read_to_string("configs/torchtitan_fsdp_vs_hsdp.toml").unwrap();
    assert!(base.contains(from), "{from}");
    base.replacen(from, to, 1)
}

/// The error `seedsweep::scenario::load` gives (parsing, resolving and the executor's
/// validation, the reference layout's included).
fn load_err(text: &str) -> String {
    match seedsweep::scenario::load(FILE, text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hsdp_meshes_that_do_not_fit_name_the_key() {
    seedsweep::scenario::load(FILE, &hsdp("", "")).unwrap();
    // dp_replicate alone: no mesh.
    let msg = err(&hsdp("dp_shard = 4 ", "# "));
    assert_names(&msg, "parallel.dp_replicate", &["dp_shard"]);
    // dp given beside the mesh and disagreeing with its product.
    let msg = err(&hsdp("dp_shard = 4 ", "dp = 6\ndp_shard = 4 "));
    assert_names(&msg, "parallel.dp", &["2 × 4 = 8", "dp = 8"]);
    // dp agreeing with the product is allowed.
    parse_file(FILE, &hsdp("dp_shard = 4 ", "dp = 8\ndp_shard = 4 ")).unwrap();
    // A mesh of more than 64 ranks.
    let msg = err(&hsdp("dp_shard = 4 ", "dp_shard = 40 "));
    assert_names(&msg, "parallel.dp_shard", &["80", "at most 64"]);
    // HSDP without sharding (ZeRO 0/1 all-reduces whole gradients).
    let msg = err(&hsdp("zero_stage = 3 ", "zero_stage = 1 "));
    assert_names(&msg, "parallel.dp_replicate", &["zero_stage = 2 or 3"]);
    // A global batch the 8 ranks do not split evenly.
    let msg = load_err(&hsdp("batch = 16 ", "batch = 20 "));
    assert_names(
        &msg,
        "params[default].parallel.dp_shard",
        &["multiple of 8", "20"],
    );
}

#[test]
fn reference_layouts_are_checked_like_the_sharded_one() {
    // An unknown key in [parallel.reference] (shard_rule is [parallel]'s, shared).
    let msg = err(&hsdp(
        "[parallel.reference]\n",
        "[parallel.reference]\nshard_rule = \"megatron\"\n",
    ));
    assert_names(
        &msg,
        "parallel.reference.shard_rule",
        &["dp_shard", "zero_stage"],
    );
    let msg = err(&hsdp(
        "[parallel.reference]\n",
        "[parallel.reference]\ndp_sahrd = 2\n",
    ));
    assert_names(&msg, "parallel.reference.dp_sahrd", &["dp_replicate"]);
    // The mesh keys of the reference are validated as [parallel]'s.
    let msg = err(&hsdp("dp_shard = 8 ", "dp_replicate = 2 "));
    assert_names(&msg, "parallel.reference.dp_replicate", &["dp_shard"]);
    // layout-vs-layout needs a reference layout, and a reference layout needs it.
    let msg = err(&hsdp(
        "[parallel.reference]\ndp_shard = 8 ",
        "[parallel.unused]\ndp_shard = 8 ",
    ));
    assert!(msg.contains("unknown key `unused`"), "{msg}");
    let no_ref = hsdp(
        "[parallel.reference]\ndp_shard = 8               # FSDP over all 8 ranks\nzero_stage = 3\n",
        "",
    );
    let msg = err(&no_ref);
    assert_names(&msg, "parallel.reference", &["[parallel.reference]"]);
    let msg = err(&hsdp("compare = \"layout-vs-layout\"\n", ""));
    assert_names(&msg, "parallel.reference", &["layout-vs-layout"]);
    // A reference layout whose ranks do not split the batch: the reference key, and the
    // key the resolution named.
    let msg = err(&hsdp("dp_shard = 8 ", "dp_shard = 32 "));
    assert!(
        msg.starts_with(&format!("{FILE}: key `parallel.reference`: under the reference layout, key `inputs[0].shape[0]`")),
        "{msg}"
    );
    // The reference layout equal to the sharded one compares nothing.
    let msg = err(&hsdp("dp_shard = 8 ", "dp_replicate = 2\ndp_shard = 4 "));
    assert_names(&msg, "parallel.reference", &["another layout"]);
}

/// ATTN with rotary embeddings on q and k (layers[3] and [4]) before the sdpa.
fn rope_attn(from: &str, to: &str) -> String {
    let base = attn(
        "  { name = \"attn\", op = \"sdpa\", inputs = [\"q\", \"k\", \"v\"]",
        "  { name = \"qr\", op = \"rope\", input = \"q\", heads = \"heads\" },\n  { name = \"kr\", op = \"rope\", input = \"k\", heads = \"heads\", theta = 500000 },\n  { name = \"attn\", op = \"sdpa\", inputs = [\"qr\", \"kr\", \"v\"]",
    );
    assert!(base.contains(from), "{from}");
    base.replacen(from, to, 1)
}

/// Rotary embeddings alone on a `[1, seq, width]` input.
fn rope_alone(seq: usize, width: usize, layer: &str) -> String {
    format!(
        r#"
name = "rope"
inputs = [
  {{ name = "x", draw = "randn", shape = [1, {seq}, {width}], grad = true }},
  {{ name = "t", draw = "randn", shape = [1, {seq}, {width}] }},
]
layers = [{{ name = "r", op = "rope", input = "x", {layer} }}]
loss = {{ op = "mse", target = "t" }}
train = {{ steps = 1, optimizer = "sgd", lr = 0.1 }}
checks = [{{ name = "out", tensor = "r.out" }}]
"#
    )
}

#[test]
fn rope_heads_theta_and_positions_are_checked() {
    parse_file(FILE, &rope_attn("", "")).unwrap_or_else(|e| panic!("{e}"));
    parse_file(FILE, &rope_alone(4096, 128, "heads = 1, theta = 1e6"))
        .unwrap_or_else(|e| panic!("{e}"));
    // heads that do not divide the width
    let msg = err(&rope_attn(
        "input = \"q\", heads = \"heads\"",
        "input = \"q\", heads = 5",
    ));
    assert_names(
        &msg,
        "layers[3].heads",
        &["5 heads do not divide the width 16"],
    );
    // an odd head_dim: 16 heads of 1 feature
    let msg = err(&rope_attn(
        "input = \"k\", heads = \"heads\"",
        "input = \"k\", heads = 16",
    ));
    assert_names(
        &msg,
        "layers[4].heads",
        &["head_dim 1 is odd", "allowed: an even head_dim"],
    );
    // the shard rule splits inside a head: 2 heads of 8 features over tp 4
    let msg = err(&rope_attn(
        "input = \"q\", heads = \"heads\"",
        "input = \"q\", heads = 2",
    )
    .replace("tp = 2,", "tp = 4,"));
    assert_names(
        &msg,
        "layers[3].heads",
        &["inside a head of 8 features", "tp = 4"],
    );
    // outside the measured tables: head_dim, theta, positions
    let msg = err(&rope_alone(4, 68, "heads = 2"));
    assert_names(
        &msg,
        "layers[0].heads",
        &[
            "head_dim 34 is outside the measured tables",
            "allowed: one of",
        ],
    );
    let msg = err(&rope_alone(4, 8, "heads = 1, theta = 20000"));
    assert_names(
        &msg,
        "layers[0].theta",
        &["theta = 20000 is outside the measured tables", "10000.0"],
    );
    let msg = err(&rope_alone(4097, 8, "heads = 1"));
    assert_names(
        &msg,
        "layers[0].input",
        &["positions 0..4097", "positions below 4096", "seq 4097"],
    );
    let msg = err(&rope_alone(4, 8, "heads = 1, theta = -1"));
    assert_names(&msg, "layers[0].theta", &["a number > 0"]);
    let msg = err(&rope_alone(4, 8, "heads = 1, style = \"interleaved\""));
    assert!(
        msg.contains("layers[0].style") && msg.contains("half"),
        "{msg}"
    );
    let msg = err(&rope_alone(4, 8, "theta = 10000"));
    assert!(msg.contains("layers[0].heads"), "{msg}");
    // a 2-D input
    let msg = err(&rope_alone(4, 8, "heads = 1").replace("[1, 4, 8]", "[4, 8]"));
    assert_names(
        &msg,
        "layers[0].input",
        &["a 3-D tensor [batch, seq, heads·head_dim]"],
    );
}

/// A mixture-of-experts layer between two linears.
const MOE: &str = r#"
name = "moe"
dims = { tokens = 12, hidden = 8 }
inputs = [
  { name = "x", draw = "randn", shape = ["tokens", "hidden"] },
  { name = "t", draw = "randn", shape = ["tokens", "hidden"] },
]
layers = [
  { name = "inp", op = "linear", input = "x", out = "hidden" },
  { name = "moe", op = "moe", experts = 4, top_k = 2, ffn = 16, expert_parallel = 2 },
]
loss = { op = "mse", target = "t" }
train = { steps = 1, optimizer = "sgd", lr = 0.1 }
checks = [{ name = "out", tensor = "moe.out" }, { name = "r", tensor = "moe.router.weight.grad" }]
"#;

fn moe(from: &str, to: &str) -> String {
    assert!(MOE.contains(from), "{from}");
    MOE.replacen(from, to, 1)
}

#[test]
fn moe_keys_are_checked() {
    parse_file(FILE, MOE).unwrap_or_else(|e| panic!("{e}"));
    for f in [
        "configs/maxtext_moe_dense_test.toml",
        "configs/maxtext_moe_dense_vs_loop.toml",
    ] {
        parse_file(f, &std::fs::read_to_string(f).unwrap()).unwrap_or_else(|e| panic!("{e}"));
    }
    // top_k larger than the experts, and zero
    let msg = err(&moe("top_k = 2", "top_k = 5"));
    assert_names(
        &msg,
        "layers[1].top_k",
        &["top_k = 5 with 4 experts", "1..=4"],
    );
    let msg = err(&moe("top_k = 2", "top_k = 0"));
    assert!(msg.contains("layers[1].top_k"), "{msg}");
    // experts not divisible by expert_parallel, and a degree above 64
    let msg = err(&moe("expert_parallel = 2", "expert_parallel = 3"));
    assert_names(
        &msg,
        "layers[1].expert_parallel",
        &[
            "expert_parallel = 3 with 4 experts",
            "divides the number of experts",
        ],
    );
    let msg = err(&moe("experts = 4", "experts = 128")
        .replace("expert_parallel = 2", "expert_parallel = 128"));
    assert_names(&msg, "layers[1].expert_parallel", &["1..=64"]);
    // more ranks than tokens
    let msg = err(&moe("tokens = 12", "tokens = 1").replace("experts = 4", "experts = 2"));
    assert_names(
        &msg,
        "layers[1].expert_parallel",
        &["at most as many ranks as tokens"],
    );
    // expert parallelism together with tp or dp
    let msg = err(&format!("parallel = {{ tp = 2 }}\n{MOE}"));
    assert_names(
        &msg,
        "layers[1].expert_parallel",
        &["with tp = 2 and dp = 1", "tp = dp = 1"],
    );
    // Megatron's rule on tokens the degree does not divide
    let msg = err(&format!(
        "parallel = {{ shard_rule = \"megatron\" }}\n{}",
        moe("expert_parallel = 2", "expert_parallel = 4").replace("tokens = 12", "tokens = 10")
    ));
    assert_names(
        &msg,
        "layers[1].expert_parallel",
        &["does not divide the 10 tokens"],
    );
    // an unknown activation, a missing required key, a key of another op
    let msg = err(&moe("ffn = 16", "ffn = 16, activation = \"swish\""));
    assert_names(
        &msg,
        "layers[1].activation",
        &["`swish` is not allowed", "silu"],
    );
    // a combine that is not one of the two formulations
    let msg = err(&moe("ffn = 16", "ffn = 16, combine = \"dense\""));
    assert_names(
        &msg,
        "layers[1].combine",
        &["`dense` is not allowed", "elementwise", "einsum"],
    );
    let msg = err(&moe("ffn = 16", "ffn = 16, reference_combine = \"loop\""));
    assert_names(
        &msg,
        "layers[1].reference_combine",
        &["`loop` is not allowed", "elementwise", "einsum"],
    );
    let msg = err(&moe("ffn = 16, ", ""));
    assert_names(&msg, "layers[1].ffn", &["`ffn` is required"]);
    let msg = err(&moe("ffn = 16", "ffn = 16, heads = 2"));
    assert_names(&msg, "layers[1].heads", &["not a key of op `moe`"]);
    // int64 ids into the router
    let msg = err(&moe(
        "{ name = \"x\", draw = \"randn\", shape = [\"tokens\", \"hidden\"] }",
        "{ name = \"x\", draw = \"randint\", high = 5, shape = [\"tokens\", \"hidden\"] }",
    )
    .replace(
        "{ name = \"inp\", op = \"linear\", input = \"x\", out = \"hidden\" },\n  { name = \"moe\", op = \"moe\",",
        "{ name = \"moe\", op = \"moe\", input = \"x\",",
    ));
    assert_names(
        &msg,
        "layers[0].input",
        &["int64", "op `moe` needs float32"],
    );
    // a column-parallel (feature-sharded) input
    let msg = err(&format!(
        "parallel = {{ tp = 2 }}\n{}",
        moe(
            "out = \"hidden\" }",
            "out = \"hidden\", parallel = \"column\" }"
        )
        .replace(", expert_parallel = 2", "")
    ));
    assert_names(&msg, "layers[1].input", &["needs the whole tensor"]);
}

/// PyTorch's ring attention test as a file: q, k, v drawn per seed, one sdpa layer at cp 4.
const RING: &str = r#"
name = "ring"
dims = { batch = 1, seq = 8, width = 16, heads = 2 }
inputs = [
  { name = "q", draw = "rand", seeded = true, shape = ["batch", "seq", "width"], grad = true },
  { name = "k", draw = "rand", seeded = true, shape = ["batch", "seq", "width"], grad = true },
  { name = "v", draw = "rand", seeded = true, shape = ["batch", "seq", "width"], grad = true },
]
layers = [
  { name = "attn", op = "sdpa", inputs = ["q", "k", "v"], heads = "heads", causal = true, cp = 4 },
]
loss = { op = "sum" }
checks = [{ name = "out", tensor = "attn.out" }, { name = "dq", tensor = "q.grad" }]
"#;

fn ring(from: &str, to: &str) -> String {
    assert!(RING.contains(from), "{from}");
    RING.replacen(from, to, 1)
}

#[test]
fn ring_attention_cp_is_checked() {
    parse_file(FILE, RING).unwrap_or_else(|e| panic!("{e}"));
    parse_file(
        "configs/pytorch_ring_attention_sdpa_test.toml",
        &std::fs::read_to_string("configs/pytorch_ring_attention_sdpa_test.toml").unwrap(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // a sequence shorter than the ring
    let msg = err(&ring("seq = 8,", "seq = 3,"));
    assert_names(
        &msg,
        "layers[0].cp",
        &["3 tokens is shorter than the ring of cp = 4", "cp <= 3"],
    );
    // a sequence the ring does not divide
    let msg = err(&ring("seq = 8,", "seq = 6,"));
    assert_names(
        &msg,
        "layers[0].cp",
        &["cp = 4 does not divide the sequence of 6 tokens"],
    );
    // cp with tensor or data parallelism: not run yet
    let msg = err(&format!("parallel = {{ tp = 2 }}\n{RING}")
        .replacen("name = \"ring\"\n", "", 1)
        .replacen("parallel", "name = \"ring\"\nparallel", 1));
    assert_names(
        &msg,
        "layers[0].cp",
        &["together with tp = 2", "cp with tp = 1 and dp = 1"],
    );
    // q from a layer: the ring reads inputs only
    let msg = err(&ring(
        "layers = [\n",
        "layers = [\n  { name = \"qp\", op = \"linear\", input = \"q\", out = \"width\" },\n",
    )
    .replace(
        "inputs = [\"q\", \"k\", \"v\"]",
        "inputs = [\"qp\", \"k\", \"v\"]",
    )
    .replace("layers[0]", "layers[1]")
    .replace(
        "loss = { op = \"sum\" }",
        "loss = { op = \"sum\" }\ntrain = { steps = 1, optimizer = \"sgd\", lr = 0.1 }",
    ));
    assert_names(
        &msg,
        "layers[1].cp",
        &["reads `qp.out`", "q, k and v drawn or given as [[inputs]]"],
    );
    // a layer after the ring
    let msg = err(&ring(
        "cp = 4 },\n",
        "cp = 4 },\n  { name = \"act\", op = \"tanh\" },\n",
    ));
    assert_names(
        &msg,
        "layers[0].cp",
        &["followed by layers[1]", "the ring as the last layer"],
    );
    // out of range; `seeded` on another draw
    let msg = err(&ring("cp = 4", "cp = 0"));
    assert!(msg.contains("layers[0].cp"), "{msg}");
    let msg = err(&ring(
        "{ name = \"v\", draw = \"rand\", seeded = true,",
        "{ name = \"v\", draw = \"randn\", seeded = true,",
    ));
    assert_names(&msg, "inputs[2].seeded", &["only with draw = \"rand\""]);
    // load balancing: causal only, and 2 x cp chunks
    parse_file(FILE, &ring("cp = 4 }", "cp = 4, load_balance = true }"))
        .unwrap_or_else(|e| panic!("{e}"));
    let msg = err(&ring(
        "causal = true, cp = 4 }",
        "cp = 4, load_balance = true }",
    ));
    assert_names(
        &msg,
        "layers[0].load_balance",
        &["only with cp >= 2 and causal = true"],
    );
    let msg =
        err(&ring("cp = 4 }", "cp = 4, load_balance = true }").replace("seq = 8,", "seq = 12,"));
    assert_names(
        &msg,
        "layers[0].load_balance",
        &["2 x cp = 8 chunks", "a sequence that 2 x cp divides"],
    );
    // seeded inputs with data parallelism: not run yet (before the ring's own refusal)
    let msg = err(&ring("dims = {", "parallel = { dp = 2 }\ndims = {"));
    assert_names(
        &msg,
        "inputs[0].seeded",
        &["dp > 1", "seeded = true with dp = 1"],
    );
}
