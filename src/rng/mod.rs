//! Deterministic random number generation.
//!
//! Two families of generators live here, and they never share state:
//!
//! * [`torch`]: a bit-exact port of PyTorch's CPU generator (`torch.manual_seed`, MT19937 and the
//!   ATen CPU distribution kernels `uniform_`, `normal_`, `randint` and the `nn.Linear` /
//!   `nn.Embedding` initialisers). Used by `--rng torch` so that a CPU run starts from exactly the
//!   parameters and batches a PyTorch test would build. Bit-exactness is proven against
//!   PyTorch 2.15 draws by `tests/suite/rng_torch_fixtures.rs`.
//! * [`chacha`]: keyed ChaCha20 streams for synthetic scenarios. Each `(seed, stream name)` pair
//!   names an independent stream, so results never depend on thread scheduling or on which other
//!   seeds run.
//!
//! This module depends only on `std`, `libm`, `rand`, `rand_chacha` and the CPU dispatch
//! [`crate::kernels::isa`] (which compilation of the generator's bulk loops runs).

pub mod chacha;
pub mod torch;
