//! What the producer knows of the hub: which namespaces exist, and each namespace's record as
//! written (`spec.addresses` exactly, not normalised), so it writes only when its answer differs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::index::dirty::Dirty;
use kube::ResourceExt;
use kube::runtime::watcher;
use parking_lot::RwLock;

use super::Change;
use super::source::follow::SnapshotSink;
use crate::core::crd::EdgeReachability;
use crate::core::project::NamespaceMeta;

/// The annotation on a record naming the addresses another writer put there that the producer
/// keeps writing beside its answer (the list is atomic: whoever writes it writes all of it). Set
/// when the producer puts served addresses back over another field manager without
/// `--force-ownership`: it cannot know those addresses are not served, so they stay until that
/// writer or an operator removes them from the record.
pub const KEPT_ANNOTATION: &str = "edgegate.datumapis.com/kept-addresses";

/// One namespace's record as last seen (or written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HubRecord {
    /// `spec.addresses` as written.
    pub addresses: Vec<String>,
    /// Its resourceVersion: a write based on it is refused (409) once the record has changed
    /// since.
    pub version: Option<String>,
    /// What [`KEPT_ANNOTATION`] names.
    pub kept: Vec<String>,
}

impl HubRecord {
    fn of(record: &EdgeReachability) -> Self {
        let kept = record.annotations().get(KEPT_ANNOTATION).map(String::as_str).unwrap_or_default();
        HubRecord {
            addresses: record.entries().to_vec(),
            version: record.resource_version(),
            kept: kept.split(',').map(str::trim).filter(|a| !a.is_empty()).map(str::to_owned).collect(),
        }
    }

    /// The addresses kept for another writer that the record still names: one its writer (or an
    /// operator) removed from the record is kept no longer.
    pub fn still_kept(&self) -> Vec<String> {
        self.kept.iter().filter(|a| self.addresses.contains(a)).cloned().collect()
    }
}

/// Hub namespaces and the records in them, each with whether its watch is whole.
#[derive(Debug)]
pub struct HubView {
    record_name: String,
    /// Hub namespace → the project it says it belongs to (its
    /// [`UPSTREAM_CLUSTER_LABEL`](crate::core::project::UPSTREAM_CLUSTER_LABEL), if labelled).
    namespaces: RwLock<HashMap<String, Option<String>>>,
    /// Hub namespace → its record. Addresses and resourceVersion under one lock: the watch and
    /// the writers move them together, or the view could hold one writer's addresses under
    /// another's version.
    records: RwLock<HashMap<String, HubRecord>>,
    /// Hub namespaces whose record cannot be decoded: what it names is unknown, so the producer
    /// writes nothing there (the webhook and the pruner leave it alone too) until it decodes or
    /// is deleted.
    undecodable: RwLock<HashSet<String>>,
    namespaces_synced: AtomicBool,
    records_synced: AtomicBool,
    /// How many times a watch has failed: a view that was whole, then was not, is another view.
    unsyncs: AtomicU64,
}

impl HubView {
    pub fn new(record_name: impl Into<String>) -> Self {
        HubView {
            record_name: record_name.into(),
            namespaces: RwLock::default(),
            records: RwLock::default(),
            undecodable: RwLock::default(),
            namespaces_synced: AtomicBool::new(false),
            records_synced: AtomicBool::new(false),
            unsyncs: AtomicU64::new(0),
        }
    }

    pub fn record_name(&self) -> &str {
        &self.record_name
    }

    pub fn synced(&self) -> bool {
        self.namespaces_synced.load(Ordering::Acquire) && self.records_synced.load(Ordering::Acquire)
    }

    /// How many times a watch has failed so far.
    pub fn unsyncs(&self) -> u64 {
        self.unsyncs.load(Ordering::Acquire)
    }

    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.read().contains_key(namespace)
    }

    /// The value of the hub namespace's project label (`cluster-<project>`): `None` while the
    /// namespace is not seen or carries no such label.
    pub fn upstream_cluster(&self, namespace: &str) -> Option<String> {
        self.namespaces.read().get(namespace).cloned().flatten()
    }

    /// Is the namespace's record on the hub one that cannot be decoded?
    pub fn undecodable(&self, namespace: &str) -> bool {
        self.undecodable.read().contains(namespace)
    }

    /// The record's resourceVersion as seen now (`None`: no record), without copying its
    /// addresses.
    pub fn version(&self, namespace: &str) -> Option<String> {
        self.records.read().get(namespace)?.version.clone()
    }

    /// The namespace's record as seen now (`None`: no record): its addresses, version and what
    /// it keeps, read together.
    pub fn record(&self, namespace: &str) -> Option<HubRecord> {
        self.records.read().get(namespace).cloned()
    }

    /// What a write based on the record at version `based_on` (`None`: no record) made, so the
    /// next recompute compares against it before the watch says so. Only while the view still
    /// holds the version the write was based on: the watch may have brought a newer record (ours,
    /// or another writer's after it) meanwhile, and the view never moves back.
    pub fn wrote(&self, namespace: &str, based_on: Option<&str>, written: HubRecord) {
        let mut records = self.records.write();
        let current = match (records.get(namespace), based_on) {
            (None, None) => true,
            (Some(seen), Some(based_on)) => seen.version.as_deref() == Some(based_on),
            _ => false,
        };
        if current {
            records.insert(namespace.to_owned(), written);
        } else {
            tracing::debug!(namespace, "the watch has shown a newer record than the write's; the view keeps it");
        }
    }
}

fn upstream_cluster(ns: &NamespaceMeta) -> Option<String> {
    ns.labels().get(crate::core::project::UPSTREAM_CLUSTER_LABEL).cloned()
}

/// Feeds a [`HubView`] from the hub's Namespace and EdgeReachability watches. A namespace that
/// appears is sent on `changes`, so its record is written at once.
pub struct HubWriter {
    view: Arc<HubView>,
    changes: Dirty<Change>,
}

impl HubWriter {
    pub fn new(view: Arc<HubView>, changes: Dirty<Change>) -> Self {
        HubWriter { view, changes }
    }
}

impl SnapshotSink<NamespaceMeta> for HubWriter {
    fn replace(&mut self, list: Vec<NamespaceMeta>, _undecodable: Vec<kube::core::error_boundary::InvalidObject>) {
        *self.view.namespaces.write() = list.iter().map(|ns| (ns.name_any(), upstream_cluster(ns))).collect();
        self.view.namespaces_synced.store(true, Ordering::Release);
        self.changes.mark(Change::All);
    }
    fn applied(&mut self, ns: NamespaceMeta) {
        let name = ns.name_any();
        if self.view.namespaces.write().insert(name.clone(), upstream_cluster(&ns)).is_none() {
            self.changes.mark(Change::Namespace(name));
        }
    }
    fn deleted(&mut self, ns: NamespaceMeta) {
        self.view.namespaces.write().remove(&ns.name_any());
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.view.namespaces_synced.store(false, Ordering::Release);
        self.view.unsyncs.fetch_add(1, Ordering::AcqRel);
        tracing::warn!(%error, "hub namespace watch failed; no writes until listed again");
    }
}

impl SnapshotSink<EdgeReachability> for HubWriter {
    fn replace(&mut self, list: Vec<EdgeReachability>, undecodable: Vec<kube::core::error_boundary::InvalidObject>) {
        let wanted = |r: &EdgeReachability| r.name_any() == self.view.record_name;
        *self.view.undecodable.write() = undecodable
            .iter()
            .filter(|bad| bad.metadata.name.as_deref() == Some(self.view.record_name.as_str()))
            .filter_map(|bad| bad.metadata.namespace.clone())
            .collect();
        *self.view.records.write() =
            list.iter().filter(|r| wanted(r)).map(|r| (r.namespace().unwrap_or_default(), HubRecord::of(r))).collect();
        self.view.records_synced.store(true, Ordering::Release);
        self.changes.mark(Change::All);
    }
    fn applied(&mut self, record: EdgeReachability) {
        if record.name_any() == self.view.record_name {
            let ns = record.namespace().unwrap_or_default();
            self.view.undecodable.write().remove(&ns);
            let seen = HubRecord::of(&record);
            let previous = self.view.records.write().insert(ns.clone(), seen.clone());
            // Addresses changed by someone else (the producer's own writes are in the view
            // already) are put right at once: the pruner withdraws what a record stops naming
            // after its grace, well before a resync would come round.
            if previous.is_none_or(|p| p.addresses != seen.addresses || p.kept != seen.kept) {
                self.changes.mark(Change::Namespace(ns));
            }
        }
    }
    fn deleted(&mut self, record: EdgeReachability) {
        if record.name_any() == self.view.record_name {
            let ns = record.namespace().unwrap_or_default();
            self.view.records.write().remove(&ns);
            self.view.undecodable.write().remove(&ns);
            // A record deleted by hand is written again at once (and on every resync).
            self.changes.mark(Change::Namespace(ns));
        }
    }
    fn undecodable(&mut self, bad: &kube::core::error_boundary::InvalidObject, gone: bool) {
        if bad.metadata.name.as_deref() != Some(self.view.record_name.as_str()) {
            return;
        }
        let ns = bad.metadata.namespace.clone().unwrap_or_default();
        if gone {
            self.view.undecodable.write().remove(&ns);
            self.view.records.write().remove(&ns);
        } else {
            self.view.undecodable.write().insert(ns.clone());
        }
        self.changes.mark(Change::Namespace(ns));
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.view.records_synced.store(false, Ordering::Release);
        self.view.unsyncs.fetch_add(1, Ordering::AcqRel);
        tracing::warn!(%error, "hub record watch failed; no writes until listed again");
    }
}
