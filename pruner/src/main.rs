//! `edgegate-pruner`: deletes published copies whose addresses left their namespace's record.
#![forbid(unsafe_code)]

use clap::Parser;
use edgegate_pruner::{args, run};

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    edgegate::runtime::process::main("edgegate-pruner", args.log_format, run::run(args))
}
