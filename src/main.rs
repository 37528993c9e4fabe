//! `seedsweep`: parse arguments, run the command, map errors to exit codes
//! (1: error, 2: bad usage from clap, 3: `--fail-on-exceed` and a check exceeded).

use clap::Parser;

fn run() -> anyhow::Result<i32> {
    let cli = seedsweep::cli::Cli::parse();
    match seedsweep::cli::into_action(cli)? {
        seedsweep::cli::Action::Sweep(o) => seedsweep::app::sweep(&o),
        seedsweep::cli::Action::Repro(o) => seedsweep::app::repro(&o),
        seedsweep::cli::Action::Explain { common, query, csv } => {
            let catalog = seedsweep::app::load_catalog(&common)?;
            let (cands, seed) = seedsweep::explain::explain(&catalog, &query)?;
            if csv {
                seedsweep::app::emit(&seedsweep::explain::to_csv(&cands));
            } else {
                seedsweep::app::emit(&seedsweep::explain::to_table(&query, seed, &cands));
            }
            Ok(0)
        }
        seedsweep::cli::Action::Merge(o) => seedsweep::app::merge(&o),
        seedsweep::cli::Action::Scale(o) => seedsweep::app::scale(&o),
        seedsweep::cli::Action::Size(o) => seedsweep::app::size(&o),
        seedsweep::cli::Action::Report(dir, out) => {
            let stats = seedsweep::export::html::write_report(&dir, &out)?;
            let msg = format!(
                "wrote {} ({} charts, {} checks)",
                out.display(),
                stats.charts,
                stats.checks
            );
            if out.as_os_str() == "-" {
                // The report itself went to stdout.
                eprintln!("{msg}");
            } else {
                seedsweep::app::emitln(&msg);
            }
            Ok(0)
        }
        seedsweep::cli::Action::Check(path) => {
            seedsweep::app::emit(&seedsweep::lang::check::check_path(&path)?);
            Ok(0)
        }
        seedsweep::cli::Action::Bench(o) => {
            seedsweep::app::emit(&seedsweep::app::bench(&o)?);
            Ok(0)
        }
        seedsweep::cli::Action::List(c) => {
            seedsweep::app::emit(&seedsweep::app::list(&c)?);
            Ok(0)
        }
    }
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
