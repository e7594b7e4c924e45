//! `edgegate-webhook`: admits EndpointSlice copies to the hub only where their namespace's
//! EdgeReachability names one of their addresses.
#![forbid(unsafe_code)]

use clap::Parser;
use edgegate_webhook::{args, run};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    edgegate::cli::init_tracing(args.log_format);
    if let Err(error) = run::run(args).await {
        tracing::error!(error = format!("{error:#}"), "edgegate-webhook failed");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
