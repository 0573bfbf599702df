//! One worker process of a multi-process soak run (`gateway_sim::run::run_processes`): the
//! spec as JSON on standard input, progress and the result on standard output. `cargo xtask
//! soak --workers N` starts itself as `xtask soak-worker` instead; this binary serves the tests.

fn main() -> std::process::ExitCode {
    match gateway_sim::run::worker_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("soak-worker: {message}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
