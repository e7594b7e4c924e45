//! Prometheus metrics of the producer.

use std::time::Duration;

use edgegate::runtime::metrics::{QueueMetrics, ResultLabels, encode, registered};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

/// A gauge with no labels that has no sample until first set.
type Unlabelled = Family<Vec<(String, String)>, Gauge>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProjectLabels {
    pub project: String,
}

pub struct Metrics {
    registry: Registry,
    projects: Family<StateLabels, Gauge>,
    project_synced: Family<ProjectLabels, Gauge>,
    /// The projects `project_synced` has a series for, so a disengaged one's goes.
    known: parking_lot::Mutex<std::collections::BTreeSet<String>>,
    writes: Family<ResultLabels, Counter>,
    addresses: Histogram,
    recompute: Histogram,
    leader: Gauge,
    /// With --prune: hub namespaces whose due deletions wait, by why.
    doubts: Family<DoubtLabels, Gauge>,
    mismatched: Gauge,
    /// Sharing (`--shard`): buckets held here, and the longest any has had nobody who may write.
    shards: Option<(Gauge, Gauge)>,
    /// The work queue: distinct hub namespaces waiting, the oldest one's wait, retries so far.
    queue: QueueMetrics,
    /// Discovery of the projects, by source ([`crate::discovery::Discovery`]).
    discovery_synced: Family<SourceLabels, Gauge>,
    discovery_listed_at: Family<SourceLabels, Gauge>,
    discovery_failures: Family<SourceLabels, Counter>,
    /// With --milo-kubeconfig: that file, and when its credential expires as it reads now (a
    /// family without labels: no sample until an expiry is known, rather than a 0 that says
    /// "expired in 1970").
    milo: Option<(std::path::PathBuf, Unlabelled)>,
}

/// `{reason}` of [`edgegate::core::verdict::Doubt`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DoubtLabels {
    pub reason: &'static str,
}

impl Metrics {
    /// With the expiry of the hub kubeconfig's token, when it has one.
    pub fn with_hub_token(mut self, hub: &edgegate::runtime::flags::HubArgs) -> Self {
        edgegate::runtime::metrics::register_hub_token_expiry(&mut self.registry, hub);
        self
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgegate");
        edgegate::index::source::follow::register_undecodable(&mut registry);
        let projects = registered(&mut registry, "producer_projects", "Engaged projects, by state: synced or unsynced");
        let project_synced = registered(
            &mut registry,
            "producer_project_synced",
            "0 for each engaged project whose watches are not all listed whole (its records are left as they are); no series for the others",
        );
        let writes: Family<ResultLabels, Counter> = registered(
            &mut registry,
            "producer_writes",
            "Record writes, by result: applied, unchanged, no_hub_namespace, oversized, conflict, error",
        );
        let addresses = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        registry.register("producer_record_addresses", "Addresses in each record written", addresses.clone());
        let recompute = Histogram::new(exponential_buckets(0.000_01, 4.0, 10));
        registry.register(
            "producer_recompute_duration_seconds",
            "Time to derive one namespace's answer",
            recompute.clone(),
        );
        let leader = registered(&mut registry, "leader", "1 while this replica holds the Lease and may write");
        let doubts = registered(
            &mut registry,
            "producer_prune_held_namespaces",
            "With --prune: hub namespaces whose due copies are kept, by reason: unwatched (no engaged project owns the namespace), incomplete (its project not whole for --withdraw-after + --grace), unwritten (its record's last write failed), served (an address is served again), elsewhere (sharing: another replica's project)",
        );
        let mismatched = registered(
            &mut registry,
            "producer_label_mismatches",
            "Hub namespaces whose project label (meta.datumapis.com/upstream-cluster-name) names another project than the one whose record is written there",
        );
        let queue = QueueMetrics::register(&mut registry, "producer", "hub namespaces", "written");
        let discovery_synced = registered(
            &mut registry,
            "producer_discovery_synced",
            "1 while the projects are listed whole from their source (milo, directory or kubeconfig); 0 before the first list and after a failure, until the next",
        );
        let discovery_listed_at = registered(
            &mut registry,
            "producer_discovery_last_listed_timestamp_seconds",
            "When the projects were last listed whole from their source, a watch's re-list (Unix seconds; no sample before the first)",
        );
        let discovery_failures = registered(
            &mut registry,
            "producer_discovery_failures",
            "Failures to list or watch the projects' source (Milo's Projects, the directory)",
        );
        // Every result from the start, at 0: an alert on increase() sees the first one.
        for result in crate::outcome::Written::COUNTED.map(crate::outcome::Written::label) {
            let _ = writes.get_or_create(&ResultLabels { result });
        }
        Metrics {
            registry,
            projects,
            project_synced,
            known: Default::default(),
            writes,
            addresses,
            recompute,
            leader,
            doubts,
            mismatched,
            shards: None,
            queue,
            discovery_synced,
            discovery_listed_at,
            discovery_failures,
            milo: None,
        }
    }

    /// With the expiry of the credential in Milo's kubeconfig `path`, read at each scrape (a
    /// token file or a certificate rotated since start shows).
    pub fn with_milo_credential(mut self, path: Option<&std::path::Path>) -> Self {
        if let Some(path) = path {
            let expiry = registered(
                &mut self.registry,
                "producer_milo_credential_expiry_timestamp_seconds",
                "When the credential of Milo's kubeconfig (its token's exp, its client certificate's notAfter: the earlier) expires, in seconds since the Unix epoch; no sample when neither says",
            );
            self.milo = Some((path.to_owned(), expiry));
        }
        self
    }

    /// Milo's credential expiry as its files read now (kept as it was when they say nothing).
    pub fn set_milo_credential(&self) {
        if let Some((path, gauge)) = &self.milo
            && let Some(expiry) = edgegate::runtime::credential::expiry(path)
        {
            gauge.get_or_create(&Vec::new()).set(expiry);
        }
    }

    /// The series of discovery from `source`: synced, failures, and the family of when it last
    /// listed (its sample made at the first list: none before, rather than a 0 read as 1970).
    pub fn discovery(&self, source: &'static str) -> (Gauge, Counter, Family<SourceLabels, Gauge>) {
        let labels = SourceLabels { source };
        (
            self.discovery_synced.get_or_create(&labels).clone(),
            self.discovery_failures.get_or_create(&labels).clone(),
            self.discovery_listed_at.clone(),
        )
    }

    /// Sharing: the buckets' series too.
    pub fn sharded(mut self) -> Self {
        let held = registered(
            &mut self.registry,
            "producer_buckets_held",
            "Sharing: buckets this replica holds (over every replica they sum to 256 once settled)",
        );
        let vacancy = registered(
            &mut self.registry,
            "producer_bucket_vacancy_seconds",
            "Sharing: how long the bucket vacant longest, as this replica sees it, has had no replica that may write for it (0: none is)",
        );
        self.shards = Some((held, vacancy));
        self
    }

    /// The work queue's depth, oldest wait and retries so far.
    pub fn set_queue(&self, queue: &edgegate::runtime::queue::WorkQueue<String>) {
        self.queue.set(queue);
    }

    /// Sharing: buckets held, and the longest vacancy.
    pub fn set_shards(&self, held: usize, vacancy: Duration) {
        if let Some((h, v)) = &self.shards {
            h.set(i64::try_from(held).unwrap_or(i64::MAX));
            v.set(i64::try_from(vacancy.as_secs()).unwrap_or(i64::MAX));
        }
    }

    pub fn write(&self, result: &'static str) {
        self.writes.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn writes(&self, result: &'static str) -> u64 {
        self.writes.get_or_create(&ResultLabels { result }).get()
    }

    /// The size of a record written.
    pub fn addresses(&self, count: usize) {
        #[allow(clippy::cast_precision_loss)] // a record holds at most 8,192
        self.addresses.observe(count as f64);
    }

    pub fn recompute(&self, took: Duration) {
        self.recompute.observe(took.as_secs_f64());
    }

    /// Leadership, and each engaged project's state (`projects`: name and whether it is synced).
    pub fn set_state(&self, leader: bool, projects: &[(String, bool)]) {
        self.leader.set(i64::from(leader));
        let synced = projects.iter().filter(|(_, s)| *s).count();
        let unsynced = projects.len() - synced;
        self.projects.get_or_create(&StateLabels { state: "synced" }).set(i64::try_from(synced).unwrap_or(0));
        self.projects.get_or_create(&StateLabels { state: "unsynced" }).set(i64::try_from(unsynced).unwrap_or(0));
        // A series only for each engaged project not whole (0): at a thousand projects, a series
        // each would be a thousand; the healthy need none. Set in place, and removed only once
        // its project is whole or gone, so a scrape between the two never misses one.
        let mut known = self.known.lock();
        let now: std::collections::BTreeSet<String> =
            projects.iter().filter(|(_, synced)| !synced).map(|(p, _)| p.clone()).collect();
        for project in &now {
            self.project_synced.get_or_create(&ProjectLabels { project: project.clone() }).set(0);
        }
        for gone in known.difference(&now) {
            self.project_synced.remove(&ProjectLabels { project: gone.clone() });
        }
        *known = now;
    }

    /// Hub namespaces whose due copies are kept, by why (every reason, 0 when none).
    pub fn set_doubts(&self, doubts: &std::collections::HashMap<edgegate::core::verdict::Doubt, usize>) {
        for why in edgegate::core::verdict::Doubt::ALL {
            let count = doubts.get(&why).copied().unwrap_or_default();
            self.doubts
                .get_or_create(&DoubtLabels { reason: why.label() })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    pub fn set_mismatched(&self, count: usize) {
        self.mismatched.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn encode(&self) -> String {
        encode(&self.registry)
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
