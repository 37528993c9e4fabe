//! `seedsweep`: parse arguments, run the command, map errors to exit codes
//! (1: error, 2: bad usage from clap, 3: `--fail-on-exceed` and a check exceeded).

use clap::Parser;

/// Large blocks on transparent huge pages ([`seedsweep::sys::alloc`]).
#[global_allocator]
static ALLOCATOR: seedsweep::sys::alloc::HugePageAlloc = seedsweep::sys::alloc::HugePageAlloc;

fn run() -> anyhow::Result<i32> {
    let cli = seedsweep::cli::Cli::parse();
    seedsweep::commands::dispatch(seedsweep::cli::into_action(cli)?)
}

fn main() {
    match run() {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::exit(1);
        }
    }
}
