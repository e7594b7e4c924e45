//! One project control plane's objects by namespace, fed by up to five watches (HTTPProxy and
//! Namespace always; NetworkService, NetworkInterface and EndpointSlice while a proxy reads them:
//! [`ProjectIndex::needs`]). The project is synced only while every kind is whole: listed and
//! followed without an error since, or not watched because nothing reads it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::index::dirty::Dirty;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::watcher;
use parking_lot::{Mutex, RwLock};

use super::Change;
use super::source::follow::SnapshotSink;
use crate::core::project::{HttpProxy, NamespaceMeta, NetworkInterface, NetworkService};
use crate::core::reachability::{Needs, ProjectNamespace, Reachability, needs, reachable, reachable_addresses};
use crate::core::slice::Slice;
use crate::core::unwritten::Unwritten;

/// The five watches, in the order of [`ProjectIndex`]'s sync flags.
const KINDS: usize = 5;

/// A project's objects by namespace, its namespaces' UIDs, and whether each watch is whole.
#[derive(Debug)]
pub struct ProjectIndex {
    namespaces: RwLock<HashMap<String, ProjectNamespace>>,
    /// Project namespace name → its `metadata.uid`, which names the hub namespace.
    uids: RwLock<BTreeMap<String, String>>,
    synced: [AtomicBool; KINDS],
    /// How many times a watch has failed: a project that was whole, then was not, is another view.
    unsyncs: AtomicU64,
    /// Since when every watch has been whole without a break: what served before that, unseen,
    /// no answer can tell.
    whole_since: Mutex<Option<Instant>>,
    /// Which index this is, of every one made in this process: a project engaged again is
    /// another view.
    engagement: u64,
    /// Objects that could not be decoded, by namespace, as (kind slot, name): what they would
    /// add to the answer is unknown, so their namespace is not answered.
    undecodable: RwLock<HashMap<String, BTreeSet<(usize, String)>>>,
    /// Which of the kinds the proxies may read are watched now; changed, and checked against the
    /// proxies, only under this lock ([`ProjectIndex::start_watching`]).
    watching: Mutex<[bool; KINDS]>,
    /// Every namespace's answer after each event, each address kept for a window after it was
    /// last in one ([`ProjectIndex::remembering`]): the producer's work coalesces (each namespace's
    /// latest state), so an address that served only between two of its recomputes is known here
    /// alone, and its copy is kept for the window all the same.
    served: Mutex<Option<Unwritten>>,
}

impl Default for ProjectIndex {
    fn default() -> Self {
        static MADE: AtomicU64 = AtomicU64::new(0);
        ProjectIndex {
            namespaces: RwLock::default(),
            uids: RwLock::default(),
            synced: Default::default(),
            unsyncs: AtomicU64::new(0),
            whole_since: Mutex::default(),
            engagement: MADE.fetch_add(1, Ordering::Relaxed),
            undecodable: RwLock::default(),
            watching: Mutex::default(),
            served: Mutex::default(),
        }
    }
}

impl ProjectIndex {
    /// An index that remembers, from the events themselves, each address its namespaces' answers
    /// named for `window` after it was last named ([`ProjectIndex::recently_served`]).
    pub fn remembering(window: Duration) -> Self {
        let index = ProjectIndex::default();
        *index.served.lock() = Some(Unwritten::new(window));
        index
    }

    /// The addresses `namespace`'s answer named, after any event, within the window before `now`
    /// (empty for an index that does not remember).
    pub fn recently_served(&self, namespace: &str, now: Instant) -> Vec<String> {
        self.served.lock().as_ref().map(|served| served.recent(namespace, now)).unwrap_or_default()
    }

    /// After an event in `namespace`: its answer now, remembered.
    fn answered(&self, namespace: &str) {
        let mut served = self.served.lock();
        let Some(served) = served.as_mut() else { return };
        let addresses = self.reachable(namespace).addresses;
        served.observe(namespace, &addresses, crate::index::clock::now());
    }

    /// Every watch listed whole and followed without an error since.
    pub fn synced(&self) -> bool {
        self.synced.iter().all(|s| s.load(Ordering::Acquire))
    }

    /// For how long every watch has been whole without a break, at `now`; `None` while not.
    pub fn whole_for(&self, now: Instant) -> Option<Duration> {
        let since = *self.whole_since.lock();
        since.filter(|_| self.synced()).map(|since| now.saturating_duration_since(since))
    }

    /// A watch listed: if that made every one whole, the unbroken run starts now.
    fn listed(&self, slot: usize) {
        self.synced[slot].store(true, Ordering::Release);
        let mut since = self.whole_since.lock();
        if self.synced() && since.is_none() {
            *since = Some(crate::index::clock::now());
        }
    }

    /// How many times a watch has failed so far.
    pub fn unsyncs(&self) -> u64 {
        self.unsyncs.load(Ordering::Acquire)
    }

    /// Which index this is, of every one made in this process.
    pub fn engagement(&self) -> u64 {
        self.engagement
    }

    /// Does the namespace hold an object that could not be decoded? Its answer is unknown then:
    /// nothing is written for it (its record stays as it is) until that object is deleted or
    /// decodes.
    pub fn undecodable_in(&self, namespace: &str) -> bool {
        self.undecodable.read().get(namespace).is_some_and(|names| !names.is_empty())
    }

    /// The answer for one namespace: empty when it holds none of the kinds.
    pub fn reachable(&self, namespace: &str) -> Reachability {
        self.namespaces.read().get(namespace).map(reachable).unwrap_or_default()
    }

    /// The answer for one namespace unless it equals `current`, the record on the hub: `None`
    /// then, and the comparison allocates nothing (the steady state of every resync).
    pub fn changed_answer(&self, namespace: &str, current: Option<&[String]>) -> Option<Reachability> {
        let namespaces = self.namespaces.read();
        let empty = ProjectNamespace::default();
        let objects = namespaces.get(namespace).unwrap_or(&empty);
        let same = current.is_some_and(|c| reachable_addresses(objects).iter().eq(c.iter()));
        (!same).then(|| reachable(objects))
    }

    /// The namespace's UID, while the project has that namespace.
    pub fn uid(&self, namespace: &str) -> Option<String> {
        self.uids.read().get(namespace).cloned()
    }

    /// The project namespace whose UID is `uid` (the one hub namespace `ns-<uid>` holds the
    /// record of), while the project has it.
    pub fn namespace_with_uid(&self, uid: &str) -> Option<String> {
        self.uids.read().iter().find(|(_, u)| u.as_str() == uid).map(|(n, _)| n.clone())
    }

    /// Every project namespace, with its UID.
    pub fn namespaces(&self) -> Vec<(String, String)> {
        self.uids.read().iter().map(|(n, u)| (n.clone(), u.clone())).collect()
    }

    /// What the proxies read ([`Needs`]), once the proxies have listed; `None` before.
    pub fn needs(&self) -> Option<Needs> {
        if !self.synced[HttpProxy::SLOT].load(Ordering::Acquire) {
            return None;
        }
        let namespaces = self.namespaces.read();
        Some(needs(namespaces.values().flat_map(|ns| ns.proxies.values())))
    }

    /// Kind `K` is watched from now on: the project is not synced (nothing written, no copy
    /// deleted) until its watch has listed. Its whole run goes on: until a proxy read the kind,
    /// nothing of it could serve, so no gap in what was seen opens (a watch that fails is one).
    pub fn start_watching<K: Indexed>(&self) {
        let mut watching = self.watching.lock();
        watching[K::SLOT] = true;
        self.synced[K::SLOT].store(false, Ordering::Release);
    }

    /// Kind `K`'s watch has stopped (and ended: nothing it delivered comes after this). If no
    /// proxy reads the kind now, what the index held of it goes and it counts as whole, as an
    /// empty one would; true. If one does again (a proxy came meanwhile), the kind is not whole
    /// until watched and listed again; false.
    pub fn stop_watching<K: Indexed>(&self) -> bool {
        let mut watching = self.watching.lock();
        watching[K::SLOT] = false;
        if self.needs().is_none_or(|needs| needed(needs, K::SLOT)) {
            self.synced[K::SLOT].store(false, Ordering::Release);
            return false;
        }
        for ns in self.namespaces.write().values_mut() {
            K::map(ns).clear();
        }
        let mut undecodable = self.undecodable.write();
        for names in undecodable.values_mut() {
            names.retain(|(slot, _)| *slot != K::SLOT);
        }
        undecodable.retain(|_, names| !names.is_empty());
        drop(undecodable);
        self.listed(K::SLOT);
        true
    }

    /// The proxies changed: a kind they read now and that is not watched is not whole, at once,
    /// before anyone reads the index (its watch is started next, by whoever reads the change).
    fn require_needed(&self) {
        let watching = self.watching.lock();
        let Some(needs) = self.needs() else { return };
        for slot in [NetworkService::SLOT, NetworkInterface::SLOT, Slice::SLOT] {
            if needed(needs, slot) && !watching[slot] {
                self.synced[slot].store(false, Ordering::Release);
            }
        }
    }

    /// How many objects of the four namespaced kinds the index holds.
    pub fn len(&self) -> usize {
        self.namespaces
            .read()
            .values()
            .map(|n| n.proxies.len() + n.services.len() + n.interfaces.len() + n.slices.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A kind the index keeps per namespace.
pub trait Indexed: kube::Resource<DynamicType = ()> + Sized {
    /// Position of this kind's sync flag.
    const SLOT: usize;
    fn map(ns: &mut ProjectNamespace) -> &mut BTreeMap<String, Self>;
}

impl Indexed for HttpProxy {
    const SLOT: usize = 0;
    fn map(ns: &mut ProjectNamespace) -> &mut BTreeMap<String, Self> {
        &mut ns.proxies
    }
}

impl Indexed for NetworkService {
    const SLOT: usize = 1;
    fn map(ns: &mut ProjectNamespace) -> &mut BTreeMap<String, Self> {
        &mut ns.services
    }
}

impl Indexed for NetworkInterface {
    const SLOT: usize = 2;
    fn map(ns: &mut ProjectNamespace) -> &mut BTreeMap<String, Self> {
        &mut ns.interfaces
    }
}

impl Indexed for Slice {
    const SLOT: usize = 3;
    fn map(ns: &mut ProjectNamespace) -> &mut BTreeMap<String, Self> {
        &mut ns.slices
    }
}

const NAMESPACE_SLOT: usize = 4;

/// Does `needs` read the kind in `slot`?
fn needed(needs: Needs, slot: usize) -> bool {
    match slot {
        s if s == NetworkService::SLOT || s == NetworkInterface::SLOT => needs.services,
        s if s == Slice::SLOT => needs.slices,
        _ => true,
    }
}

/// Applies one kind's watch to a [`ProjectIndex`], and says which namespace each event touches.
pub struct KindWriter {
    index: Arc<ProjectIndex>,
    changes: Dirty<Change>,
}

impl KindWriter {
    pub fn new(index: Arc<ProjectIndex>, changes: Dirty<Change>) -> Self {
        KindWriter { index, changes }
    }

    fn unsync(&mut self, slot: usize, error: &watcher::Error, kind: &str) {
        self.index.synced[slot].store(false, Ordering::Release);
        self.index.unsyncs.fetch_add(1, Ordering::AcqRel);
        *self.index.whole_since.lock() = None;
        tracing::warn!(%error, kind, "project watch failed; no writes for this project until it is listed again");
    }
}

fn key<K: kube::Resource>(object: &K) -> (String, String) {
    let meta = object.meta();
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

impl KindWriter {
    /// The objects of kind `slot` that cannot be decoded are `bad` from now on.
    fn replace_undecodable(&self, slot: usize, bad: Vec<InvalidObject>) {
        let mut undecodable = self.index.undecodable.write();
        for names in undecodable.values_mut() {
            names.retain(|(s, _)| *s != slot);
        }
        for object in bad {
            let (ns, name) = (object.metadata.namespace.unwrap_or_default(), object.metadata.name.unwrap_or_default());
            undecodable.entry(ns).or_default().insert((slot, name));
        }
        undecodable.retain(|_, names| !names.is_empty());
    }

    /// One object of kind `slot` cannot be decoded now (`bad`), or is gone or decodes again.
    fn set_undecodable(&self, slot: usize, ns: &str, name: &str, bad: bool) {
        let mut undecodable = self.index.undecodable.write();
        if bad {
            undecodable.entry(ns.to_owned()).or_default().insert((slot, name.to_owned()));
        } else if let Some(names) = undecodable.get_mut(ns) {
            names.remove(&(slot, name.to_owned()));
            if names.is_empty() {
                undecodable.remove(ns);
            }
        }
    }
}

impl KindWriter {
    /// After a change of kind `K`: if it was a proxy, what the proxies read may have changed.
    fn proxies_changed<K: Indexed>(&self) {
        if K::SLOT == HttpProxy::SLOT {
            self.index.require_needed();
        }
    }
}

impl<K: Indexed> SnapshotSink<K> for KindWriter {
    fn replace(&mut self, list: Vec<K>, bad: Vec<InvalidObject>) {
        // Unreadable first: a namespace is never answered without its undecodable object known.
        self.replace_undecodable(K::SLOT, bad);
        {
            let mut namespaces = self.index.namespaces.write();
            for ns in namespaces.values_mut() {
                K::map(ns).clear();
            }
            for object in list {
                let (ns, name) = key(&object);
                K::map(namespaces.entry(ns).or_default()).insert(name, object);
            }
        }
        self.index.listed(K::SLOT);
        self.proxies_changed::<K>();
        self.changes.mark(Change::All);
    }

    fn applied(&mut self, object: K) {
        let (ns, name) = key(&object);
        self.set_undecodable(K::SLOT, &ns, &name, false);
        K::map(self.index.namespaces.write().entry(ns.clone()).or_default()).insert(name, object);
        self.proxies_changed::<K>();
        self.index.answered(&ns);
        self.changes.mark(Change::Namespace(ns));
    }

    fn deleted(&mut self, object: K) {
        let (ns, name) = key(&object);
        if let Some(objects) = self.index.namespaces.write().get_mut(&ns) {
            K::map(objects).remove(&name);
        }
        self.set_undecodable(K::SLOT, &ns, &name, false);
        self.index.answered(&ns);
        self.changes.mark(Change::Namespace(ns));
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.unsync(K::SLOT, error, &K::kind(&()));
    }

    fn undecodable(&mut self, object: &InvalidObject, gone: bool) {
        let meta = &object.metadata;
        let (ns, name) = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
        self.set_undecodable(K::SLOT, &ns, &name, !gone);
        if gone && let Some(objects) = self.index.namespaces.write().get_mut(&ns) {
            K::map(objects).remove(&name);
        }
        self.index.answered(&ns);
        self.changes.mark(Change::Namespace(ns));
    }
}

impl SnapshotSink<NamespaceMeta> for KindWriter {
    fn replace(&mut self, list: Vec<NamespaceMeta>, _undecodable: Vec<InvalidObject>) {
        *self.index.uids.write() = list.iter().filter_map(name_and_uid).collect();
        self.index.listed(NAMESPACE_SLOT);
        self.changes.mark(Change::All);
    }

    fn applied(&mut self, object: NamespaceMeta) {
        if let Some((name, uid)) = name_and_uid(&object) {
            self.index.uids.write().insert(name.clone(), uid);
            self.changes.mark(Change::Namespace(name));
        }
    }

    fn deleted(&mut self, object: NamespaceMeta) {
        if let Some(name) = object.metadata.name {
            self.index.uids.write().remove(&name);
            self.index.namespaces.write().remove(&name);
            // Its hub namespace has no project namespace now, and its copies are kept as unwatched.
            if let Some(served) = self.index.served.lock().as_mut() {
                served.written(&name);
            }
            // Its proxies went with it: what the project's proxies read may have changed.
            self.changes.mark(Change::Namespace(name));
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.unsync(NAMESPACE_SLOT, error, "Namespace");
    }
}

fn name_and_uid(ns: &NamespaceMeta) -> Option<(String, String)> {
    Some((ns.metadata.name.clone()?, ns.metadata.uid.clone()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::copy;
    use crate::index::source::follow::{Phase, WatchSink, Whole};

    /// An object that cannot be decoded leaves its namespace unanswered, and no other, until it
    /// is deleted or decodes.
    #[test]
    fn an_undecodable_object_leaves_only_its_namespace_unanswered() {
        let index = Arc::new(ProjectIndex::default());
        let tx = crate::index::dirty::Dirty::default();
        let mut proxies: Whole<_, HttpProxy> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut services: Whole<_, NetworkService> = Whole::new(KindWriter::new(Arc::clone(&index), tx));
        let bad = |ns: &str, name: &str| InvalidObject {
            error: "invalid type: string, expected a sequence".into(),
            metadata: kube::api::ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
        };
        proxies.relist_started();
        proxies.undecodable(&bad("p", "web"), Phase::Listed);
        proxies.relist_done();
        assert!(index.undecodable_in("p"));
        assert!(!index.undecodable_in("q"));
        // Another kind's relist leaves the proxy's mark alone.
        services.relist_started();
        services.relist_done();
        assert!(index.undecodable_in("p"));
        let web: HttpProxy = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha", "kind": "HTTPProxy",
            "metadata": {"name": "web", "namespace": "p"}, "spec": {"rules": []},
        }))
        .expect("proxy");
        proxies.applied(web);
        assert!(!index.undecodable_in("p"), "decodes again");
        proxies.undecodable(&bad("p", "web"), Phase::Applied);
        assert!(index.undecodable_in("p"), "turned bad");
        proxies.undecodable(&bad("p", "web"), Phase::Deleted);
        assert!(!index.undecodable_in("p"), "deleted");
        assert_eq!(index.len(), 0, "what it was is gone too");
    }

    #[test]
    fn synced_only_while_every_watch_is_whole() {
        let index = Arc::new(ProjectIndex::default());
        let tx = crate::index::dirty::Dirty::default();
        let mut slices: Whole<_, Slice> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut namespaces: Whole<_, NamespaceMeta> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut proxies: Whole<_, HttpProxy> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut services: Whole<_, NetworkService> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut interfaces: Whole<_, NetworkInterface> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        slices.relist_started();
        slices.listed(copy("p", "vm-1", &["fd00::1"]));
        slices.relist_done();
        namespaces.relist_started();
        let ns = serde_json::json!({"metadata": {"name": "p", "uid": "u-1"}});
        namespaces.listed(serde_json::from_value(ns).expect("ns"));
        namespaces.relist_done();
        proxies.relist_started();
        proxies.relist_done();
        services.relist_started();
        services.relist_done();
        assert!(!index.synced(), "not synced before all five have listed");
        interfaces.relist_started();
        interfaces.relist_done();
        assert!(index.synced());
        assert!(index.whole_for(std::time::Instant::now()).is_some());
        assert_eq!(index.uid("p").as_deref(), Some("u-1"));
        assert!(tx.take().contains(&Change::All));
        slices.applied(copy("p", "vm-2", &["fd00::2"]));
        assert_eq!(index.len(), 2);
        std::thread::sleep(Duration::from_millis(2));
        let before_failure = std::time::Instant::now();
        assert!(index.whole_for(before_failure).is_some_and(|d| d > Duration::ZERO));
        slices.failed(&watcher::Error::NoResourceVersion);
        assert!(!index.synced(), "a watch error unsyncs the project");
        assert_eq!(index.whole_for(std::time::Instant::now()), None);
        slices.relist_started();
        slices.relist_done();
        assert_eq!(index.whole_for(before_failure), Some(Duration::ZERO), "the run starts again at the relist");
    }

    /// An address that served only between two events' worth of the producer's coalesced work
    /// (a proxy made, then deleted, before any recompute) is remembered from the events for the
    /// window: the soak on 2fe1edc saw a copy deleted 3.1 s after its address served, in a
    /// namespace whose first recompute came after its pod had stopped serving.
    #[test]
    fn an_answer_between_two_recomputes_is_remembered_from_the_events() {
        let index = Arc::new(ProjectIndex::remembering(Duration::from_secs(5)));
        let tx = crate::index::dirty::Dirty::default();
        let mut proxies: Whole<_, HttpProxy> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut slices: Whole<_, Slice> = Whole::new(KindWriter::new(Arc::clone(&index), tx));
        slices.relist_started();
        slices.listed(copy("p", "vm-1", &["fd00::1"]));
        slices.relist_done();
        proxies.relist_started();
        proxies.relist_done();
        let proxy: HttpProxy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "p"},
            "spec": {"rules": [{"backends": [{"instance": {"name": "vm-1"}}]}]},
        }))
        .expect("proxy");
        proxies.applied(proxy.clone());
        proxies.deleted(proxy);
        let now = crate::index::clock::now();
        assert!(index.reachable("p").addresses.is_empty(), "nothing serves now");
        assert_eq!(index.recently_served("p", now), ["fd00::1"], "served a moment ago");
        assert!(index.recently_served("p", now + Duration::from_secs(5)).is_empty(), "forgotten after the window");
        assert!(ProjectIndex::default().recently_served("p", now).is_empty(), "an index that does not remember");
    }

    /// A proxy that comes to read a kind not watched makes the project not whole at once, in
    /// the proxy watch's own write, before whoever starts the kind's watch has seen the change:
    /// nothing is written, and no copy deleted, from a view that lacks what the proxy serves.
    #[test]
    fn a_proxy_needing_an_unwatched_kind_makes_the_project_not_whole_at_once() {
        let index = Arc::new(ProjectIndex::default());
        let tx = crate::index::dirty::Dirty::default();
        let mut proxies: Whole<_, HttpProxy> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut namespaces: Whole<_, NamespaceMeta> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        proxies.relist_started();
        proxies.relist_done();
        namespaces.relist_started();
        namespaces.relist_done();
        assert!(index.stop_watching::<NetworkService>() && index.stop_watching::<NetworkInterface>());
        assert!(index.stop_watching::<Slice>());
        assert!(index.synced(), "an idle project: two watches, whole");
        let proxy: HttpProxy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"rules": [{"backends": [{"networkService": {"name": "web"}}]}]},
        }))
        .expect("proxy");
        proxies.applied(proxy);
        assert!(!index.synced(), "not whole the moment the proxy is indexed");
        // Stopping a kind a proxy reads again is refused, and leaves it not whole.
        assert!(!index.stop_watching::<NetworkService>());
        assert!(!index.synced());
        index.start_watching::<NetworkService>();
        index.start_watching::<NetworkInterface>();
        let mut services: Whole<_, NetworkService> = Whole::new(KindWriter::new(Arc::clone(&index), tx.clone()));
        let mut interfaces: Whole<_, NetworkInterface> = Whole::new(KindWriter::new(Arc::clone(&index), tx));
        services.relist_started();
        services.relist_done();
        assert!(!index.synced(), "interfaces not listed yet");
        interfaces.relist_started();
        interfaces.relist_done();
        assert!(index.synced(), "every kind the proxy reads listed");
    }
}
