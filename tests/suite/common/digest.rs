//! The fixtures' digest of a tensor's bits.

/// FNV-1a 64 of the little-endian bytes of `words` (the f32 bit patterns of a tensor, as
/// `scripts/torch_mirror.py` and `scripts/jax_moe.py` digest them): seedsweep's own
/// [`seedsweep::rng::chacha::fnv1a64`] of those bytes.
pub fn fnv1a64_words(words: &[u32]) -> u64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    seedsweep::rng::chacha::fnv1a64(&bytes)
}
