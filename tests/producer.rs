//! edgegate-producer against two of kube's `tower-test` mock API servers, one a project control
//! plane and one the hub: every request is seen, answered, logged and checked against
//! `src/runtime/rbac.rs`, so each test states exactly which calls a scenario allows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use edgegate::index::hub::HubView;
use edgegate::index::source::kubernetes::Change;
use edgegate::runtime::rbac::{PRODUCER_HUB, PRODUCER_PROJECT, Rule, allows};
use edgegate_producer::metrics::Metrics;
use edgegate_producer::producer::{Producer, Trigger, Written};
use edgegate_producer::run::{Engaged, start_hub_watches};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

/// One request as a mock saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    body: Value,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"}, "items": items})
}

/// Serve a mock: a GET without `watch` gets the list `lists` has for its path (500 where it
/// says `None`, and no answer at all for a path it does not name), watches are held open, a PATCH
/// is echoed and an event POST accepted.
fn serve(lists: Vec<(&'static str, Option<Vec<Value>>)>) -> (Client, Log) {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let uri = parts.uri.to_string();
            let path = uri.split('?').next().unwrap_or_default().to_owned();
            seen.lock().expect("log").push(Seen {
                method: parts.method.to_string(),
                uri: uri.clone(),
                body: body.clone(),
            });
            let json = |status: u16, v: &Value| {
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(v).unwrap_or_default()))
                    .unwrap_or_else(|_| Response::new(Body::empty()))
            };
            match parts.method.as_str() {
                "GET" if uri.contains("watch=true") => held.push(send),
                "GET" => match lists.iter().find(|(p, _)| *p == path) {
                    Some((_, Some(items))) => send.send_response(json(200, &list(items.clone()))),
                    Some((_, None)) => send.send_response(json(500, &json!({"kind": "Status", "code": 500}))),
                    None => held.push(send), // never answered: the list is still running
                },
                "PATCH" => send.send_response(json(200, &body)),
                "POST" => send.send_response(json(201, &body)),
                _ => send.send_response(json(404, &json!({"kind": "Status", "code": 404}))),
            }
        }
        drop(held);
    });
    (Client::new(mock, "default"), log)
}

const HTTPPROXIES: &str = "/apis/networking.datumapis.com/v1alpha/httpproxies";
const SERVICES: &str = "/apis/networking.datumapis.com/v1alpha/networkservices";
const INTERFACES: &str = "/apis/networking.datumapis.com/v1alpha/networkinterfaces";
const SLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";
const NAMESPACES: &str = "/api/v1/namespaces";
const RECORDS: &str = "/apis/networking.datumapis.com/v1alpha/edgereachabilities";

/// A project namespace `p` (UID `u1`) serving two interfaces through one proxy.
fn project(failing: Option<&'static str>, silent: Option<&'static str>) -> Vec<(&'static str, Option<Vec<Value>>)> {
    let meta = |name: &str| json!({"name": name, "namespace": "p", "resourceVersion": "1"});
    let lists = vec![
        (
            HTTPPROXIES,
            Some(vec![
                json!({"metadata": meta("web"), "spec": {"rules": [{"backends": [{"networkService": {"name": "web"}}]}]}}),
            ]),
        ),
        (
            SERVICES,
            Some(vec![
                json!({"metadata": meta("web"), "spec": {"networkInterfaces": {"selector": {"matchLabels": {"app": "web"}}}}}),
            ]),
        ),
        (
            INTERFACES,
            Some(vec![
                json!({"metadata": {"name": "a", "namespace": "p", "labels": {"app": "web"}}, "spec": {"addresses": [{"address": "fd20::2/128"}]}, "status": {"phase": "Bound"}}),
                json!({"metadata": {"name": "b", "namespace": "p", "labels": {"app": "web"}}, "spec": {"addresses": [{"address": "fd20::1"}]}, "status": {"phase": "Bound"}}),
            ]),
        ),
        (SLICES, Some(vec![])),
        (NAMESPACES, Some(vec![json!({"metadata": {"name": "p", "uid": "u1", "resourceVersion": "1"}})])),
    ];
    lists
        .into_iter()
        .filter(|(p, _)| Some(*p) != silent)
        .map(|(p, items)| (p, if Some(p) == failing { None } else { items }))
        .collect()
}

fn hub(records: Vec<Value>) -> Vec<(&'static str, Option<Vec<Value>>)> {
    vec![
        (NAMESPACES, Some(vec![json!({"metadata": {"name": "ns-u1", "resourceVersion": "1"}})])),
        (RECORDS, Some(records)),
    ]
}

struct Harness {
    producer: Producer,
    project_log: Log,
    hub_log: Log,
    _triggers: mpsc::UnboundedReceiver<Trigger>,
}

fn start(
    project_lists: Vec<(&'static str, Option<Vec<Value>>)>,
    hub_lists: Vec<(&'static str, Option<Vec<Value>>)>,
) -> Harness {
    let (project, project_log) = serve(project_lists);
    let (hub, hub_log) = serve(hub_lists);
    let (tx, triggers) = mpsc::unbounded_channel();
    let view = Arc::new(HubView::new("default"));
    start_hub_watches(&hub, &view, &tx);
    let engaged = Engaged::new(tx);
    engaged.engage("acme", project);
    let (_, leader) = watch::channel(true);
    let recorder = Recorder::new(hub.clone(), Reporter { controller: "edgegate-producer".into(), instance: None });
    let producer = Producer {
        hub,
        view,
        projects: Arc::clone(&engaged.projects),
        force_ownership: false,
        leader,
        metrics: Arc::new(Metrics::new()),
        recorder,
    };
    Harness { producer, project_log, hub_log, _triggers: triggers }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The RBAC (group, resource, verb) a request needs.
fn rbac_of(call: &Seen) -> (String, String, &'static str) {
    let path = call.uri.split('?').next().unwrap_or_default();
    let (group, rest) = match path.strip_prefix("/api/v1/") {
        Some(rest) => (String::new(), rest.split('/').collect::<Vec<_>>()),
        None => {
            let parts: Vec<&str> = path.trim_start_matches("/apis/").split('/').collect();
            (parts[0].to_owned(), parts[2..].to_vec())
        }
    };
    let (resource, named) = match rest.as_slice() {
        ["namespaces", _, resource, _name, ..] => (*resource, true),
        ["namespaces", _, resource] => (*resource, false),
        [resource, _name] => (*resource, true),
        [resource] => (*resource, false),
        _ => ("", false),
    };
    let verb = match (call.method.as_str(), named, call.uri.contains("watch=true")) {
        ("GET", false, true) => "watch",
        ("GET", false, false) => "list",
        ("GET", true, _) => "get",
        ("PATCH", _, _) => "patch",
        ("POST", _, _) => "create",
        _ => "other",
    };
    (group, resource.to_owned(), verb)
}

fn assert_within(log: &Log, rules: &[Rule], which: &str) {
    for call in log.lock().expect("log").iter() {
        let (group, resource, verb) = rbac_of(call);
        assert!(allows(rules, &group, &resource, verb), "{call:?} is not in rbac::{which}");
    }
}

#[tokio::test]
async fn writes_the_answer_once_then_nothing_but_lists_and_watches() {
    let h = start(project(None, None), hub(vec![]));
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Unchanged], "no second write");
    let hub_log = h.hub_log.lock().expect("log").clone();
    let patches: Vec<&Seen> = hub_log.iter().filter(|s| s.method == "PATCH").collect();
    assert_eq!(patches.len(), 1, "{hub_log:?}");
    assert!(patches[0].uri.starts_with(
        &format!("{}/../namespaces/ns-u1/edgereachabilities/default", RECORDS).replace("/edgereachabilities/../", "/")
    ));
    assert!(patches[0].uri.contains("fieldManager=edgegate-producer"), "{}", patches[0].uri);
    assert!(!patches[0].uri.contains("force=true"), "never forced without --force-ownership");
    assert_eq!(patches[0].body["spec"]["addresses"], json!(["fd20::1", "fd20::2"]));
    // Steady state: one list and one watch per kind, and the one write.
    let project_log = h.project_log.lock().expect("log").clone();
    let lists = |log: &[Seen]| log.iter().filter(|s| s.method == "GET" && !s.uri.contains("watch=true")).count();
    assert_eq!(lists(&project_log), 5, "{project_log:?}");
    assert!(project_log.iter().all(|s| s.method == "GET"), "nothing is ever written to a project");
    assert_eq!(lists(&hub_log), 2, "{hub_log:?}");
    assert_eq!(hub_log.iter().filter(|s| s.method != "GET" && s.method != "PATCH").count(), 0, "{hub_log:?}");
    assert_within(&h.project_log, PRODUCER_PROJECT, "PRODUCER_PROJECT");
    assert_within(&h.hub_log, PRODUCER_HUB, "PRODUCER_HUB");
}

#[tokio::test]
async fn nothing_is_written_before_every_project_watch_has_listed() {
    let h = start(project(None, Some(INTERFACES)), hub(vec![]));
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

#[tokio::test]
async fn nothing_is_written_when_a_project_list_fails() {
    let h = start(project(Some(SERVICES), None), hub(vec![]));
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

#[tokio::test]
async fn nothing_is_written_while_the_hub_is_not_listed() {
    let h = start(project(None, None), vec![(NAMESPACES, Some(vec![]))]);
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

#[tokio::test]
async fn an_equal_record_is_not_written_and_a_missing_hub_namespace_waits() {
    let record = json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": "ns-u1", "resourceVersion": "3"},
        "spec": {"addresses": ["fd20::1", "fd20::2"]}});
    let h = start(project(None, None), hub(vec![record]));
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Unchanged]);
    let h = start(project(None, None), vec![(NAMESPACES, Some(vec![])), (RECORDS, Some(vec![]))]);
    settle().await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::NoHubNamespace]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}
