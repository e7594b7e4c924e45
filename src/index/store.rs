//! The in-memory index of records that every review reads: zero API calls per lookup.
//!
//! Sources (files, a Kubernetes watch) write whole snapshots or single records into it; the webhook
//! and the pruner only read. Until a source says it has synced, every lookup is
//! [`RecordState::Unavailable`]: not knowing is not the same as there being no record.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use crate::core::record::DEFAULT_RECORD_NAME;
use crate::core::record::{Record, RecordState};
use parking_lot::{Mutex, RwLock};

/// Read side of a record source: what the webhook and the pruner consult.
pub trait RecordSource: Send + Sync {
    /// The record of `namespace`, or why it cannot be known now.
    fn lookup(&self, namespace: &str) -> RecordState;
    /// Has the source loaded its first complete view?
    fn synced(&self) -> bool;
    /// Counts for metrics.
    fn stats(&self) -> StoreStats;
    /// Namespaces that have a record, for a full pass.
    fn namespaces(&self) -> Vec<String>;
    /// The only record name the source holds.
    fn record_name(&self) -> &str;
    /// Record entries, over every record, spelled other than canonically: what the
    /// ValidatingAdmissionPolicy mode's exact-string comparison reads differently from the
    /// webhook.
    fn noncanonical(&self) -> usize;
}

/// Counts exposed as metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Records named `default`, one per namespace.
    pub records: u64,
    /// Distinct valid addresses over all those records.
    pub addresses: u64,
    /// Entries skipped because they are no address.
    pub invalid_entries: u64,
    /// Records ignored because they are not named `default`, as last seen.
    pub ignored_records: u64,
}

/// Namespace → record, plus whether the source behind it has synced.
#[derive(Debug)]
pub struct RecordStore {
    record_name: String,
    records: RwLock<HashMap<String, Arc<Record>>>,
    synced: AtomicBool,
    ignored: AtomicU64,
    /// Since when the source behind a synced view has been broken (a watch that failed and has
    /// not been listed again), and for how long such a view may still answer.
    stale_since: Mutex<Option<Instant>>,
    max_staleness: Option<Duration>,
    /// Namespaces whose record could not be decoded, with why: unreadable, nothing changes there.
    undecodable: RwLock<HashMap<String, String>>,
}

impl RecordStore {
    pub fn new(record_name: impl Into<String>) -> Self {
        RecordStore {
            record_name: record_name.into(),
            records: RwLock::new(HashMap::new()),
            synced: AtomicBool::new(false),
            ignored: AtomicU64::new(0),
            stale_since: Mutex::new(None),
            max_staleness: None,
            undecodable: RwLock::new(HashMap::new()),
        }
    }

    /// Let a view whose source broke keep answering for at most `bound`; after that lookups
    /// answer `Unavailable` and the store reports itself unsynced, until a new complete view.
    pub fn with_max_staleness(mut self, bound: Duration) -> Self {
        self.max_staleness = Some(bound);
        self
    }

    /// The source broke; the view is stale from now until the next [`replace_all`](Self::replace_all).
    pub fn mark_stale(&self) {
        self.stale_since.lock().get_or_insert_with(crate::index::clock::now);
    }

    /// How long the view has been stale beyond its bound, if it has.
    fn over_staleness(&self) -> Option<Duration> {
        let since = (*self.stale_since.lock())?;
        let bound = self.max_staleness?;
        let stale = crate::index::clock::since(since);
        (stale > bound).then_some(stale)
    }

    /// Replace everything with a complete view and mark the store synced.
    pub fn replace_all(&self, records: HashMap<String, Arc<Record>>, ignored: u64) {
        *self.records.write() = records;
        *self.stale_since.lock() = None;
        self.ignored.store(ignored, Ordering::Relaxed);
        self.synced.store(true, Ordering::Release);
    }

    /// The namespaces whose record cannot be decoded (namespace → why), as a (re-)list found
    /// them. Set before the list's records are swapped in: the namespace is unreadable no later
    /// than its record is gone from the view.
    pub fn replace_undecodable(&self, undecodable: HashMap<String, String>) {
        *self.undecodable.write() = undecodable;
    }

    /// The namespace's record cannot be decoded now (`Some(why)`), or can again (`None`).
    pub fn set_undecodable(&self, namespace: &str, why: Option<String>) {
        let mut undecodable = self.undecodable.write();
        match why {
            Some(why) => undecodable.insert(namespace.to_owned(), why),
            None => undecodable.remove(namespace),
        };
    }

    /// Insert or replace one namespace's record.
    pub fn upsert(&self, namespace: &str, record: Record) {
        self.records.write().insert(namespace.to_owned(), Arc::new(record));
    }

    /// The namespace's record was deleted: back to "no record", which withdraws nothing.
    pub fn remove(&self, namespace: &str) {
        self.records.write().remove(namespace);
    }

    /// Mark the store unsynced (its source lost its view), so lookups answer `Unavailable`.
    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    /// Note a record that is ignored because of its name.
    pub fn set_ignored(&self, ignored: u64) {
        self.ignored.store(ignored, Ordering::Relaxed);
    }
}

impl RecordSource for RecordStore {
    fn lookup(&self, namespace: &str) -> RecordState {
        if !self.synced.load(Ordering::Acquire) {
            return RecordState::Unavailable("the record source has not synced yet".to_owned());
        }
        if let Some(stale) = self.over_staleness() {
            return RecordState::Unavailable(format!(
                "the record watch has been broken for {}s, longer than --max-staleness",
                stale.as_secs()
            ));
        }
        // Records before the undecodable mark: a relist sets the mark first, so a lookup racing
        // it sees the namespace unreadable rather than without a record.
        let record = self.records.read().get(namespace).map(Arc::clone);
        if let Some(why) = self.undecodable.read().get(namespace) {
            return RecordState::Unavailable(format!("the record in {namespace} cannot be decoded ({why})"));
        }
        match record {
            Some(record) => RecordState::Present(record),
            None => RecordState::Absent,
        }
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) && self.over_staleness().is_none()
    }

    fn namespaces(&self) -> Vec<String> {
        self.records.read().keys().cloned().collect()
    }

    fn record_name(&self) -> &str {
        &self.record_name
    }

    fn noncanonical(&self) -> usize {
        self.records.read().values().map(|r| r.noncanonical()).sum()
    }

    fn stats(&self) -> StoreStats {
        let records = self.records.read();
        StoreStats {
            records: records.len() as u64,
            addresses: records.values().map(|r| r.len() as u64).sum(),
            invalid_entries: records.values().map(|r| r.invalid().len() as u64).sum(),
            ignored_records: self.ignored.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides of `--max-staleness`: within it a broken source's last view answers; beyond it,
    /// nothing does, until the source lists again.
    #[test]
    fn a_stale_view_answers_only_within_its_bound() {
        let store = RecordStore::new(DEFAULT_RECORD_NAME).with_max_staleness(Duration::from_millis(100));
        store.replace_all(HashMap::from([("ns".to_owned(), Arc::new(Record::from_entries(["fd00::1"])))]), 0);
        store.mark_stale();
        assert!(matches!(store.lookup("ns"), RecordState::Present(_)), "within the bound: last synced view");
        assert!(store.synced());
        std::thread::sleep(Duration::from_millis(150));
        assert!(matches!(store.lookup("ns"), RecordState::Unavailable(m) if m.contains("--max-staleness")));
        assert!(matches!(store.lookup("elsewhere"), RecordState::Unavailable(_)), "no record is not claimed either");
        assert!(!store.synced(), "not ready beyond the bound");
        store.replace_all(HashMap::new(), 0);
        assert!(store.synced() && matches!(store.lookup("ns"), RecordState::Absent), "listed again: fresh");
    }

    #[test]
    fn unsynced_store_is_unavailable_not_absent() {
        let store = RecordStore::new(DEFAULT_RECORD_NAME);
        assert!(matches!(store.lookup("ns"), RecordState::Unavailable(_)));
        store.replace_all(HashMap::new(), 0);
        assert!(matches!(store.lookup("ns"), RecordState::Absent));
        store.upsert("ns", Record::from_entries(["fd00::1"]));
        assert!(matches!(store.lookup("ns"), RecordState::Present(r) if r.len() == 1));
        store.upsert("other", Record::from_entries(["FD00::1", "fd00:0::2", "fd00::3"]));
        assert_eq!(store.noncanonical(), 2);
        store.remove("ns");
        assert!(matches!(store.lookup("ns"), RecordState::Absent));
        store.set_synced(false);
        assert!(matches!(store.lookup("ns"), RecordState::Unavailable(_)));
    }
}
