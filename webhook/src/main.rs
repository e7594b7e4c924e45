//! `edgegate-webhook`: admits EndpointSlice copies to the hub only where their namespace's
//! EdgeReachability names one of their addresses.
#![forbid(unsafe_code)]

use clap::Parser;
use edgegate_webhook::{args, run};

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    edgegate::runtime::process::main("edgegate-webhook", args.log_format, run::run(args))
}
