//! Projects from a directory of kubeconfigs (`--projects-dir`, a Secret volume): one project
//! per file, followed as files come, change and go.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::engaged::Engaged;

pub fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "project".to_owned())
}

/// Engage a project per kubeconfig in `dir`, and follow the directory: files added, changed or
/// removed engage, re-engage or disengage their project. A file is compared by its content: a
/// kubelet rewrites every file of a Secret volume when any key changes (a project added), and a
/// project whose kubeconfig did not change is not engaged again (its watches listed anew).
pub async fn follow_projects_dir(dir: &Path, engaged: &Engaged) {
    let mut changes = edgegate::index::fs_watch::DirChanges::new();
    let mut watching = false;
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    loop {
        watching = watching || changes.watch(dir);
        let files = project_files(dir);
        for (name, path) in &files {
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
        engaged.discovered();
        tokio::select! {
            _ = changes.changed.recv() => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(if watching { 30 } else { 1 })) => {}
        }
    }
}

fn project_files(dir: &Path) -> BTreeMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "kubeconfig" || e == "yaml") && p.is_file())
        .map(|p| (stem(&p), p))
        .collect()
}
