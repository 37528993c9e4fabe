//! Prints seedsweep's own ChaCha draws of an outer-loop file (`[train.outer]` with
//! `scheme = "flax"` and `draw = "randn"` / `"teacher"` inputs) for one parametrization and
//! seed, so that `scripts/jax_mirror.py` can run JAX on exactly the initial parameters and data
//! seedsweep runs: the harness then tests the arithmetic, not the generator (which has its own
//! tests, `src/rng/chacha.rs`). `repro --dump` writes the checked tensors only, not the data.
//!
//!     cargo run --release --example outer_draws -- FILE.toml PARAM_ID SEED
//!
//! Output (stdout, one JSON object): `params` (every parameter in table order: `name`, `shape`
//! as the graph holds it, `bits`), `x` and `y` (the global model input and target, replica-major
//! rows, `shape` and `bits`), where `bits` is the row-major f32 values as 8 hex digits each
//! (the u32 bit pattern). The draws are `seedsweep::exec::init::draw_teacher`'s, the function
//! the executor calls.

use std::fmt::Write as _;

use seedsweep::scenario::ir::OuterData;

fn hex(v: &[f32]) -> String {
    v.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{:08x}", x.to_bits());
        s
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, pid, seed] = args.as_slice() else {
        eprintln!("usage: outer_draws FILE.toml PARAM_ID SEED");
        std::process::exit(2);
    };
    let seed: u64 = seed.parse().expect("SEED: an integer");
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let name = std::path::Path::new(file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let sf = seedsweep::scenario::load(&name, &text).unwrap_or_else(|e| panic!("{e}"));
    let s = seedsweep::exec::build::build(sf).unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = s
        .graphs()
        .find(|g| g.id == *pid)
        .unwrap_or_else(|| panic!("{name}: no parametrization {pid}"));
    let o = g
        .train
        .outer
        .as_ref()
        .unwrap_or_else(|| panic!("{name}: no [train.outer]"));
    let OuterData::Teacher { noise_std } = o.data else {
        eprintln!("{name}: the file writes its data (draw = \"fixed\"): nothing is drawn");
        std::process::exit(2);
    };
    let (mut init, mut x, mut y, mut buf, mut teacher) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        String::new(),
        Vec::new(),
    );
    seedsweep::exec::init::draw_teacher(
        g,
        o.replicas,
        noise_std,
        seed,
        &mut init,
        &mut x,
        &mut y,
        &mut buf,
        &mut teacher,
    );
    let params: Vec<serde_json::Value> = g
        .params
        .iter()
        .zip(&init)
        .map(|(p, v)| serde_json::json!({"name": p.name, "shape": p.shape, "bits": hex(v)}))
        .collect();
    let out = serde_json::json!({
        "file": name,
        "param": pid,
        "seed": seed,
        "replicas": o.replicas,
        "params": params,
        "x": {"len": x.len(), "bits": hex(&x)},
        "y": {"len": y.len(), "bits": hex(&y)},
    });
    println!("{out}");
}
