//! Projects discovered from Milo (`--milo-kubeconfig`): a watch of the root's `Project` objects,
//! each project engaged while [`engagement`] says so and reached under its path on the root's
//! host, through one shared connection pool ([`PathClients`]). A watch of the root that fails
//! leaves every project as it is until it lists again: not knowing is no reason to let go; it
//! shows in [`Discovery`].

use std::collections::BTreeMap;

use edgegate::core::milo::{Engagement, Project, control_plane_path, engagement};
use edgegate::index::source::follow::{SnapshotSink, Whole, follow, project_watch_timeout};
use edgegate::runtime::client::PathClients;
use kube::ResourceExt;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::watcher;

use super::Discovery;
use crate::engaged::Engaged;

/// Follow Milo's projects into `engaged` for as long as the process runs.
pub async fn follow_milo(clients: PathClients, engaged: Engaged, discovery: Discovery) -> anyhow::Result<()> {
    let root = clients.at("")?;
    let mut sink = Whole::new(MiloProjects { clients, engaged, discovery, left: BTreeMap::new() });
    let config = watcher::Config::default().timeout(project_watch_timeout()).streaming_lists();
    follow(kube::Api::all(root), config, &mut sink).await;
    Ok(())
}

struct MiloProjects {
    clients: PathClients,
    engaged: Engaged,
    discovery: Discovery,
    /// Projects seen and not engaged, with why (logged once per change).
    left: BTreeMap<String, &'static str>,
}

impl MiloProjects {
    fn apply(&mut self, project: &Project) {
        let name = project.name_any();
        match engagement(project) {
            Engagement::Engage if self.engaged.is_engaged(&name) => {}
            Engagement::Engage => match self.clients.at(&control_plane_path(&name)) {
                Ok(client) => {
                    self.left.remove(&name);
                    self.engaged.engage(&name, client);
                }
                Err(error) => {
                    tracing::warn!(project = %name, error = format!("{error:#}"), "no client for the project; not engaged");
                }
            },
            Engagement::Leave(why) => {
                if self.engaged.is_engaged(&name) {
                    self.engaged.disengage(&name);
                }
                if self.left.insert(name.clone(), why) != Some(why) {
                    tracing::info!(project = %name, why, "Milo project not engaged; its records and copies are left as they are");
                }
            }
        }
    }
}

impl SnapshotSink<Project> for MiloProjects {
    fn replace(&mut self, all: Vec<Project>, undecodable: Vec<InvalidObject>) {
        // A Project that cannot be decoded stays as it was (engaged or not): its state is unknown.
        let unknown: Vec<String> = undecodable.into_iter().filter_map(|bad| bad.metadata.name).collect();
        let listed: Vec<String> = all.iter().map(ResourceExt::name_any).collect();
        for name in self.engaged.names() {
            if !listed.contains(&name) && !unknown.contains(&name) {
                self.engaged.disengage(&name);
            }
        }
        self.left.retain(|name, _| listed.contains(name));
        for project in &all {
            self.apply(project);
        }
        self.engaged.discovered();
        self.discovery.listed();
    }

    fn applied(&mut self, project: Project) {
        self.apply(&project);
    }

    fn deleted(&mut self, project: Project) {
        let name = project.name_any();
        self.left.remove(&name);
        if self.engaged.is_engaged(&name) {
            self.engaged.disengage(&name);
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.discovery.failed(&error.to_string());
    }
}
