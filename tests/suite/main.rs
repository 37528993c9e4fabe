//! The integration tests: one test binary (linking the crate once), one module per subject.
//!
//! Every module runs in this one process, in parallel with the others. A test that measures
//! process-wide state (the allocator's count, the resident set, a counter of the library)
//! reruns itself alone in a fresh process of this binary (`common::alone`). Paths are built
//! from `CARGO_MANIFEST_DIR`; the current directory is never changed, and the process
//! environment is never set (child processes get theirs through `Command::env`).
//!
//! Run one subject with `cargo test --release --test suite -- MODULE::`.

mod common;

// The command line and what it writes.
mod capture_equiv;
mod ci_example;
mod cli;
mod dump_evaluated;
mod dump_npy;
mod fuzz;
mod output_streams;
mod parquet;
mod report;
mod routing_flips;
mod tables;
mod verdict;

// The sweep folder: safety, shards and merge, resume after a kill.
mod kill_resume;
mod ring_attention;
mod safety;
mod sdpa_bmm_fixture;
mod shards;

// The scenario language.
mod lang_builtins;
mod lang_errors;

// The executor: golden traces, kernels, streaming, memory, mutants.
mod condition_fused;
mod diloco;
mod dp_alloc;
mod fused_sgd;
mod golden_diloco;
mod golden_t1_t2;
mod hsdp;
mod kernels_agree;
mod memory_bound;
mod mutants;
mod streaming;
mod vocab_parallel_embedding;

// Bit for bit against PyTorch, MKL and Python.
mod activations_fixture;
mod attention_corpus;
mod builtin_fixtures;
mod conformance;
mod elementwise;
mod f64_truth;
mod glibc_float;
mod heldout;
mod jax_corpus;
mod loss_fixture;
mod mkl_order_model;
mod mkl_sqrt;
mod mkl_tanh;
mod moe;
mod moe_corpus;
mod moe_jax;
mod norm_fixture;
mod optim_fixture;
mod py_repr_fixture;
mod revealed_orders;
mod rng_torch_fixtures;
mod rope_fixture;
mod softmax_fixture;
mod torch_corpus;
mod torch_fixtures;
mod torch_ops_fixture;

// Tolerance sizing and tail statistics.
mod size;
mod tail_consistency;
mod tail_coverage;
