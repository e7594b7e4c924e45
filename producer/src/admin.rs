//! The producer's readiness and metrics, with its pruner's when it prunes.

use std::sync::Arc;

use edgegate::index::hub::HubView;
use edgegate::runtime::admin::Probes;
use edgegate::runtime::lease::Leadership;
use edgegate::runtime::queue::WorkQueue;

use crate::discovery::Discovery;
use crate::engaged::Engaged;
use crate::evidence::Evidence;
use crate::metrics::Metrics;

pub struct Admin {
    pub view: Arc<HubView>,
    pub discovery: Discovery,
    pub engaged: Engaged,
    pub metrics: Arc<Metrics>,
    pub leader: Leadership,
    pub owner: Option<edgegate::runtime::shard::Ownership>,
    pub queue: WorkQueue<String>,
    /// With --prune: the pruner's readiness and metrics, and why its deletions wait.
    pub pruner: Option<edgegate::runtime::prune::parts::Admin>,
    pub evidence: Option<Arc<Evidence>>,
}

impl Probes for Admin {
    /// Ready once the hub side works and the projects have been discovered once. A project that
    /// cannot be listed does not hold the replica unready (that would stall every rollout for
    /// one bad kubeconfig): its records are left as they are, and it shows in
    /// `edgegate_producer_project_synced{project}` and its alert.
    fn ready(&self) -> Result<(), String> {
        if !self.view.synced() {
            return Err("hub namespaces and records not listed yet".into());
        }
        self.discovery.ready()?;
        self.pruner.as_ref().map_or(Ok(()), Probes::ready)
    }

    fn metrics(&self) -> String {
        let projects = self.engaged.projects.read();
        let states: Vec<(String, bool)> = projects.iter().map(|(n, p)| (n.clone(), p.synced())).collect();
        drop(projects);
        self.metrics.set_state(self.leader.is_leader(), &states);
        if let Some(owner) = &self.owner {
            self.metrics.set_shards(owner.held().len(), owner.longest_vacancy());
        }
        self.metrics.set_queue(&self.queue);
        self.metrics.set_milo_credential();
        if let Some(evidence) = &self.evidence {
            self.metrics.set_doubts(&evidence.doubts());
        }
        match &self.pruner {
            Some(pruner) => {
                pruner.refresh();
                edgegate::runtime::metrics::encode_all(&[self.metrics.registry(), pruner.registry()])
            }
            None => self.metrics.encode(),
        }
    }
}
