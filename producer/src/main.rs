//! `edgegate-producer`: writes each project namespace's EdgeReachability on the hub from what the
//! project's HTTPProxies serve.
#![forbid(unsafe_code)]

use clap::Parser;
use edgegate_producer::{args, run};

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    edgegate::runtime::process::main("edgegate-producer", args.log_format, run::run(args))
}
