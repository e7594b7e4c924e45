//! The engaged projects by name, and the one a hub namespace's record is of: by the namespace's
//! project label, then by its UID.

use std::collections::BTreeMap;
use std::sync::Arc;

use edgegate::index::hub::HubView;
use edgegate::index::project::ProjectIndex;
use parking_lot::RwLock;

/// The engaged projects, by name.
pub type Projects = Arc<RwLock<BTreeMap<String, Arc<ProjectIndex>>>>;

/// The engaged project with a namespace of UID `uid` (the one hub namespace `ns-<uid>` is the
/// record's of): its name, index and that namespace. Looks in project `hint` first (the hub
/// namespace's project label names it), then in every project, comparing UIDs in place: a hub
/// namespace's event costs one lookup, not a list of every namespace of every project.
pub fn find_by_uid(projects: &Projects, uid: &str, hint: Option<&str>) -> Option<(String, Arc<ProjectIndex>, String)> {
    let projects = projects.read();
    let hinted = hint.and_then(|name| projects.get_key_value(name));
    hinted
        .into_iter()
        .chain(projects.iter())
        .find_map(|(name, index)| index.namespace_with_uid(uid).map(|ns| (name.clone(), Arc::clone(index), ns)))
}

/// The project a hub namespace's [`UPSTREAM_CLUSTER_LABEL`](edgegate::core::project::UPSTREAM_CLUSTER_LABEL)
/// names, among the engaged ones. One lookup, not a pass over every project (each copy judged
/// asks): the label is `cluster-<name>`. Only a label with `_` may name a project whose name has
/// a `/` (spelled `_`; `--project-name` allows one): those alone are looked for among all.
pub fn labelled_project(view: &HubView, projects: &Projects, hub_ns: &str) -> Option<String> {
    let label = view.upstream_cluster(hub_ns)?;
    let name = label.strip_prefix("cluster-")?;
    let projects = projects.read();
    if projects.contains_key(name) {
        return Some(name.to_owned());
    }
    let spelled = |candidate: &&String| edgegate::core::project::cluster_label(candidate) == label;
    label.contains('_').then(|| projects.keys().find(spelled).cloned()).flatten()
}
