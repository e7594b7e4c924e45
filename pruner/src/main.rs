//! `edgegate-pruner`: deletes published copies whose addresses left their namespace's record.
#![forbid(unsafe_code)]

use clap::Parser;
use edgegate_pruner::{args, run};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    edgegate::cli::init_tracing(args.log_format);
    if let Err(error) = run::run(args).await {
        tracing::error!(error = format!("{error:#}"), "edgegate-pruner failed");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
