//! Prometheus metrics of the producer.

use std::time::Duration;

use edgegate::runtime::metrics::{ResultLabels, encode, registered};
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

pub struct Metrics {
    registry: Registry,
    projects: Family<StateLabels, Gauge>,
    writes: Family<ResultLabels, Counter>,
    addresses: Gauge,
    recompute: Histogram,
    leader: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgegate");
        let projects = registered(&mut registry, "producer_projects", "Engaged projects, by state: synced or unsynced");
        let writes: Family<ResultLabels, Counter> = registered(
            &mut registry,
            "producer_writes",
            "Record writes, by result: applied, unchanged, no_hub_namespace, oversized, conflict, error",
        );
        let addresses = registered(
            &mut registry,
            "producer_record_addresses",
            "Addresses in the last answer written or found unchanged",
        );
        let recompute = Histogram::new(exponential_buckets(0.000_01, 4.0, 10));
        registry.register(
            "producer_recompute_duration_seconds",
            "Time to derive one namespace's answer",
            recompute.clone(),
        );
        let leader = registered(&mut registry, "leader", "1 while this replica holds the Lease and may write");
        // Every result from the start, at 0: an alert on increase() sees the first one.
        for result in ["applied", "unchanged", "no_hub_namespace", "oversized", "conflict", "error"] {
            let _ = writes.get_or_create(&ResultLabels { result });
        }
        Metrics { registry, projects, writes, addresses, recompute, leader }
    }

    pub fn write(&self, result: &'static str) {
        self.writes.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn writes(&self, result: &'static str) -> u64 {
        self.writes.get_or_create(&ResultLabels { result }).get()
    }

    pub fn addresses(&self, count: usize) {
        self.addresses.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn recompute(&self, took: Duration) {
        self.recompute.observe(took.as_secs_f64());
    }

    pub fn set_state(&self, leader: bool, synced: usize, unsynced: usize) {
        self.leader.set(i64::from(leader));
        self.projects.get_or_create(&StateLabels { state: "synced" }).set(i64::try_from(synced).unwrap_or(0));
        self.projects.get_or_create(&StateLabels { state: "unsynced" }).set(i64::try_from(unsynced).unwrap_or(0));
    }

    pub fn encode(&self) -> String {
        encode(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
