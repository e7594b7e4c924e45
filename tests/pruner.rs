//! The pruner against kube's `tower-test` mock API server: every request it makes is seen,
//! answered and logged, so each test states exactly which calls a scenario allows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegate::core::plan::Scope;
use edgegate::index::copies::CopyIndex;
use edgegate::{CopySelector, RecordStore};
use edgegate_pruner::metrics::Metrics;
use edgegate_pruner::pruner::{Outcome, Pruner};
use edgegate_pruner::run::start_watches;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const COPY_LABEL: &str = "networking.datumapis.com/vpc-endpointslice-projection";

fn record(ns: &str, addresses: &[&str]) -> Value {
    json!({
        "apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": ns, "resourceVersion": "1"},
        "spec": {"addresses": addresses},
    })
}

fn copy(ns: &str, name: &str, addresses: &[&str]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "resourceVersion": "5",
                     "labels": {COPY_LABEL: "true"}},
        "addressType": "IPv6",
        "endpoints": addresses.iter().map(|a| json!({"addresses": [a]})).collect::<Vec<_>>(),
    })
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "10"}, "items": items})
}

/// How the mock answers.
#[derive(Clone)]
struct Scenario {
    records: Option<Vec<Value>>, // None: the record list fails with 500
    copies: Vec<Value>,
    delete_status: u16,
}

/// One request as the mock saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    body: Value,
}

impl Seen {
    fn is(&self, method: &str, path_prefix: &str) -> bool {
        self.method == method && self.uri.starts_with(path_prefix)
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Serve the mock API server until the test ends. Watches are held open (the steady state);
/// a successful DELETE is followed by the copy's DELETED event on the copy watch, as the API
/// server would send it.
fn serve(mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>, scenario: Scenario) -> Log {
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        let mut held = Vec::new();
        let mut copy_watch = None;
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let uri = parts.uri.to_string();
            let entry = Seen { method: parts.method.to_string(), uri: uri.clone(), body: body.clone() };
            seen.lock().expect("log").push(entry.clone());
            let watch = uri.contains("watch=true");
            let json = |status: u16, v: &Value| {
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(v).unwrap_or_default()))
                    .unwrap_or_else(|_| Response::new(Body::empty()))
            };
            if entry.is("GET", "/apis/networking.datumapis.com/v1alpha/edgereachabilities") && !watch {
                match &scenario.records {
                    Some(items) => send.send_response(json(200, &list("EdgeReachabilityList", items.clone()))),
                    None => {
                        send.send_response(json(500, &json!({"kind": "Status", "code": 500, "message": "etcd down"})))
                    }
                }
            } else if entry.is("GET", "/apis/discovery.k8s.io/v1/endpointslices") && !watch {
                send.send_response(json(200, &list("EndpointSliceList", scenario.copies.clone())));
            } else if entry.is("GET", "/apis/discovery.k8s.io/v1/endpointslices") {
                copy_watch = Some(send);
            } else if watch {
                held.push(send);
            } else if entry.method == "DELETE" {
                let status = scenario.delete_status;
                let name = uri.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_owned();
                send.send_response(json(status, &json!({"kind": "Status", "apiVersion": "v1", "code": status})));
                if status == 200
                    && let Some(watch) = copy_watch.take()
                {
                    let gone = scenario.copies.iter().find(|c| c["metadata"]["name"] == name.as_str()).cloned();
                    let event = json!({"type": "DELETED", "object": gone});
                    let mut line = serde_json::to_vec(&event).unwrap_or_default();
                    line.push(b'\n');
                    watch.send_response(Response::new(Body::from(line)));
                }
            } else if entry.is("POST", "/apis/events.k8s.io/v1/namespaces/") {
                send.send_response(json(201, &body));
            } else {
                send.send_response(json(404, &json!({"kind": "Status", "code": 404})));
            }
        }
        drop(held);
    });
    log
}

struct Harness {
    log: Log,
    leader: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

impl Harness {
    /// The pruner with real watches against the mock, resyncing every 100 ms.
    fn start(scenario: Scenario, leading: bool, dry_run: bool) -> Harness {
        let (mock, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let log = serve(handle, scenario);
        let client = Client::new(mock, "default");
        let (changes_tx, changes) = mpsc::unbounded_channel();
        let records = Arc::new(RecordStore::new("default"));
        let copies = Arc::new(CopyIndex::default());
        start_watches(&client, &CopySelector::default(), &records, &copies, changes_tx);
        let (leader, leader_rx) = watch::channel(leading);
        let metrics = Arc::new(Metrics::new());
        let recorder = Recorder::new(client.clone(), Reporter { controller: "edgegate-pruner".into(), instance: None });
        let pruner = Pruner {
            client,
            records,
            copies,
            selector: CopySelector::default(),
            dry_run,
            pace: Duration::ZERO,
            leader: leader_rx,
            metrics: Arc::clone(&metrics),
            recorder,
        };
        let shutdown = CancellationToken::new();
        tokio::spawn(pruner.run(changes, Duration::from_millis(100), shutdown.clone()));
        Harness { log, leader, metrics, shutdown }
    }

    fn seen(&self, method: &str, prefix: &str) -> Vec<Seen> {
        self.log.lock().expect("log").iter().filter(|s| s.is(method, prefix)).cloned().collect()
    }

    fn deletes(&self) -> Vec<Seen> {
        self.seen("DELETE", "/")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn world() -> Scenario {
    Scenario {
        records: Some(vec![record("ns-a", &["fd00::1"])]),
        copies: vec![
            copy("ns-a", "served", &["fd00::1"]),
            copy("ns-a", "unserved", &["fd00::9"]),
            copy("ns-a", "no-endpoints", &[]),
            {
                // Looks like a copy but lacks the label: never deleted, even if a list returns it.
                let mut c = copy("ns-a", "lookalike", &["fd00::9"]);
                c["metadata"]["labels"] = json!({});
                c
            },
            copy("ns-b", "no-record", &["fd00::9"]),
        ],
        delete_status: 200,
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(700)).await;
}

#[tokio::test]
async fn deletes_only_the_unnamed_copy_with_preconditions_and_an_event() {
    let h = Harness::start(world(), true, false);
    settle().await;
    let deletes = h.deletes();
    assert_eq!(deletes.len(), 1, "exactly one DELETE in several passes: {deletes:?}");
    assert!(deletes[0].uri.starts_with("/apis/discovery.k8s.io/v1/namespaces/ns-a/endpointslices/unserved"));
    assert_eq!(deletes[0].body["preconditions"], json!({"uid": "uid-unserved", "resourceVersion": "5"}));
    let events = h.seen("POST", "/apis/events.k8s.io/v1/namespaces/ns-a/events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].body["regarding"]["kind"], "EdgeReachability");
    assert_eq!(events[0].body["related"]["name"], "unserved");
    assert_eq!(h.metrics.deletions("deleted"), 1);

    // Steady state: besides the deletion and its event, only the two lists and their watches.
    let log = h.log.lock().expect("log").clone();
    let other: Vec<&Seen> = log
        .iter()
        .filter(|s| {
            let list_or_watch = s.method == "GET"
                && (s.uri.starts_with("/apis/networking.datumapis.com/v1alpha/edgereachabilities")
                    || s.uri.starts_with("/apis/discovery.k8s.io/v1/endpointslices"));
            !list_or_watch && s.method != "DELETE" && !s.is("POST", "/apis/events.k8s.io/")
        })
        .collect();
    assert!(other.is_empty(), "unexpected calls: {other:?}");
    for call in &log {
        let (group, resource, verb) = rbac_of(call);
        assert!(
            edgegate::runtime::rbac::allows(edgegate::runtime::rbac::PRUNER, &group, &resource, verb),
            "{call:?} is not in rbac::PRUNER"
        );
    }
    let lists = log.iter().filter(|s| s.method == "GET" && !s.uri.contains("watch=true")).count();
    assert_eq!(lists, 2, "one initial list each, no list per event or pass: {log:?}");
    assert!(
        log.iter()
            .any(|s| s.uri.contains("labelSelector=networking.datumapis.com%2Fvpc-endpointslice-projection%3Dtrue")),
        "copies are listed by the copy selector"
    );
}

/// The RBAC (group, resource, verb) a request needs.
fn rbac_of(call: &Seen) -> (String, String, &'static str) {
    let path = call.uri.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_start_matches("/apis/").split('/').collect();
    let group = parts[0].to_owned();
    let rest = &parts[2..];
    let (resource, named) = match rest {
        ["namespaces", _, resource, _name, ..] => (*resource, true),
        ["namespaces", _, resource] => (*resource, false),
        [resource, ..] => (*resource, false),
        [] => ("", false),
    };
    let verb = match (call.method.as_str(), named, call.uri.contains("watch=true")) {
        ("GET", false, true) => "watch",
        ("GET", false, false) => "list",
        ("GET", true, _) => "get",
        ("POST", ..) => "create",
        ("PATCH", ..) => "patch",
        ("DELETE", ..) => "delete",
        _ => "unknown",
    };
    (group, resource.to_owned(), verb)
}

#[tokio::test]
async fn no_record_deletes_nothing() {
    let mut scenario = world();
    scenario.records = Some(vec![]);
    let h = Harness::start(scenario, true, false);
    settle().await;
    assert!(h.deletes().is_empty());
}

#[tokio::test]
async fn an_unreadable_record_list_deletes_nothing() {
    let mut scenario = world();
    scenario.records = None;
    let h = Harness::start(scenario, true, false);
    settle().await;
    assert!(h.deletes().is_empty());
    assert!(h.seen("GET", "/apis/networking.datumapis.com/").len() >= 2, "the list is retried");
}

#[tokio::test]
async fn not_leading_deletes_nothing_until_leading() {
    let h = Harness::start(world(), false, false);
    settle().await;
    assert!(h.deletes().is_empty(), "no DELETE without the lease");
    h.leader.send(true).expect("leader channel");
    settle().await;
    assert_eq!(h.deletes().len(), 1, "becoming leader starts deleting");
}

#[tokio::test]
async fn dry_run_only_counts() {
    let h = Harness::start(world(), true, true);
    settle().await;
    assert!(h.deletes().is_empty());
    assert!(h.metrics.deletions("dry_run") >= 1);
}

#[tokio::test]
async fn a_conflict_is_absorbed() {
    let mut scenario = world();
    scenario.delete_status = StatusCode::CONFLICT.as_u16();
    let h = Harness::start(scenario, true, false);
    settle().await;
    assert!(!h.deletes().is_empty());
    assert!(h.metrics.deletions("changed") >= 1);
    assert_eq!(h.metrics.deletions("error"), 0);
    assert!(h.seen("POST", "/apis/events.k8s.io/").is_empty(), "no event for a copy not deleted");
}

/// A pruner whose caches are filled by hand, for single passes.
fn pruner_with(records: Vec<Value>, copies: Vec<Value>, pace: Duration) -> (Pruner, Log, Arc<RecordStore>) {
    use edgegate::index::copies::CopyWriter;
    use edgegate::index::source::follow::WatchSink;
    use edgegate::index::source::kubernetes::{OnWatchError, StoreWriter};
    let (mock, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let scenario = Scenario { records: Some(vec![]), copies: copies.clone(), delete_status: 200 };
    let log = serve(handle, scenario);
    let client = Client::new(mock, "default");
    let store = Arc::new(RecordStore::new("default"));
    let mut writer = StoreWriter::new(Arc::clone(&store), OnWatchError::Unsync);
    writer.relist_started();
    for r in records {
        writer.listed(serde_json::from_value(r).expect("record"));
    }
    writer.relist_done();
    let index = Arc::new(CopyIndex::default());
    let mut copy_writer = CopyWriter::new(Arc::clone(&index));
    copy_writer.relist_started();
    for c in copies {
        copy_writer.listed(serde_json::from_value(c).expect("copy"));
    }
    copy_writer.relist_done();
    let (_tx, leader) = watch::channel(true);
    let recorder = Recorder::new(client.clone(), Reporter { controller: "edgegate-pruner".into(), instance: None });
    let pruner = Pruner {
        client,
        records: Arc::clone(&store),
        copies: index,
        selector: CopySelector::default(),
        dry_run: false,
        pace,
        leader,
        metrics: Arc::new(Metrics::new()),
        recorder,
    };
    (pruner, log, store)
}

#[tokio::test]
async fn a_record_that_gains_the_address_before_the_pass_deletes_nothing() {
    let (pruner, log, store) =
        pruner_with(vec![record("ns-a", &[])], vec![copy("ns-a", "web", &["fd00::9"])], Duration::ZERO);
    store.upsert("ns-a", edgegate::Record::from_entries(["fd00::9"]));
    assert!(pruner.pass(&Scope::Namespace("ns-a".into())).await.is_empty());
    assert!(pruner.pass(&Scope::All).await.is_empty());
    assert!(log.lock().expect("log").is_empty(), "no request at all");
}

#[tokio::test]
async fn a_large_withdrawal_is_paced_and_complete() {
    let copies: Vec<Value> =
        (0..20).map(|i| copy("ns-a", &format!("web-{i:02}"), &[&format!("fd00::{i:x}")])).collect();
    let (pruner, log, _) = pruner_with(vec![record("ns-a", &[])], copies, Duration::from_millis(20));
    let started = std::time::Instant::now();
    let outcomes = pruner.pass(&Scope::Namespace("ns-a".into())).await;
    let took = started.elapsed();
    assert_eq!(outcomes, vec![Outcome::Deleted; 20], "none dropped");
    assert!(took >= Duration::from_millis(19 * 20), "paced at 50/s: took {took:?}");
    let deletes = log.lock().expect("log").iter().filter(|s| s.method == "DELETE").count();
    assert_eq!(deletes, 20);
}
