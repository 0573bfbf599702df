//! `cargo xtask <command>`: repository automation, one module per subcommand; it depends on the
//! workspace's own crates, serde_json and indicatif only.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool prints

mod budget;
mod contract;
mod deps;
mod edge;
mod soak;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  budget    plan|trace: the retry-budget planner of seed 002, JSON on stdin and stdout
  contract  run the backend contract suite on memory and Redis (Redis mandatory) and print
            the table of cases x backends; Redis from REDIS_URL, else 127.0.0.1:6379, else a
            redis-server started on a free port
  soak      the soak: a scenario through the gateway in virtual time, invariants, report
            (cargo xtask soak --help for the options)
  deps      check the dependency direction: gateway-core pulls in no async runtime, Redis or
            HTTP crate, and only gateway-redis depends on fred
  edge      the proxy binary against schema bombs: time to each 400 and resident-memory growth
            (fails at 50 ms or 20 MiB)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("budget") {
        return budget::run(&args[1..]);
    }
    let result = match args.first().map(String::as_str) {
        Some("contract") => contract::run(&args[1..]),
        Some("deps") => deps::run(&args[1..]),
        Some("edge") => edge::run(&args[1..]),
        Some("soak") if args.iter().any(|a| a == "--help" || a == "-h") => {
            println!("{}", soak::USAGE);
            Ok(())
        }
        Some("soak") => soak::run_soak(&args[1..]),
        Some("soak-worker") => gateway_sim::run::worker_main().map_err(|e| e.to_string()),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
        None => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
