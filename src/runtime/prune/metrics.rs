//! Prometheus metrics of the pruner.

use std::time::Duration;

use crate::runtime::metrics::{QueueMetrics, ResultLabels, registered};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `result` of copies a pass found unnamed but already being deleted: left alone, counted.
pub const TERMINATING: &str = "terminating";

pub struct Metrics {
    registry: Registry,
    deletions: Family<ResultLabels, Counter>,
    pass_duration: Histogram,
    leader: Gauge,
    synced: Gauge,
    copies: Gauge,
    waiting_for_producer: Gauge,
    /// `edgegate-pruner`'s work queue (the producer's is its own metrics').
    queue: Option<QueueMetrics>,
    /// Registered only with `--exact-spelling`.
    noncanonical: Option<Family<SpellingLabels, Gauge>>,
}

/// `{in="records"|"copies"}`: where addresses are spelled other than canonically.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpellingLabels {
    pub r#in: &'static str,
}

impl Metrics {
    /// With the expiry of the hub kubeconfig's token, when it has one.
    pub fn with_hub_token(mut self, hub: &crate::runtime::flags::HubArgs) -> Self {
        crate::runtime::metrics::register_hub_token_expiry(&mut self.registry, hub);
        self
    }

    /// `edgegate-pruner`'s: every metric of the process.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgegate");
        crate::index::source::follow::register_undecodable(&mut registry);
        let leader = registered(&mut registry, "leader", "1 while this replica holds the Lease and may delete");
        let queue = QueueMetrics::register(&mut registry, "prune", "namespaces", "passed over");
        Metrics { queue: Some(queue), ..Self::families(registry, leader) }
    }

    /// Inside `edgegate-producer --prune`: only the pruner's own families, beside the producer's
    /// (which has the process-wide ones: one Lease, one `edgegate_leader`, the one work queue's).
    pub fn embedded() -> Self {
        Self::families(Registry::with_prefix("edgegate"), Gauge::default())
    }

    fn families(mut registry: Registry, leader: Gauge) -> Self {
        let deletions: Family<ResultLabels, Counter> = registered(
            &mut registry,
            "prune_deletions",
            "Copies deleted, by result: deleted, gone (404), changed (409), dry_run, skipped, error, terminating (unnamed but already being deleted: left alone, counted each pass)",
        );
        let pass_duration = Histogram::new(exponential_buckets(0.000_1, 4.0, 10));
        registry.register("prune_pass_duration_seconds", "Time to plan and carry out one pass", pass_duration.clone());
        let synced =
            registered(&mut registry, "prune_caches_synced", "1 while both the record and the copy caches are whole");
        let copies = registered(&mut registry, "prune_copies", "Copies in the cache");
        let waiting_for_producer = registered(
            &mut registry,
            "prune_waiting_for_producer_seconds",
            "How long due deletions have waited for evidence that their record is current (the producer's own view of their project, with edgegate-producer --prune); 0 when none waits",
        );
        // Every result from the start, at 0: an alert on rate() or increase() sees the first one.
        let results = crate::runtime::prune::pruner::Outcome::ALL.map(crate::runtime::prune::pruner::Outcome::label);
        for result in results.into_iter().chain([TERMINATING]) {
            let _ = deletions.get_or_create(&ResultLabels { result });
        }
        Metrics {
            registry,
            deletions,
            pass_duration,
            leader,
            synced,
            copies,
            waiting_for_producer,
            noncanonical: None,
            queue: None,
        }
    }

    /// With `edgegate_prune_noncanonical_addresses{in}`, for `--exact-spelling`. It is not
    /// exported until [`set_noncanonical`](Self::set_noncanonical): before the caches are whole,
    /// a count would be a guess.
    pub fn with_spelling(mut self) -> Self {
        self.noncanonical = Some(registered(
            &mut self.registry,
            "prune_noncanonical_addresses",
            "Valid addresses not spelled canonically, in record entries (in=records) and copy endpoints (in=copies): the ValidatingAdmissionPolicy mode compares them as exact strings",
        ));
        self
    }

    pub fn set_noncanonical(&self, records: usize, copies: usize) {
        let Some(family) = &self.noncanonical else { return };
        for (r#in, count) in [("records", records), ("copies", copies)] {
            family.get_or_create(&SpellingLabels { r#in }).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    pub fn deletion(&self, result: &'static str) {
        self.deletions_by(result, 1);
    }

    pub fn deletions_by(&self, result: &'static str, count: u64) {
        self.deletions.get_or_create(&ResultLabels { result }).inc_by(count);
    }

    pub fn deletions(&self, result: &'static str) -> u64 {
        self.deletions.get_or_create(&ResultLabels { result }).get()
    }

    pub fn pass(&self, took: Duration) {
        self.pass_duration.observe(took.as_secs_f64());
    }

    /// `edgegate-pruner`'s work queue, before a scrape.
    pub fn set_queue(&self, queue: &crate::runtime::queue::WorkQueue<String>) {
        if let Some(metrics) = &self.queue {
            metrics.set(queue);
        }
    }

    pub fn set_waiting_for_producer(&self, waited: Duration) {
        self.waiting_for_producer.set(i64::try_from(waited.as_secs()).unwrap_or(i64::MAX));
    }

    pub fn set_state(&self, leader: bool, synced: bool, copies: usize) {
        self.leader.set(i64::from(leader));
        self.synced.set(i64::from(synced));
        self.copies.set(i64::try_from(copies).unwrap_or(i64::MAX));
    }

    pub fn encode(&self) -> String {
        crate::runtime::metrics::encode(&self.registry)
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
