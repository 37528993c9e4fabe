//! The sweep folder: whose it is ([`folder`]), who writes it ([`lock`]), what sweep it holds
//! ([`fingerprint`]), how far it got ([`checkpoint`]), how shards add up ([`shard_set`]), and
//! how every file is written ([`atomic_write`]).

pub mod atomic_write;
pub mod checkpoint;
pub mod fingerprint;
pub mod folder;
pub mod lock;
pub mod shard_set;
