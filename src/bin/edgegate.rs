//! `edgegate`: print the CRD, or check one slice against one record offline.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use edgegate::decision::{Allowed, Decision, decide};
use edgegate::{CopySelector, RecordState};

#[derive(Parser)]
#[command(name = "edgegate", version, about = "edgegate's offline tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the EdgeReachability CustomResourceDefinition as YAML.
    Crd,
    /// Judge one EndpointSlice against one EdgeReachability record, as the webhook would.
    /// Exit 0 allow, 1 deny, 2 error.
    Check {
        /// EdgeReachability file (YAML or JSON). Without it the namespace has no record.
        #[arg(long)]
        record: Option<PathBuf>,
        /// EndpointSlice file (YAML or JSON).
        #[arg(long)]
        slice: PathBuf,
        /// Label selector that identifies copies.
        #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = edgegate::selector::DEFAULT_COPY_SELECTOR)]
        copy_selector: CopySelector,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crd => match edgegate::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Check { record, slice, copy_selector } => match check(record, &slice, &copy_selector) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn check(record: Option<PathBuf>, slice: &PathBuf, selector: &CopySelector) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let state = match record {
        None => RecordState::Absent,
        Some(path) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let mut records = edgegate::source::files::parse_file(&path, &text)?;
            anyhow::ensure!(records.len() == 1, "{} holds {} records; give one", path.display(), records.len());
            let record = edgegate::source::record_of(&records.remove(0));
            for bad in record.invalid() {
                println!("skipped record entry {:?}: {}", bad.entry, bad.error);
            }
            RecordState::Present(Arc::new(record))
        }
    };
    let text = std::fs::read_to_string(slice).with_context(|| format!("reading {}", slice.display()))?;
    let slice: edgegate::Slice =
        serde_yaml::from_str(&text).with_context(|| format!("{} is not an EndpointSlice", slice.display()))?;
    Ok(report(&decide(&state, &slice, selector)))
}

fn report(decision: &Decision) -> ExitCode {
    match decision {
        Decision::Allow(why) => {
            let why = match why {
                Allowed::NotACopy => "not a copy (the copy selector does not match its labels)".to_owned(),
                Allowed::NoAddresses => "the copy carries no address".to_owned(),
                Allowed::NoRecord => "the namespace has no record; nothing changes until it has one".to_owned(),
                Allowed::Named(a) => format!("the record names {a}"),
            };
            println!("allow: {why}");
            ExitCode::SUCCESS
        }
        Decision::Deny(denial) => {
            println!("deny: {}", denial.message());
            ExitCode::from(1)
        }
        Decision::Unavailable(reason) => {
            println!("error: {reason}");
            ExitCode::from(2)
        }
    }
}
