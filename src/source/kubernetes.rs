//! The hub's EdgeReachability resources, through one list and then a watch (kube-runtime's
//! watcher), into a [`RecordStore`]. Lookups are in-memory: no API call per review.
//!
//! The store plays the reflector's writer, but keeps records normalised for matching rather than
//! the raw objects. It is synced only after the first complete list; a re-list after a watch error
//! is built aside and swapped in whole, so a review never sees a half-listed hub.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};

use crate::crd::EdgeReachability;
use crate::record::Record;
use crate::store::RecordStore;

/// Records gathered during a (re-)list, and the `namespace/name`s ignored for their name.
type Relisting = (HashMap<String, Arc<Record>>, HashSet<String>);

/// Applies watch events to the store. Separate from the stream so it can be tested event by event.
#[derive(Debug)]
pub struct StoreWriter {
    store: Arc<RecordStore>,
    /// Records listed so far in a (re-)list that has not finished.
    relisting: Option<Relisting>,
    /// `namespace/name` of records ignored for their name.
    ignored: HashSet<String>,
}

impl StoreWriter {
    pub fn new(store: Arc<RecordStore>) -> Self {
        StoreWriter { store, relisting: None, ignored: HashSet::new() }
    }

    pub fn apply(&mut self, event: Event<EdgeReachability>) {
        let wanted = |r: &EdgeReachability| r.name_any() == self.store.record_name();
        match event {
            Event::Init => self.relisting = Some((HashMap::new(), HashSet::new())),
            Event::InitApply(r) => {
                let Some((snapshot, ignored)) = self.relisting.as_mut() else { return };
                let ns = r.namespace().unwrap_or_default();
                if wanted(&r) {
                    super::merge_into(snapshot, &ns, Arc::new(super::record_of(&r)));
                } else {
                    ignored.insert(format!("{ns}/{}", r.name_any()));
                }
            }
            Event::InitDone => {
                if let Some((snapshot, ignored)) = self.relisting.take() {
                    tracing::info!(records = snapshot.len(), ignored = ignored.len(), "records listed from the hub");
                    self.ignored = ignored;
                    self.store.replace_all(snapshot, self.ignored.len() as u64);
                }
            }
            Event::Apply(r) => {
                let ns = r.namespace().unwrap_or_default();
                if wanted(&r) {
                    tracing::debug!(namespace = %ns, addresses = r.entries().len(), "record applied");
                    self.store.upsert(&ns, super::record_of(&r));
                } else {
                    tracing::info!(namespace = %ns, name = %r.name_any(), "record not named {}; ignored", self.store.record_name());
                    self.ignored.insert(format!("{ns}/{}", r.name_any()));
                    self.store.set_ignored(self.ignored.len() as u64);
                }
            }
            Event::Delete(r) => {
                let ns = r.namespace().unwrap_or_default();
                if wanted(&r) {
                    tracing::info!(namespace = %ns, "record deleted; namespace back to no record");
                    self.store.remove(&ns);
                } else {
                    self.ignored.remove(&format!("{ns}/{}", r.name_any()));
                    self.store.set_ignored(self.ignored.len() as u64);
                }
            }
        }
    }
}

/// The watch stream the store is fed from, with kube's default backoff on errors.
pub fn record_events(
    api: Api<EdgeReachability>,
) -> impl Stream<Item = Result<Event<EdgeReachability>, watcher::Error>> {
    watcher(api, watcher::Config::default()).default_backoff()
}

/// Feed `store` from the hub until the stream ends. Errors are logged; the store keeps its last
/// synced state while the watcher backs off and re-lists.
pub async fn run(api: Api<EdgeReachability>, store: Arc<RecordStore>) {
    let mut writer = StoreWriter::new(store);
    let events = record_events(api);
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => writer.apply(event),
            Err(error) => {
                tracing::warn!(%error, "EdgeReachability watch failed; serving the last synced records while it retries")
            }
        }
    }
}

use kube::runtime::watcher::watcher;

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::Client;
    use kube::client::Body;

    use super::*;
    use crate::record::RecordState;
    use crate::store::{DEFAULT_RECORD_NAME, RecordSource};

    fn record(ns: &str, name: &str, addresses: &[&str]) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachability",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"addresses": addresses},
        })
    }

    /// The watcher lists once, then watches; the store is synced only after the list, records
    /// named otherwise are ignored, and watch events update single namespaces.
    #[tokio::test]
    async fn lists_then_watches_through_the_api() {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(mock, "default");
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let task = tokio::spawn(run(Api::all(client), Arc::clone(&store)));

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
        let body: Vec<u8> = events
            .iter()
            .flat_map(|e| {
                let mut line = serde_json::to_vec(e).expect("json");
                line.push(b'\n');
                line
            })
            .collect();
        send.send_response(Response::new(Body::from(body)));

        // The watch ends after these events; the watcher re-watches. Hold that request and check.
        let (_request, _send) = handle.next_request().await.expect("re-watch");
        assert!(matches!(store.lookup("ns-c"), RecordState::Present(r) if r.is_empty()));
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent), "a deleted record is no record");
        task.abort();
    }

    #[test]
    fn relist_is_swapped_in_whole() {
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let mut writer = StoreWriter::new(Arc::clone(&store));
        let parse = |v: serde_json::Value| serde_json::from_value::<EdgeReachability>(v).expect("record");
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(parse(record("ns-a", "default", &["fd00::1"]))));
        writer.apply(Event::InitDone);
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(parse(record("ns-b", "default", &[]))));
        // Mid re-list: the old view still answers.
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(_)));
        assert!(matches!(store.lookup("ns-b"), RecordState::Absent));
        writer.apply(Event::InitDone);
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent));
        assert!(matches!(store.lookup("ns-b"), RecordState::Present(_)));
    }
}
