//! docs/'s commands, run as an operator pastes them: a page's ```sh block, found by the text
//! before it, run by bash in a directory standing for a clone of edgegate (its `deploy/` linked),
//! kubectl's current context the one given.

use std::path::Path;
use std::process::Command;

use crate::control_plane::repo;
use crate::helpers::run_bounded;

/// The first ```sh block of docs/`page` after `after` (a heading or a sentence of the page).
pub fn sh_block(page: &str, after: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs").join(page)).unwrap_or_else(|e| panic!("docs/{page}: {e}"));
    let (_, rest) = text.split_once(after).unwrap_or_else(|| panic!("docs/{page} no longer says {after:?}"));
    let (_, block) = rest.split_once("```sh\n").unwrap_or_else(|| panic!("no sh block after {after:?}"));
    block.split_once("```").map(|(block, _)| block.to_owned()).expect("the block's end")
}

/// `block` cut before its first line that starts with `cue` (a comment saying what the operator
/// does by hand there, which the test then does): the commands before, the commands after.
pub fn split_at(block: &str, cue: &str) -> (String, String) {
    let at = block.find(&format!("\n{cue}")).unwrap_or_else(|| panic!("no line {cue:?} in:\n{block}"));
    (block[..=at].to_owned(), block[at + 1..].to_owned())
}

/// A directory standing for a clone of edgegate: `deploy/` linked from the repository.
pub fn clone() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(repo().join("deploy"), dir.path().join("deploy")).expect("link deploy/");
    dir
}

/// Run `commands` as pasted into bash (stopping at the first that fails) in `clone`, kubectl's
/// current context `kubeconfig`'s; their standard output. Fails the test if one fails.
pub fn paste(clone: &Path, kubeconfig: &Path, commands: &str) -> String {
    let out = run_bounded(
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", commands])
            .current_dir(clone)
            .env("KUBECONFIG", kubeconfig),
        120,
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "pasted:\n{commands}\nsaid:\n{said}{}", String::from_utf8_lossy(&out.stderr));
    said
}
