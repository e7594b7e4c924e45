//! `edgegate check`: one slice (or one UPDATE) against one record, as the webhook judges it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use edgegate::core::decision::{Allowed, Decision, decide, decide_update};
use edgegate::{CopySelector, RecordState};

pub fn check(
    record: Option<PathBuf>,
    old: Option<PathBuf>,
    slice: &std::path::Path,
    selector: &CopySelector,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let state = match record {
        None => RecordState::Absent,
        Some(path) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let mut records = edgegate::index::source::files::parse_file(&path, &text)?;
            anyhow::ensure!(records.len() == 1, "{} holds {} records; give one", path.display(), records.len());
            let record = edgegate::index::source::record_of(&records.remove(0));
            for bad in record.invalid() {
                println!("skipped record entry {:?}: {}", bad.entry, bad.error);
            }
            RecordState::Present(Arc::new(record))
        }
    };
    let slice = read_slice(slice)?;
    Ok(match old.as_deref().map(read_slice).transpose()? {
        Some(old) => report(&decide_update(&state, &old, &slice, selector)),
        None => report(&decide(&state, &slice, selector)),
    })
}

pub fn read_slice(path: &std::path::Path) -> anyhow::Result<edgegate::Slice> {
    use anyhow::Context;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not an EndpointSlice", path.display()))
}

fn report(decision: &Decision) -> ExitCode {
    match decision {
        Decision::Allow(why) => {
            let why = match why {
                Allowed::NotACopy => "not a copy (the copy selector does not match its labels)".to_owned(),
                Allowed::NoAddresses => "the copy carries no address".to_owned(),
                Allowed::NoRecord => "the namespace has no record; nothing changes until it has one".to_owned(),
                Allowed::Named(a) => format!("the record names {a}"),
                Allowed::Gone => "its last finalizer leaves: the copy is deleted with this UPDATE".to_owned(),
                Allowed::NothingNew => "an UPDATE of a copy that adds no address it did not carry".to_owned(),
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
