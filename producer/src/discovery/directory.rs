//! Projects from a directory of kubeconfigs (`--projects-dir`, a Secret volume): one project
//! per file, followed as files come, change and go.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Discovery;
use crate::engaged::Engaged;

pub fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "project".to_owned())
}

/// Engage a project per kubeconfig in `dir`, and follow the directory: files added, changed or
/// removed engage, re-engage or disengage their project. A file is compared by its content: a
/// kubelet rewrites every file of a Secret volume when any key changes (a project added), and a
/// project whose kubeconfig did not change is not engaged again (its watches listed anew). A
/// directory that cannot be read leaves every project as it is, and shows in `discovery`.
pub async fn follow_projects_dir(dir: &Path, engaged: &Engaged, discovery: &Discovery) {
    let mut changes = edgegate::index::fs_watch::DirChanges::new();
    let mut watching = false;
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    loop {
        watching = watching || changes.watch(dir);
        match project_files(dir) {
            Ok(files) => {
                engage_files(&files, &mut seen, engaged).await;
                engaged.discovered();
                discovery.listed();
            }
            Err(error) => {
                discovery.failed(&format!("reading {}: {error}", dir.display()));
            }
        }
        tokio::select! {
            // A closed channel (no watcher could be made) disables this branch: the sleep paces.
            Some(_) = changes.changed.recv() => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(if watching { 30 } else { 1 })) => {}
        }
    }
}

/// Engage a project per file of `files` whose content changed since `seen`, and let go of those
/// whose file went.
async fn engage_files(files: &BTreeMap<String, PathBuf>, seen: &mut BTreeMap<String, Vec<u8>>, engaged: &Engaged) {
    for (name, path) in files {
        let Ok(content) = std::fs::read(path) else { continue };
        if seen.get(name).is_some_and(|s| *s == content) {
            continue;
        }
        match edgegate::runtime::client::project_client(path).await {
            Ok(client) => {
                engaged.engage(name, client);
                seen.insert(name.clone(), content);
            }
            Err(error) => {
                tracing::warn!(project = %name, path = %path.display(), error = format!("{error:#}"), "project kubeconfig unusable; not engaged")
            }
        }
    }
    for name in engaged.names() {
        if !files.contains_key(&name) {
            engaged.disengage(&name);
            seen.remove(&name);
        }
    }
}

fn project_files(dir: &Path) -> std::io::Result<BTreeMap<String, PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "kubeconfig" || e == "yaml") && p.is_file())
        .map(|p| (stem(&p), p))
        .collect())
}
