//! The pruner's index of published copies, by namespace, fed by a watch of copies only (the copy
//! selector is the watch's label selector). A pass over one namespace costs the copies in that
//! namespace, whatever the hub holds elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::runtime::watcher;
use parking_lot::RwLock;

use crate::core::address::is_noncanonical;
use crate::core::slice::Slice;
use crate::index::Change;
use crate::index::source::follow::WatchSink;

type ByNamespace = HashMap<String, BTreeMap<String, Arc<Slice>>>;

/// Copies by namespace and name, and whether the watch behind them is whole.
#[derive(Debug, Default)]
pub struct CopyIndex {
    copies: RwLock<ByNamespace>,
    synced: AtomicBool,
}

impl CopyIndex {
    /// The copies in one namespace, by name.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<Slice>> {
        self.copies.read().get(namespace).map(|c| c.values().cloned().collect()).unwrap_or_default()
    }

    /// The namespaces with copies.
    pub fn namespaces(&self) -> Vec<String> {
        self.copies.read().keys().cloned().collect()
    }

    /// One copy as last seen.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Slice>> {
        self.copies.read().get(namespace).and_then(|c| c.get(name)).cloned()
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.copies.read().values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copy endpoint addresses, over every copy, spelled other than canonically: what the
    /// ValidatingAdmissionPolicy mode's exact-string comparison reads differently from the
    /// webhook. A scan of every address, for a periodic check, not for every pass; the lock is
    /// held only to take the copies, so the watch is not held up by the scan.
    pub fn noncanonical(&self) -> usize {
        let copies: Vec<Arc<Slice>> = self.copies.read().values().flat_map(BTreeMap::values).cloned().collect();
        copies.iter().flat_map(|copy| copy.addresses()).filter(|a| is_noncanonical(a)).count()
    }

    /// Drop one copy before the watch says it is gone (the pruner, once its DELETE succeeded), if
    /// the index still holds it at `resource_version`: a newer version (the copy turned
    /// terminating, held by a finalizer) came from the watch and stays.
    pub fn forget(&self, namespace: &str, name: &str, resource_version: Option<&str>) {
        let mut map = self.copies.write();
        let held = map.get(namespace).and_then(|c| c.get(name));
        if held.is_some_and(|c| c.metadata.resource_version.as_deref() == resource_version) {
            remove(&mut map, namespace, name);
        }
    }

    fn insert(map: &mut ByNamespace, slice: Slice) {
        map.entry(slice.namespace().to_owned()).or_default().insert(slice.name().to_owned(), Arc::new(slice));
    }
}

fn remove(map: &mut ByNamespace, namespace: &str, name: &str) {
    if let Some(copies) = map.get_mut(namespace) {
        copies.remove(name);
        if copies.is_empty() {
            map.remove(namespace);
        }
    }
}

/// Applies a watch of copies to a [`CopyIndex`]. Any watch error makes the index unsynced until
/// it is listed again: the pruner never deletes on a view of copies that may be stale.
#[derive(Debug)]
pub struct CopyWriter {
    index: Arc<CopyIndex>,
    relisting: Option<ByNamespace>,
    /// Told of each copy created or changed (its namespace), and when a (re-)list completes (all),
    /// so a pass follows at once: a copy that slipped past the webhook (warn mode, failurePolicy
    /// Ignore, a bypass) is judged now, not at the next resync.
    changes: Option<crate::index::dirty::Dirty<Change>>,
}

impl CopyWriter {
    pub fn new(index: Arc<CopyIndex>) -> Self {
        CopyWriter { index, relisting: None, changes: None }
    }

    /// Mark [`Change::Namespace`] for every copy created or changed, and [`Change::All`] after
    /// every complete (re-)list.
    pub fn with_changes(mut self, changes: crate::index::dirty::Dirty<Change>) -> Self {
        self.changes = Some(changes);
        self
    }
}

impl WatchSink<Slice> for CopyWriter {
    fn relist_started(&mut self) {
        self.relisting = Some(HashMap::new());
    }

    fn listed(&mut self, slice: Slice) {
        if let Some(map) = self.relisting.as_mut() {
            CopyIndex::insert(map, slice);
        }
    }

    fn relist_done(&mut self) {
        if let Some(map) = self.relisting.take() {
            *self.index.copies.write() = map;
            self.index.synced.store(true, Ordering::Release);
            tracing::info!(copies = self.index.len(), "copies listed from the hub");
            if let Some(changes) = &self.changes {
                changes.mark(Change::All);
            }
        }
    }

    fn applied(&mut self, slice: Slice) {
        let namespace = slice.namespace().to_owned();
        CopyIndex::insert(&mut self.index.copies.write(), slice);
        if let Some(changes) = &self.changes {
            changes.mark(Change::Namespace(namespace));
        }
    }

    fn deleted(&mut self, slice: Slice) {
        remove(&mut self.index.copies.write(), slice.namespace(), slice.name());
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.relisting = None;
        self.index.synced.store(false, Ordering::Release);
        tracing::warn!(%error, "copy watch failed; no deletions until copies are listed again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::copy;

    #[test]
    fn indexes_by_namespace_and_unsyncs_on_error() {
        let index = Arc::new(CopyIndex::default());
        let mut writer = CopyWriter::new(Arc::clone(&index));
        writer.relist_started();
        writer.listed(copy("a", "s1", &["fd00::1"]));
        writer.listed(copy("b", "s2", &["fd00::2"]));
        assert!(!index.synced(), "not synced mid-list");
        writer.relist_done();
        assert!(index.synced());
        writer.applied(copy("a", "s3", &["fd00::3"]));
        writer.deleted(copy("b", "s2", &[]));
        assert_eq!(index.in_namespace("a").len(), 2);
        index.forget("a", "s3", Some("newer"));
        assert_eq!(index.in_namespace("a").len(), 2, "a newer version stays");
        let version = index.get("a", "s3").and_then(|c| c.metadata.resource_version.clone());
        index.forget("a", "s3", version.as_deref());
        assert_eq!(index.in_namespace("a").len(), 1);
        assert!(index.in_namespace("b").is_empty());
        writer.applied(copy("b", "s4", &["FD00::4", "::ffff:10.0.3.7", "fd00::5", "no address"]));
        assert_eq!(index.noncanonical(), 2);
        writer.failed(&watcher::Error::NoResourceVersion);
        assert!(!index.synced());
    }
}
