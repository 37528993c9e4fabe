//! The output tables: their columns declared once ([`schema`]), and the codecs derived from
//! that declaration that write and read them (CSV, Parquet, the binary row log), the per-seed
//! file of a sweep in its format, frontiers, tensor dumps, and the encoder of the units the
//! engine hands on ([`sink`]).

pub mod csv;
pub mod dump;
pub mod frontiers;
pub mod parquet;
pub mod rowlog;
pub mod scale;
pub mod schema;
pub mod seeds_file;
pub mod sink;
