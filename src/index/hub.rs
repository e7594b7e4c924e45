//! What the producer knows of the hub: which namespaces exist, and each namespace's record as
//! written (`spec.addresses` exactly, not normalised), so it writes only when its answer differs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::index::dirty::Dirty;
use kube::ResourceExt;
use kube::runtime::watcher;
use parking_lot::{Mutex, RwLock};

use super::Change;
use super::source::follow::SnapshotSink;
use crate::core::crd::EdgeReachability;
use crate::core::project::NamespaceMeta;
use crate::core::record::{Record, RecordState};
use crate::index::source::kubernetes::RecordObserver;
use crate::index::store::{RecordSource, StoreStats};

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

    /// The record as the decision reads it: its addresses normalised.
    pub fn normalised(&self) -> Record {
        Record::from_entries(self.addresses.iter().map(String::as_str))
    }

    /// The addresses kept for another writer that the record still names: one its writer (or an
    /// operator) removed from the record is kept no longer.
    pub fn still_kept(&self) -> Vec<String> {
        self.kept.iter().filter(|a| self.addresses.contains(a)).cloned().collect()
    }
}

/// Hub namespaces and the records in them, each with whether its watch is whole. Also the
/// record source of the producer's in-process pruner ([`RecordSource`]): one record watch and one
/// record cache per process.
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
    /// Shown every record the watch delivers (the in-process pruner's grace: a record that names
    /// a held copy even for a moment ends its run).
    observer: Mutex<Option<RecordObserver>>,
}

impl std::fmt::Debug for HubView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubView").field("record_name", &self.record_name).finish_non_exhaustive()
    }
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
            observer: Mutex::new(None),
        }
    }

    /// Show every record the watch delivers to `observer` from now on (`None`: one that cannot
    /// be decoded).
    pub fn observe_with(&self, observer: RecordObserver) {
        *self.observer.lock() = Some(observer);
    }

    fn observed<'a>(&self, records: impl IntoIterator<Item = (&'a str, Option<&'a HubRecord>)>) {
        if let Some(observe) = self.observer.lock().as_mut() {
            for (namespace, record) in records {
                observe(namespace, record.map(HubRecord::normalised).as_ref());
            }
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

impl RecordSource for HubView {
    fn lookup(&self, namespace: &str) -> RecordState {
        if !self.records_synced.load(Ordering::Acquire) {
            return RecordState::Unavailable(
                "the hub's records have not been listed since the watch began or failed".into(),
            );
        }
        // The mark, the record, the mark again: a record that turns undecodable meanwhile shows
        // in the second look, one that decodes again is in the view before its mark goes (the
        // watch's order), so the record from before it turned undecodable is never answered.
        let unreadable = || RecordState::Unavailable(format!("the record in {namespace} cannot be decoded"));
        if self.undecodable(namespace) {
            return unreadable();
        }
        let record = self.records.read().get(namespace).map(HubRecord::normalised);
        if self.undecodable(namespace) {
            return unreadable();
        }
        record.map_or(RecordState::Absent, |r| RecordState::Present(Arc::new(r)))
    }

    fn synced(&self) -> bool {
        self.records_synced.load(Ordering::Acquire)
    }

    fn stats(&self) -> StoreStats {
        let records = self.records.read();
        let normalised: Vec<Record> = records.values().map(HubRecord::normalised).collect();
        StoreStats {
            records: records.len() as u64,
            addresses: normalised.iter().map(|r| r.len() as u64).sum(),
            invalid_entries: normalised.iter().map(|r| r.invalid().len() as u64).sum(),
            ignored_records: 0,
        }
    }

    fn namespaces(&self) -> Vec<String> {
        self.records.read().keys().cloned().collect()
    }

    fn record_name(&self) -> &str {
        &self.record_name
    }

    fn noncanonical(&self) -> usize {
        self.records.read().values().map(|r| r.normalised().noncanonical()).sum()
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
        let unreadable: HashSet<String> = undecodable
            .iter()
            .filter(|bad| bad.metadata.name.as_deref() == Some(self.view.record_name.as_str()))
            .filter_map(|bad| bad.metadata.namespace.clone())
            .collect();
        let records: HashMap<String, HubRecord> =
            list.iter().filter(|r| wanted(r)).map(|r| (r.namespace().unwrap_or_default(), HubRecord::of(r))).collect();
        // A record that cannot be decoded is shown as unknown: what it names then is not known.
        let shown = records.iter().map(|(ns, r)| (ns.as_str(), Some(r)));
        self.view.observed(shown.chain(unreadable.iter().map(|ns| (ns.as_str(), None))));
        // New marks before the records, old ones gone only after: a lookup in between sees a
        // namespace changing either way as unreadable.
        self.view.undecodable.write().extend(unreadable.iter().cloned());
        *self.view.records.write() = records;
        *self.view.undecodable.write() = unreadable;
        self.view.records_synced.store(true, Ordering::Release);
        self.changes.mark(Change::All);
    }
    fn applied(&mut self, record: EdgeReachability) {
        if record.name_any() == self.view.record_name {
            let ns = record.namespace().unwrap_or_default();
            let seen = HubRecord::of(&record);
            self.view.observed([(ns.as_str(), Some(&seen))]);
            // The record in before the mark goes: a lookup between the two sees it unreadable,
            // never the record from before it turned undecodable.
            let previous = self.view.records.write().insert(ns.clone(), seen.clone());
            self.view.undecodable.write().remove(&ns);
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
            self.view.observed([(ns.as_str(), None)]);
        }
        self.changes.mark(Change::Namespace(ns));
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.view.records_synced.store(false, Ordering::Release);
        self.view.unsyncs.fetch_add(1, Ordering::AcqRel);
        tracing::warn!(%error, "hub record watch failed; no writes until listed again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(namespace: &str, addresses: &[&str]) -> EdgeReachability {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachability",
            "metadata": {"name": "default", "namespace": namespace, "resourceVersion": "7"},
            "spec": {"addresses": addresses},
        }))
        .expect("record")
    }

    /// The producer's view is its in-process pruner's record source: unavailable until listed,
    /// normalised as the decision reads records, and every record delivered shown to the grace.
    #[test]
    fn the_view_is_a_record_source_and_shows_each_record_delivered() {
        let view = Arc::new(HubView::new("default"));
        type Seen = Vec<(String, Option<usize>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let log = Arc::clone(&seen);
        view.observe_with(Box::new(move |ns, r| log.lock().push((ns.to_owned(), r.map(Record::len)))));
        assert!(matches!(view.lookup("ns-a"), RecordState::Unavailable(_)), "not listed yet");
        let mut writer = HubWriter::new(Arc::clone(&view), Dirty::default());
        SnapshotSink::<EdgeReachability>::replace(&mut writer, vec![record("ns-a", &["fd00:0::1"])], Vec::new());
        let RecordState::Present(listed) = view.lookup("ns-a") else { panic!("listed: present") };
        assert!(listed.names("fd00::1"), "normalised");
        assert!(matches!(view.lookup("ns-b"), RecordState::Absent));
        SnapshotSink::<EdgeReachability>::applied(&mut writer, record("ns-b", &["10.0.0.1", "10.0.0.2"]));
        assert_eq!(*seen.lock(), [("ns-a".to_owned(), Some(1)), ("ns-b".to_owned(), Some(2))]);
        assert_eq!((view.namespaces().len(), RecordSource::record_name(view.as_ref())), (2, "default"));
        SnapshotSink::<EdgeReachability>::failed(&mut writer, &watcher::Error::NoResourceVersion);
        assert!(matches!(view.lookup("ns-a"), RecordState::Unavailable(_)), "a failed watch: unknown");
    }
}
