//! Datum's Milo as the source of projects: one API server serving every project by path. Its
//! root holds a cluster-scoped `Project` per project (`resourcemanager.miloapis.com/v1alpha1`);
//! a project's control plane is the same host, under [`control_plane_path`]. What each state of a
//! `Project` means for the producer is [`engagement`]'s, and errs toward keeping what is
//! published: a project not engaged keeps its records as they are and its copies (nobody deletes
//! a copy whose project nobody watches).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::slice::{lean_metadata, null_as_empty};

pub const GROUP: &str = "resourcemanager.miloapis.com";
pub const VERSION: &str = "v1alpha1";

/// A Milo `Project`: its name (the project's id) and conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Project {
    #[serde(default, deserialize_with = "lean_metadata")]
    pub metadata: Box<ObjectMeta>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: ProjectStatus,
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectStatus {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub conditions: Vec<Condition>,
}

/// A `metav1.Condition`, its type and status only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
}

static_resource!(Project, k8s_openapi::ClusterResourceScope, GROUP, VERSION, "Project", "projects");

/// The path under Milo's host at which project `name`'s control plane is served.
pub fn control_plane_path(name: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/projects/{name}/control-plane")
}

/// What the producer does with a project in a given state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engagement {
    /// Watch it and write its records (and, pruning, delete its copies on its evidence).
    Engage,
    /// Do not watch it: its records stay as they are and its copies are kept. Why, for the log.
    Leave(&'static str),
}

/// A project is engaged while it is `Ready` (condition `True`), not `Suspended`, and not being
/// deleted. Otherwise it is left alone, never emptied:
/// - `Ready` not `True` (`Unknown` until Milo reconciles it, `False` while its control plane is
///   not serving): what it serves cannot be read, so nothing is known to have stopped serving;
/// - `Suspended`: its records stand as they were when it was suspended;
/// - being deleted (its resources draining: objects disappear one by one): withdrawing them one
///   at a time would black-hole what still serves while the rest drains, and the cell deletes the
///   copies of the pods that go;
/// - a name that cannot be a path segment (Kubernetes names never are; a guard, not a case).
pub fn engagement(project: &Project) -> Engagement {
    let condition = |kind: &str| project.status.conditions.iter().find(|c| c.type_ == kind).map(|c| c.status.as_str());
    let name = project.metadata.name.as_deref().unwrap_or_default();
    // DNS-1123: alphanumerics, '-' and '.', and an alphanumeric at both ends (so never `.` or
    // `..`, which a path would resolve).
    let ends = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    let bytes = name.as_bytes();
    if !ends(bytes.first())
        || !ends(bytes.last())
        || !bytes.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
    {
        return Engagement::Leave("its name is no DNS name");
    }
    if project.metadata.deletion_timestamp.is_some() {
        return Engagement::Leave("being deleted");
    }
    if condition("Suspended") == Some("True") {
        return Engagement::Leave("suspended");
    }
    match condition("Ready") {
        Some("True") => Engagement::Engage,
        _ => Engagement::Leave("not ready"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(name: &str, conditions: &[(&str, &str)], deleting: bool) -> Project {
        let mut value = serde_json::json!({
            "apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
            "metadata": {"name": name, "uid": "u", "resourceVersion": "1"},
            "status": {"conditions": conditions.iter().map(|(t, s)| serde_json::json!({
                "type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-12-05T00:00:00Z"
            })).collect::<Vec<_>>()},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z".into();
        }
        serde_json::from_value(value).expect("a Project")
    }

    #[test]
    fn engaged_only_while_ready_and_not_suspended_or_deleted() {
        use Engagement::{Engage, Leave};
        let cases = [
            (project("acme", &[("Ready", "True")], false), Engage),
            (project("acme", &[("Ready", "True"), ("Suspended", "False")], false), Engage),
            (project("acme", &[], false), Leave("not ready")),
            (project("acme", &[("Ready", "Unknown")], false), Leave("not ready")),
            (project("acme", &[("Ready", "False")], false), Leave("not ready")),
            (project("acme", &[("Ready", "True"), ("Suspended", "True")], false), Leave("suspended")),
            (project("acme", &[("Ready", "True"), ("ResourceCleanup", "True")], true), Leave("being deleted")),
            (project("a/b", &[("Ready", "True")], false), Leave("its name is no DNS name")),
            (project("", &[("Ready", "True")], false), Leave("its name is no DNS name")),
            (project("..", &[("Ready", "True")], false), Leave("its name is no DNS name")),
            (project(".", &[("Ready", "True")], false), Leave("its name is no DNS name")),
            (project("-acme", &[("Ready", "True")], false), Leave("its name is no DNS name")),
            (project("a.b-c", &[("Ready", "True")], false), Engage),
        ];
        for (project, expected) in cases {
            assert_eq!(engagement(&project), expected, "{project:?}");
        }
    }

    #[test]
    fn a_project_without_status_decodes_and_is_left() {
        let project: Project =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "new"}, "status": null})).expect("decodes");
        assert_eq!(engagement(&project), Engagement::Leave("not ready"));
        assert_eq!(
            control_plane_path("acme"),
            "/apis/resourcemanager.miloapis.com/v1alpha1/projects/acme/control-plane"
        );
    }
}
