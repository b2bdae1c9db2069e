//! The `tether` command line: flags to a validated command, errors to exit codes.

// A function longer than clippy.toml's threshold is shaped along its concepts, or says
// why it is one (`#[expect(clippy::too_many_lines, reason = "…")]`). Tests are exempt:
// a scenario reads top to bottom as the user's steps.
#![warn(clippy::too_many_lines)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc gives memory back to the system after a large pass (glibc's malloc keeps
/// the peak resident in a long-running daemon).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    cli::init_logging(&args.global);
    match cli::run(args).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{error:?}");
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}
