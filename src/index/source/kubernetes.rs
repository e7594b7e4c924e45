//! The hub's EdgeReachability resources, through one list and then a watch (kube-runtime's
//! watcher), into a [`RecordStore`]. Lookups are in-memory: no API call per review.
//!
//! The store plays the reflector's writer, but keeps records normalised for matching rather than
//! the raw objects. It is synced only after the first complete list; a re-list after a watch error
//! is built aside and swapped in whole, so a review never sees a half-listed hub.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::follow::{Phase, WatchSink, follow};
use crate::core::crd::EdgeReachability;
use crate::core::record::Record;
use crate::index::Change;
use crate::index::store::{RecordSource, RecordStore};

/// Records gathered during a (re-)list, the `namespace/name`s ignored for their name, and the
/// namespaces whose record could not be decoded (with why).
type Relisting = (HashMap<String, Arc<Record>>, HashSet<String>, HashMap<String, String>);

/// What a record index does when its watch fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnWatchError {
    /// Keep answering from the last synced view while the watch is listed again (the webhook:
    /// records change rarely, and refusing every copy on a blip would stop the hub).
    KeepServing,
    /// Answer `Unavailable` until listed again (the pruner: never delete on a view that may be stale).
    Unsync,
}

/// Told of every record as the watch delivers it, in order: a reader that must not miss a state
/// the store passes through between two of its looks (the pruner's grace). `None`: the
/// namespace's record could not be decoded, so what it named then is unknown.
pub type RecordObserver = Box<dyn FnMut(&str, Option<&Record>) + Send>;

/// Applies watch events to a [`RecordStore`].
pub struct StoreWriter {
    store: Arc<RecordStore>,
    on_error: OnWatchError,
    /// Records listed so far in a (re-)list that has not finished.
    relisting: Option<Relisting>,
    /// `namespace/name` of records ignored for their name.
    ignored: HashSet<String>,
    /// Namespaces whose record changed, for whoever wants to act on a change.
    changed: Option<crate::index::dirty::Dirty<Change>>,
    observer: Option<RecordObserver>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("store", &self.store)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

impl StoreWriter {
    pub fn new(store: Arc<RecordStore>, on_error: OnWatchError) -> Self {
        StoreWriter { store, on_error, relisting: None, ignored: HashSet::new(), changed: None, observer: None }
    }

    /// Also tell `observer` of every record the watch delivers (listed or applied).
    pub fn with_observer(mut self, observer: RecordObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Also mark every change on `changed`.
    pub fn with_changes(mut self, changed: crate::index::dirty::Dirty<Change>) -> Self {
        self.changed = Some(changed);
        self
    }

    fn wanted(&self, r: &EdgeReachability) -> bool {
        r.name_any() == self.store.record_name()
    }

    fn notify(&self, change: Change) {
        if let Some(changed) = &self.changed {
            changed.mark(change);
        }
    }

    fn ignore(&mut self, r: &EdgeReachability, ignored: bool) {
        let key = format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any());
        if ignored {
            tracing::info!(record = %key, "record not named {}; ignored", self.store.record_name());
            self.ignored.insert(key);
        } else {
            self.ignored.remove(&key);
        }
        self.store.set_ignored(self.ignored.len() as u64);
    }
}

impl WatchSink<EdgeReachability> for StoreWriter {
    fn relist_started(&mut self) {
        self.relisting = Some((HashMap::new(), HashSet::new(), HashMap::new()));
    }

    fn listed(&mut self, r: EdgeReachability) {
        let wanted = self.wanted(&r);
        let Some((snapshot, ignored, _)) = self.relisting.as_mut() else { return };
        let ns = r.namespace().unwrap_or_default();
        if wanted {
            let record = super::record_of(&r);
            if let Some(observe) = self.observer.as_mut() {
                observe(&ns, Some(&record));
            }
            super::merge_into(snapshot, &ns, Arc::new(record));
        } else {
            ignored.insert(format!("{ns}/{}", r.name_any()));
        }
    }

    fn relist_done(&mut self) {
        if let Some((snapshot, ignored, undecodable)) = self.relisting.take() {
            tracing::info!(
                records = snapshot.len(),
                ignored = ignored.len(),
                undecodable = undecodable.len(),
                "records listed from the hub"
            );
            self.ignored = ignored;
            self.store.replace_undecodable(undecodable);
            self.store.replace_all(snapshot, self.ignored.len() as u64);
            self.notify(Change::All);
        }
    }

    fn applied(&mut self, r: EdgeReachability) {
        let ns = r.namespace().unwrap_or_default();
        if self.wanted(&r) {
            tracing::debug!(namespace = %ns, addresses = r.entries().len(), "record applied");
            let record = super::record_of(&r);
            if let Some(observe) = self.observer.as_mut() {
                observe(&ns, Some(&record));
            }
            self.store.upsert(&ns, record);
            self.store.set_undecodable(&ns, None);
            self.notify(Change::Namespace(ns));
        } else {
            self.ignore(&r, true);
        }
    }

    fn deleted(&mut self, r: EdgeReachability) {
        let ns = r.namespace().unwrap_or_default();
        if self.wanted(&r) {
            tracing::info!(namespace = %ns, "record deleted; namespace back to no record");
            self.store.remove(&ns);
            self.store.set_undecodable(&ns, None);
            self.notify(Change::Namespace(ns));
        } else {
            self.ignore(&r, false);
        }
    }

    /// A record that cannot be decoded makes its namespace unreadable: refused with 503 (retry)
    /// by the webhook, nothing deleted there by the pruner, until it is deleted or decodes.
    fn undecodable(&mut self, bad: &InvalidObject, phase: Phase) {
        let (ns, name) = (bad.metadata.namespace.clone().unwrap_or_default(), bad.metadata.name.as_deref());
        if name != Some(self.store.record_name()) {
            return; // a record of another name is ignored whole, decodable or not
        }
        if phase != Phase::Deleted
            && let Some(observe) = self.observer.as_mut()
        {
            observe(&ns, None);
        }
        match (phase, self.relisting.as_mut()) {
            (Phase::Listed, Some((_, _, undecodable))) => {
                undecodable.insert(ns, bad.error.clone());
            }
            (Phase::Listed, None) => {}
            (Phase::Applied, _) => {
                self.store.set_undecodable(&ns, Some(bad.error.clone()));
                self.notify(Change::Namespace(ns));
            }
            (Phase::Deleted, _) => {
                self.store.remove(&ns);
                self.store.set_undecodable(&ns, None);
                self.notify(Change::Namespace(ns));
            }
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        self.relisting = None;
        match self.on_error {
            OnWatchError::KeepServing => {
                tracing::warn!(%error, "EdgeReachability watch failed; serving the last synced records while it lists again");
                self.store.mark_stale();
            }
            OnWatchError::Unsync => {
                tracing::warn!(%error, "EdgeReachability watch failed; records unavailable until listed again");
                self.store.set_synced(false);
            }
        }
    }
}

/// Feed `store` from the hub's EdgeReachability resources, for as long as the task runs.
pub async fn run(api: Api<DeserializeGuard<EdgeReachability>>, mut writer: StoreWriter) {
    follow(api, watcher::Config::default(), &mut writer).await;
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;

    use super::*;
    use crate::core::record::RecordState;
    use crate::index::store::{DEFAULT_RECORD_NAME, RecordSource};

    fn record(ns: &str, name: &str, addresses: &[&str]) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachability",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"addresses": addresses},
        })
    }

    /// Watch events as the API server streams them: one JSON line each.
    fn watch_body(events: &[serde_json::Value]) -> Body {
        let lines: Vec<u8> = events
            .iter()
            .flat_map(|e| {
                let mut line = serde_json::to_vec(e).expect("json");
                line.push(b'\n');
                line
            })
            .collect();
        Body::from(lines)
    }

    /// The watcher lists once, then watches; the store is synced only after the list, records
    /// named otherwise are ignored, and watch events update single namespaces.
    #[tokio::test]
    async fn lists_then_watches_through_the_api() {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(mock, "default");
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let writer = StoreWriter::new(Arc::clone(&store), OnWatchError::KeepServing);
        let task = tokio::spawn(run(Api::all(client), writer));

        let (request, send) = handle.next_request().await.expect("list request");
        assert_eq!(request.method(), http::Method::GET);
        let uri = request.uri().to_string();
        assert!(uri.starts_with("/apis/networking.datumapis.com/v1alpha/edgereachabilities?"), "{uri}");
        assert!(!uri.contains("watch=true"), "first call is a list: {uri}");
        assert!(!store.synced(), "not synced before the list answers");
        let list = serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachabilityList",
            "metadata": {"resourceVersion": "10"},
            "items": [record("ns-a", "default", &["fd00::1"]), record("ns-b", "other", &["fd00::2"])],
        });
        send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("json"))));

        let (request, send) = handle.next_request().await.expect("watch request");
        let uri = request.uri().to_string();
        assert!(uri.contains("watch=true") && uri.contains("resourceVersion=10"), "{uri}");
        assert!(store.synced());
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(r) if r.names("fd00::1")));
        assert!(matches!(store.lookup("ns-b"), RecordState::Absent), "a record not named default is ignored");
        assert_eq!(store.stats().ignored_records, 1);

        let events = [
            serde_json::json!({"type": "ADDED", "object": record("ns-c", "default", &[])}),
            serde_json::json!({"type": "DELETED", "object": record("ns-a", "default", &["fd00::1"])}),
        ];
        send.send_response(Response::new(watch_body(&events)));

        // The watch ends after these events; the watcher watches again. Hold that request and check.
        let (_request, _send) = handle.next_request().await.expect("re-watch");
        assert!(matches!(store.lookup("ns-c"), RecordState::Present(r) if r.is_empty()));
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent), "a deleted record is no record");
        task.abort();
    }

    /// A record of the wrong shape (a CRD that preserves unknown fields, someone else's, or a
    /// version served without conversion) makes its namespace unreadable and no other: the list
    /// still syncs the store. Decoded whole, the list failed and the store never synced.
    #[tokio::test]
    async fn a_record_that_cannot_be_decoded_makes_only_its_namespace_unreadable() {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(mock, "default");
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let writer = StoreWriter::new(Arc::clone(&store), OnWatchError::Unsync);
        let task = tokio::spawn(run(Api::all(client), writer));
        let malformed = |ns: &str, name: &str| {
            let mut r = record(ns, name, &[]);
            r["spec"]["addresses"] = serde_json::json!("fd00::2");
            r
        };
        let (_request, send) = handle.next_request().await.expect("list request");
        let list = serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachabilityList",
            "metadata": {"resourceVersion": "10"},
            "items": [record("ns-a", "default", &["fd00::1"]), malformed("ns-b", "default"), malformed("ns-c", "other")],
        });
        send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("json"))));
        let (_request, send) = handle.next_request().await.expect("watch request");
        assert!(store.synced(), "one bad object does not fail the list");
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(r) if r.names("fd00::1")));
        assert!(
            matches!(store.lookup("ns-b"), RecordState::Unavailable(why) if why.contains("cannot be decoded")),
            "{:?}",
            store.lookup("ns-b")
        );
        assert!(matches!(store.lookup("ns-c"), RecordState::Absent), "another name is ignored, bad or not");

        let events = [
            serde_json::json!({"type": "MODIFIED", "object": record("ns-b", "default", &["fd00::2"])}),
            serde_json::json!({"type": "MODIFIED", "object": malformed("ns-a", "default")}),
        ];
        send.send_response(Response::new(watch_body(&events)));
        let (_request, send) = handle.next_request().await.expect("re-watch");
        assert!(matches!(store.lookup("ns-b"), RecordState::Present(r) if r.names("fd00::2")), "decodes again");
        assert!(matches!(store.lookup("ns-a"), RecordState::Unavailable(_)), "a record turned bad");
        let deleted = serde_json::json!({"type": "DELETED", "object": malformed("ns-a", "default")});
        send.send_response(Response::new(watch_body(&[deleted])));
        let (_request, _send) = handle.next_request().await.expect("re-watch");
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent), "deleted: no record");
        let counted = crate::index::source::follow::undecodable("EdgeReachability");
        assert!(counted >= 3, "counted: {counted}");
        task.abort();
    }

    fn parse(v: serde_json::Value) -> EdgeReachability {
        serde_json::from_value::<EdgeReachability>(v).expect("record")
    }

    #[test]
    fn relist_is_swapped_in_whole() {
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let mut writer = StoreWriter::new(Arc::clone(&store), OnWatchError::KeepServing);
        writer.relist_started();
        writer.listed(parse(record("ns-a", "default", &["fd00::1"])));
        writer.relist_done();
        writer.relist_started();
        writer.listed(parse(record("ns-b", "default", &[])));
        // Mid re-list: the old view still answers.
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(_)));
        assert!(matches!(store.lookup("ns-b"), RecordState::Absent));
        writer.relist_done();
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent));
        assert!(matches!(store.lookup("ns-b"), RecordState::Present(_)));
    }

    #[test]
    fn a_failed_watch_unsyncs_only_where_asked() {
        let error = watcher::Error::NoResourceVersion;
        for (on_error, synced_after) in [(OnWatchError::KeepServing, true), (OnWatchError::Unsync, false)] {
            let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
            let changed = crate::index::dirty::Dirty::default();
            let mut writer = StoreWriter::new(Arc::clone(&store), on_error).with_changes(changed.clone());
            writer.relist_started();
            writer.relist_done();
            writer.applied(parse(record("ns-a", "default", &[])));
            writer.failed(&error);
            assert_eq!(store.synced(), synced_after, "{on_error:?}");
            assert_eq!(changed.take(), vec![Change::Namespace("ns-a".into()), Change::All]);
        }
    }
}
