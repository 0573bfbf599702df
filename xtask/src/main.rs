//! `cargo xtask <command>`: repository automation, one module per subcommand; it depends on the
//! workspace's own crates, clap, serde_json and indicatif only.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints

mod budget;
mod contract;
mod deps;
mod edge;
mod soak;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// repository automation, one module per subcommand
#[derive(Parser, Debug)]
#[command(name = "xtask", bin_name = "cargo xtask", arg_required_else_help = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// plan|trace: the retry-budget planner of seed 002, JSON on stdin and stdout
    #[command(subcommand, override_usage = "cargo xtask budget plan|trace < input.json")]
    Budget(budget::Mode),
    /// run the backend contract suite on memory and Redis (Redis mandatory) and print
    /// the table of cases x backends; Redis from REDIS_URL, else 127.0.0.1:6379, else a
    /// redis-server started on a free port
    #[command(verbatim_doc_comment)]
    Contract,
    /// the soak: a scenario through the gateway in virtual time, invariants, report
    /// (cargo xtask soak --help for the options)
    #[command(verbatim_doc_comment)]
    Soak(Box<soak::SoakArgs>),
    /// check the dependency direction: gateway-core pulls in no async runtime, Redis or
    /// HTTP crate, and only gateway-redis depends on fred
    #[command(verbatim_doc_comment)]
    Deps,
    /// the proxy binary against schema bombs: time to each 400 and resident-memory growth
    /// (fails at 50 ms or 20 MiB)
    #[command(verbatim_doc_comment)]
    Edge,
    /// one process of a `soak --workers` run: its spec on stdin, its events on stdout
    #[command(hide = true)]
    SoakWorker,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help goes to stdout and succeeds; a usage error exits 1 as before clap (whose 2
            // would read as budget's "invalid input").
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    let result = match cli.command {
        Command::Budget(mode) => return budget::run(mode),
        Command::Contract => contract::run(),
        Command::Deps => deps::run(),
        Command::Edge => edge::run(),
        Command::Soak(args) => soak::run_soak(*args),
        Command::SoakWorker => gateway_sim::run::worker_main().map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command, budget};
    use clap::Parser;

    fn parse(argv: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(["cargo xtask"].iter().chain(argv)).map(|cli| cli.command)
    }

    #[test]
    fn each_command_parses_and_takes_no_stray_argument() {
        assert!(matches!(parse(&["budget", "plan"]), Ok(Command::Budget(budget::Mode::Plan))));
        assert!(matches!(parse(&["budget", "trace"]), Ok(Command::Budget(budget::Mode::Trace))));
        assert!(matches!(parse(&["contract"]), Ok(Command::Contract)));
        assert!(matches!(parse(&["deps"]), Ok(Command::Deps)));
        assert!(matches!(parse(&["edge"]), Ok(Command::Edge)));
        assert!(matches!(parse(&["soak-worker"]), Ok(Command::SoakWorker)));
        for argv in [&["budget", "plan", "x"][..], &["contract", "x"], &["deps", "x"], &["edge", "x"]] {
            let e = parse(argv).unwrap_err().to_string();
            assert!(e.contains("unexpected argument 'x'"), "{argv:?}: {e}");
        }
        let e = parse(&["budget", "draw"]).unwrap_err().to_string();
        assert!(e.contains("unrecognized subcommand 'draw'"), "{e}");
        assert!(parse(&["frobnicate"]).unwrap_err().to_string().contains("unrecognized subcommand 'frobnicate'"));
    }

    #[test]
    fn help_and_a_missing_command_are_not_usage_errors_of_a_value() {
        let help = parse(&["--help"]).unwrap_err();
        assert!(!help.use_stderr(), "help goes to stdout, status 0");
        assert!(help.to_string().contains("the soak: a scenario through the gateway"));
        assert!(!help.to_string().contains("soak-worker"), "the worker is hidden");
        let missing = parse(&[]).unwrap_err();
        assert!(missing.use_stderr() && missing.to_string().contains("Usage: cargo xtask <COMMAND>"), "{missing}");
        let soak = parse(&["soak", "--help"]).unwrap_err().to_string();
        assert!(soak.contains("--callers <N>") && soak.contains("[alias: --concurrency]"), "{soak}");
    }
}
