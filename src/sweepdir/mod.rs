//! The sweep folder: whose it is ([`folder`]), who writes it ([`lock`]), what sweep it holds
//! ([`fingerprint`]), how far it got ([`checkpoint`]), and how shards add up
//! ([`shard_set`]). Every file in it is written by [`crate::sys::atomic_write`].

pub mod checkpoint;
pub mod fingerprint;
pub mod folder;
pub mod lock;
pub mod shard_set;
