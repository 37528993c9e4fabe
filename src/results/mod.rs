//! The output tables: their columns declared once ([`schema`]), and the codecs that write and
//! read them (CSV, Parquet, the binary row log, the seeds file, frontiers, tensor dumps).

pub mod csv;
pub mod dump;
pub mod frontiers;
pub mod parquet;
pub mod rowlog;
pub mod scale;
pub mod schema;
pub mod seeds_file;
