//! The `tether` command line: flags to a validated command, errors to exit codes.

mod cli;

use std::process::ExitCode;

use clap::Parser;

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
