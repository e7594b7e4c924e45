//! Stamps the version every binary prints (`--version`) with the git revision it was built from:
//! `EDGEGATE_REVISION` when set (an image build without `.git`), else `git rev-parse HEAD`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=EDGEGATE_REVISION");
    // A new commit moves HEAD or the branch it names: rebuild the stamp then, and only then.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    let revision = std::env::var("EDGEGATE_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let stamped = match revision {
        Some(revision) => format!("{version} (git {revision})"),
        None => version,
    };
    println!("cargo:rustc-env=EDGEGATE_VERSION={stamped}");
}
