//! edgegate-producer against two of kube's `tower-test` mock API servers, one a project control
//! plane and one the hub: every request is seen, answered, logged and checked against
//! `src/runtime/rbac.rs`, so each test states exactly which calls a scenario allows.

#[path = "support/mock.rs"]
mod mock;

use std::sync::Arc;
use std::time::Duration;

use edgegate::core::hold::Hold;
use edgegate::index::Change;
use edgegate::index::dirty::Dirty;
use edgegate::index::hub::HubView;
use edgegate::runtime::lease::Leadership;
use edgegate::runtime::queue::WorkQueue;
use edgegate::runtime::rbac::{PRODUCER_HUB, PRODUCER_PROJECT};
use edgegate_producer::engaged::Engaged;
use edgegate_producer::metrics::Metrics;
use edgegate_producer::outcome::Written;
use edgegate_producer::producer::{Producer, Trigger};
use edgegate_producer::watches::start_hub_watches;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use mock::{Log, Seen, assert_within, initial_events, json_response, list, status, watch_event};

/// A mock API server offering streaming lists: a streaming list (or a GET without `watch`) gets
/// the objects `lists` has for its path (500 where it says `None`, and no answer at all for a path
/// it does not name), other watches are held open, a PATCH is echoed and an event POST accepted.
fn serve(lists: Vec<(&'static str, Option<Vec<Value>>)>) -> (Client, Log) {
    serve_with(lists, |seen| json_response(200, &seen.body))
}

/// [`serve`], a PATCH answered by `patched`.
fn serve_with(
    lists: Vec<(&'static str, Option<Vec<Value>>)>,
    patched: impl Fn(&Seen) -> http::Response<kube::client::Body> + Send + 'static,
) -> (Client, Log) {
    let mut held = Vec::new();
    mock::serve(move |seen, send| match seen.method.as_str() {
        "GET" if seen.is_watch() && !seen.is_streaming_list() => held.push(send),
        "GET" => match lists.iter().find(|(p, _)| *p == seen.path()) {
            Some((_, Some(items))) if seen.is_watch() => send.send_response(initial_events(items)),
            Some((_, Some(items))) => send.send_response(json_response(200, &list("List", items.clone()))),
            Some((_, None)) => send.send_response(status(500)),
            None => held.push(send), // never answered: the list is still running
        },
        "PATCH" => send.send_response(patched(seen)),
        "POST" => send.send_response(json_response(201, &seen.body)),
        _ => send.send_response(status(404)),
    })
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
    _triggers: Dirty<Trigger>,
}

fn start(
    project_lists: Vec<(&'static str, Option<Vec<Value>>)>,
    hub_lists: Vec<(&'static str, Option<Vec<Value>>)>,
) -> Harness {
    start_with(project_lists, serve(hub_lists))
}

/// [`start`] with the hub `hub`.
fn start_with(project_lists: Vec<(&'static str, Option<Vec<Value>>)>, hub: (Client, Log)) -> Harness {
    let (project, project_log) = serve(project_lists);
    let (hub, hub_log) = hub;
    let triggers = Dirty::default();
    let view = Arc::new(HubView::new("default"));
    let shutdown = CancellationToken::new();
    start_hub_watches(&hub, &view, &triggers, &shutdown);
    let engaged = Engaged::new(Default::default(), triggers.clone(), &shutdown);
    engaged.engage("acme", project);
    let leader = Leadership::always();
    let recorder = Recorder::new(hub.clone(), Reporter { controller: "edgegate-producer".into(), instance: None });
    let producer = Producer {
        hub,
        view,
        projects: Arc::clone(&engaged.projects),
        force_ownership: false,
        withdrawals: Mutex::new(Hold::new(Duration::ZERO)),
        memory: edgegate_producer::memory::Memory::new(Duration::ZERO, Duration::from_secs(5)),
        queue: edgegate::runtime::queue::WorkQueue::new(),
        leader,
        owner: None,
        metrics: Arc::new(Metrics::new()),
        recorder,
        mismatched: Mutex::default(),
        pacer: None,
    };
    Harness { producer, project_log, hub_log, _triggers: triggers }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Wait (5 s at most) until `ok`: a test that asserts nothing was written first waits for
/// everything but the one missing piece to be whole, or it would pass on a producer that had not
/// started yet.
async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !ok() {
        assert!(started.elapsed() < Duration::from_secs(5), "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Is a watch open on `path` after its list (so the list was answered)?
fn watching(log: &Log, path: &str) -> bool {
    log.lock().expect("log").iter().any(|s| s.path() == path && s.is_watch() && !s.is_streaming_list())
}

/// What the producer of `h` remembers, as its in-process pruner's evidence reads it.
fn memory(h: &Harness) -> edgegate_producer::memory::Memory {
    h.producer.memory.clone()
}

fn project_synced(h: &Harness) -> bool {
    h.producer.projects.read().values().all(|p| p.synced())
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
    // Steady state: one streaming list and one watch from its end per kind the proxies read
    // (HTTPProxy, Namespace, and for the networkService backend NetworkService and
    // NetworkInterface; no EndpointSlice: no instance backend), no LIST, and the one write.
    let project_log = h.project_log.lock().expect("log").clone();
    let lists = |log: &[Seen]| log.iter().filter(|s| s.is_streaming_list()).count();
    let plain = |log: &[Seen]| log.iter().filter(|s| s.method == "GET" && !s.is_watch()).count();
    assert_eq!((lists(&project_log), plain(&project_log)), (4, 0), "{project_log:?}");
    assert!(!project_log.iter().any(|s| s.path() == SLICES), "EndpointSlices watched with no instance backend");
    assert!(project_log.iter().all(|s| s.method == "GET"), "nothing is ever written to a project");
    assert_eq!((lists(&hub_log), plain(&hub_log)), (2, 0), "{hub_log:?}");
    assert_eq!(hub_log.iter().filter(|s| s.method != "GET" && s.method != "PATCH").count(), 0, "{hub_log:?}");
    assert_within(&h.project_log, PRODUCER_PROJECT, "PRODUCER_PROJECT");
    assert_within(&h.hub_log, PRODUCER_HUB, "PRODUCER_HUB");
}

#[tokio::test]
async fn nothing_is_written_before_every_project_watch_has_listed() {
    let h = start(project(None, Some(INTERFACES)), hub(vec![]));
    until("the hub and three of the four kinds its proxies read listed", || {
        h.producer.view.synced() && [HTTPPROXIES, SERVICES, NAMESPACES].iter().all(|p| watching(&h.project_log, p))
    })
    .await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

#[tokio::test]
async fn nothing_is_written_when_a_project_list_fails() {
    let h = start(project(Some(SERVICES), None), hub(vec![]));
    until("the hub and the other project kinds listed, and the failing list retried", || {
        let retried = h.project_log.lock().expect("log").iter().filter(|s| s.path() == SERVICES).count() >= 2;
        h.producer.view.synced()
            && retried
            && [HTTPPROXIES, INTERFACES, NAMESPACES].iter().all(|p| watching(&h.project_log, p))
    })
    .await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

#[tokio::test]
async fn nothing_is_written_while_the_hub_is_not_listed() {
    let h = start(project(None, None), vec![(NAMESPACES, Some(vec![]))]);
    until("the project and the hub's namespaces listed", || project_synced(&h) && watching(&h.hub_log, NAMESPACES))
        .await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"));
}

/// A record on the hub that cannot be decoded, or a project object: what it names is unknown, so
/// nothing is written for that namespace (the record withdraws nothing) until it decodes.
#[tokio::test]
async fn nothing_is_written_where_the_record_or_a_project_object_cannot_be_decoded() {
    let malformed = json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": "ns-u1", "resourceVersion": "3"},
        "spec": {"addresses": "fd20::1"}});
    let h = start(project(None, None), hub(vec![malformed]));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert!(h.producer.view.undecodable("ns-u1"));
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"), "no write");

    let mut lists = project(None, None);
    let proxies = lists.iter_mut().find(|(p, _)| *p == HTTPPROXIES).expect("proxies");
    proxies.1.as_mut().expect("items")[0]["spec"]["rules"] = json!("not a list");
    let h = start(lists, hub(vec![]));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    assert!(h.hub_log.lock().expect("log").iter().all(|s| s.method == "GET"), "no write");
}

/// A record write carries the resourceVersion of the record the answer was compared with: a
/// record changed since (another writer; sharing, another replica that took the project over) is
/// not overwritten. Refused so (409, "the object has been modified"), the write is skipped, not
/// forced over the other writer as a field manager's conflict would be. Failed on the old code:
/// the write carried no resourceVersion.
#[tokio::test]
async fn a_write_is_based_on_the_record_it_read_and_a_stale_one_is_not_forced() {
    let record = json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": "ns-u1", "resourceVersion": "3"},
        "spec": {"addresses": ["fd20::1"]}});
    let h = start(project(None, None), hub(vec![record.clone()]));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    let patches: Vec<Seen> = h.hub_log.lock().expect("log").iter().filter(|s| s.method == "PATCH").cloned().collect();
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].body["metadata"]["resourceVersion"], json!("3"), "{}", patches[0].body);

    let stale = |_: &Seen| {
        json_response(
            409,
            &json!({"kind": "Status", "apiVersion": "v1", "code": 409, "reason": "Conflict",
            "message": "Operation cannot be fulfilled on edgereachabilities.networking.datumapis.com \"default\": the object has been modified; please apply your changes to the latest version and try again"}),
        )
    };
    let h = start_with(project(None, None), serve_with(hub(vec![record]), stale));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    let log = h.hub_log.lock().expect("log").clone();
    let patches: Vec<&Seen> = log.iter().filter(|s| s.method == "PATCH").collect();
    assert_eq!(patches.len(), 1, "one write, not retried by force: {patches:?}");
    assert!(!patches[0].uri.contains("force=true"));
    assert!(
        h.producer.memory.failing.lock().is_empty(),
        "not a failed write: the watch brings the namespace round again"
    );
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

/// An address the answer named while the producer could not write (not leading here; the hub
/// restarting or unreadable is the same gap) served a moment ago: the first write after names it
/// too, held like any withdrawal, or the pruner would withdraw a pod that served a moment ago
/// sooner than `--withdraw-after` plus its grace. It leaves the record after `--withdraw-after`.
/// On a paused clock: the withdrawal's wait takes no time.
#[tokio::test(start_paused = true)]
async fn what_served_while_nothing_could_be_written_is_named_by_the_first_write_after() {
    use edgegate::core::project::NetworkInterface;
    use edgegate::index::project::KindWriter;
    use edgegate::index::source::follow::SnapshotSink;
    let withdraw_after = Duration::from_millis(1500);
    let mut h = start(project(None, None), hub(vec![]));
    let (leader, grant) = edgegate::runtime::lease::Grant::new();
    h.producer.leader = leader;
    h.producer.withdrawals = Mutex::new(Hold::new(withdraw_after));
    h.producer.memory.unwritten = Arc::new(Mutex::new(edgegate::core::unwritten::Unwritten::new(withdraw_after)));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    // Not leading: both interfaces serve, and nothing is written.
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    // Interface b (fd20::1) stops serving, still unwritten.
    let index = Arc::clone(h.producer.projects.read().get("acme").expect("engaged"));
    let unbound: NetworkInterface = serde_json::from_value(json!({
        "metadata": {"name": "b", "namespace": "p", "labels": {"app": "web"}},
        "spec": {"addresses": [{"address": "fd20::1"}]}, "status": {"phase": "Available"}}))
    .expect("interface");
    KindWriter::new(index, Dirty::default()).applied(unbound);
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Skipped]);
    // Leading now: fd20::1 served a moment ago, so the record names it.
    grant.until(Some(edgegate::index::clock::now() + Duration::from_secs(60)));
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    let written = |h: &Harness| -> Vec<Value> {
        let log = h.hub_log.lock().expect("log");
        log.iter().filter(|s| s.method == "PATCH").map(|s| s.body["spec"]["addresses"].clone()).collect()
    };
    assert_eq!(written(&h), [json!(["fd20::1", "fd20::2"])]);
    // --withdraw-after later it leaves like any withdrawal.
    tokio::time::sleep(withdraw_after + Duration::from_millis(100)).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    assert_eq!(written(&h), [json!(["fd20::1", "fd20::2"]), json!(["fd20::2"])]);
}

/// `--prune`: a due copy goes on the evidence of its own project alone. Project `acme` (namespace
/// `p`, hub namespace `ns-u1`, labelled `cluster-acme`) is whole; project `dark` cannot be read
/// (every list answered 500), and holds its own hub namespace's copies and nobody else's. A copy
/// in a hub namespace no engaged project owns is kept. Failed before per-project evidence: the
/// only evidence was the producer's one word for the whole hub, withheld while any project was
/// unreadable, so acme's withdrawn copy was kept too.
#[tokio::test]
async fn a_project_that_cannot_be_read_holds_only_its_own_copies() {
    use edgegate::core::plan::Deletion;
    use edgegate::core::verdict::Doubt;
    use edgegate_producer::evidence::Evidence;
    let labelled = |name: &str, project: &str| {
        json!({"metadata": {"name": name, "resourceVersion": "1",
                            "labels": {"meta.datumapis.com/upstream-cluster-name": project}}})
    };
    let hub_namespaces = vec![
        labelled("ns-u1", "cluster-acme"),
        labelled("ns-u2", "cluster-dark"),
        json!({"metadata": {"name": "ns-u3", "resourceVersion": "1"}}),
    ];
    let h = start(project(None, None), vec![(NAMESPACES, Some(hub_namespaces)), (RECORDS, Some(vec![]))]);
    let dark: Vec<(&'static str, Option<Vec<Value>>)> =
        [HTTPPROXIES, SERVICES, INTERFACES, SLICES, NAMESPACES].into_iter().map(|p| (p, None)).collect();
    let (dark_client, dark_log) = serve(dark);
    let engaged = Engaged::new(Arc::clone(&h.producer.projects), Dirty::default(), &CancellationToken::new());
    engaged.engage("dark", dark_client);
    until("acme whole, dark's lists refused", || {
        h.producer.view.synced()
            && h.producer.projects.read().get("acme").is_some_and(|p| p.synced())
            && dark_log.lock().expect("log").iter().filter(|s| s.path() == NAMESPACES).count() >= 1
    })
    .await;
    // The producer's evidence, needing its project whole for `whole_for`.
    let evidence_for = |whole_for: Duration| {
        let memory = memory(&h);
        let (view, projects) = (Arc::clone(&h.producer.view), Arc::clone(&h.producer.projects));
        Evidence::new(view, projects, Arc::default(), memory, whole_for, WorkQueue::new())
    };
    let evidence = evidence_for(Duration::ZERO);
    let copy = |ns: &str, address: &str| Deletion {
        namespace: ns.into(),
        name: "web".into(),
        uid: Some("c1".into()),
        resource_version: Some("1".into()),
        addresses: vec![address.into()],
    };
    let now = edgegate::index::clock::now();
    assert_eq!(evidence.judge(&copy("ns-u1", "fd20::9"), now), None, "acme is whole and serves none of it");
    assert_eq!(evidence.judge(&copy("ns-u2", "fd20::9"), now), Some(Doubt::Incomplete), "dark cannot be read");
    assert_eq!(evidence.judge(&copy("ns-u3", "fd20::9"), now), Some(Doubt::Unwatched), "nobody's");
    // Served now (spelled another way): the record is about to name it again.
    assert_eq!(evidence.judge(&copy("ns-u1", "fd20:0::1"), now), Some(Doubt::Served));
    // Acme's last write failed: its record may lack what serves.
    h.producer.memory.failing.lock().insert("ns-u1".into(), 1);
    assert_eq!(evidence.judge(&copy("ns-u1", "fd20::9"), now), Some(Doubt::Unwritten));
    h.producer.memory.failing.lock().clear();
    // An address in one of acme's answers until a moment ago, whatever its record said (it never
    // named it: a hand edit, a replica not leading): kept until withdraw-after + grace (here 5 s)
    // after it was last served. The 30-minute soak on 6e75812 deleted such copies 3.6 s after.
    h.producer.memory.served.lock().observe("ns-u1", &["fd20::7".to_owned()], now);
    h.producer.memory.served.lock().observe("ns-u1", &[], now + Duration::from_millis(100));
    assert_eq!(evidence.judge(&copy("ns-u1", "fd20::7"), now + Duration::from_secs(4)), Some(Doubt::Served));
    assert_eq!(evidence.judge(&copy("ns-u1", "fd20::7"), now + Duration::from_secs(6)), None);
    // Whole, but not for long enough to have seen all that served in the grace.
    let long = evidence_for(Duration::from_secs(3600));
    assert_eq!(long.judge(&copy("ns-u1", "fd20::9"), now), Some(Doubt::Incomplete));
}

/// The live read before a DELETE (`Gate::confirm`), on a project whose reads the test answers by
/// hand: a pass waits for it 0.5 s at most and keeps the copy; a second asking while it is under
/// way keeps it at once, with no second read; a read unanswered for 5 s fails and holds the
/// project's copies (incomplete); the next asking reads again without waiting; an answer vouches.
#[tokio::test]
async fn a_live_read_bounds_what_a_pass_waits() {
    use edgegate::core::plan::Deletion;
    use edgegate::core::verdict::Doubt;
    use edgegate::runtime::prune::gate::Gate;
    use edgegate_producer::evidence::Evidence;
    use std::time::Instant;
    let hub_namespaces = vec![json!({"metadata": {"name": "ns-u1", "resourceVersion": "1",
        "labels": {"meta.datumapis.com/upstream-cluster-name": "cluster-acme"}}})];
    let h = start(project(None, None), vec![(NAMESPACES, Some(hub_namespaces)), (RECORDS, Some(vec![]))]);
    until("acme whole", || {
        h.producer.view.synced() && h.producer.projects.read().get("acme").is_some_and(|p| p.synced())
    })
    .await;
    let (reads, mut read) =
        tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
    let clients = edgegate_producer::evidence::Clients::default();
    clients.write().insert("acme".to_owned(), Client::new(reads, "default"));
    let memory = memory(&h);
    let (view, projects) = (Arc::clone(&h.producer.view), Arc::clone(&h.producer.projects));
    let evidence = Evidence::new(view, projects, clients, memory, Duration::ZERO, Default::default());
    let copy = Deletion {
        namespace: "ns-u1".into(),
        name: "web".into(),
        uid: Some("c1".into()),
        resource_version: Some("1".into()),
        addresses: vec!["fd20::9".into()],
    };

    let started = Instant::now();
    let confirmed = evidence.confirm(&copy);
    let (request, unanswered) = read.next_request().await.expect("a live read");
    assert!(request.uri().path().ends_with("/namespaces"), "{}", request.uri());
    assert!(!confirmed.await, "no answer: kept");
    let waited = started.elapsed();
    println!("a pass waited {waited:?} for an unanswered live read");
    assert!(waited < Duration::from_secs(2), "a pass waited {waited:?}");
    let again = Instant::now();
    assert!(!evidence.confirm(&copy).await, "the read is still under way: kept");
    assert!(again.elapsed() < Duration::from_millis(200), "waited {:?} with a read under way", again.elapsed());
    assert_eq!(evidence.judge(&copy, edgegate::index::clock::now()), None, "not failed yet: judged whole");

    // Unanswered for 5 s: failed; acme's copies are kept without asking again.
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    drop(unanswered);
    assert_eq!(evidence.judge(&copy, edgegate::index::clock::now()), Some(Doubt::Incomplete));
    // Asked anyway (the pruner does not, while judged so): a new read, not waited for.
    let asked = Instant::now();
    assert!(!evidence.confirm(&copy).await);
    assert!(asked.elapsed() < Duration::from_millis(200), "waited {:?} after a failed read", asked.elapsed());
    let (_, answer) = read.next_request().await.expect("a new read");
    answer.send_response(mock::json_response(200, &mock::list("NamespaceList", vec![])));
    until("the answer noted", || evidence.judge(&copy, edgegate::index::clock::now()).is_none()).await;
    assert!(evidence.confirm(&copy).await, "answered just now: vouched for");
}

/// A hub namespace's event writes that namespace's record alone, found by its UID (in the
/// project its label names first): no list of every namespace of every project per event.
#[tokio::test]
async fn a_hub_namespace_event_writes_its_own_record_only() {
    let h = start(project(None, None), hub(vec![]));
    until("project and hub synced", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::Namespace("ns-zz".into()))]).await, []);
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::Namespace("default".into()))]).await, []);
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::Namespace("ns-u1".into()))]).await, [Written::Applied]);
}

/// An idle project (no proxy) is watched with two watches, HTTPProxy and Namespace, and is whole
/// once they have listed: NetworkService, NetworkInterface and EndpointSlice are read only while
/// a proxy's backends need them. Before, every project had five watches, idle or not.
#[tokio::test]
async fn an_idle_project_is_watched_with_two_watches() {
    let idle: Vec<(&'static str, Option<Vec<Value>>)> = project(None, None)
        .into_iter()
        .map(|(p, items)| (p, if p == HTTPPROXIES { Some(vec![]) } else { items }))
        .collect();
    let h = start(idle, hub(vec![]));
    until("the idle project whole", || project_synced(&h) && h.producer.view.synced()).await;
    // The state that would act: whole, written (an empty record: nothing served).
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    let watched: std::collections::BTreeSet<String> =
        h.project_log.lock().expect("log").iter().filter(|s| s.is_watch()).map(|s| s.path().to_owned()).collect();
    assert_eq!(watched, [HTTPPROXIES, NAMESPACES].map(str::to_owned).into_iter().collect());
}

/// One name per project: a hub namespace whose project label names another project than the one
/// writing its record (a kubeconfig file named otherwise) is said and counted: the evidence for
/// its copies goes by the label, so they would never be deleted.
#[tokio::test]
async fn a_hub_namespace_labelled_for_another_project_is_counted() {
    let labelled = json!({"metadata": {"name": "ns-u1", "resourceVersion": "1",
        "labels": {"meta.datumapis.com/upstream-cluster-name": "cluster-other"}}});
    let h = start(project(None, None), vec![(NAMESPACES, Some(vec![labelled])), (RECORDS, Some(vec![]))]);
    until("project and hub synced", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    assert!(h.producer.metrics.encode().contains("edgegate_producer_label_mismatches 1"));
}

/// The hub's record at `version`, naming `addresses`, with `annotations`.
fn hub_record(version: u64, addresses: &[&str], annotations: Value) -> Value {
    json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": "ns-u1", "resourceVersion": version.to_string(),
                     "annotations": annotations},
        "spec": {"addresses": addresses}})
}

/// A hub whose record watch the test drives: `patched` answers each PATCH (its number, from 1,
/// what was sent, and the record watch held open at that moment, if any: taken to send an event
/// on, which ends it, and the client watches again).
fn hub_driven(
    records: Vec<Value>,
    mut patched: impl FnMut(usize, &Seen, &mut Option<mock::Reply>, mock::Reply) + Send + 'static,
) -> (Client, Log) {
    let lists = hub(records);
    let mut record_watch = None;
    let mut held = Vec::new();
    let mut patches = 0;
    mock::serve(move |seen, send| match seen.method.as_str() {
        "GET" if seen.is_watch() && !seen.is_streaming_list() && seen.path() == RECORDS => record_watch = Some(send),
        "GET" if seen.is_watch() && !seen.is_streaming_list() => held.push(send),
        "GET" => match lists.iter().find(|(p, _)| *p == seen.path()) {
            Some((_, Some(items))) => send.send_response(initial_events(items)),
            _ => held.push(send),
        },
        "PATCH" => {
            patches += 1;
            patched(patches, seen, &mut record_watch, send);
        }
        "POST" => send.send_response(json_response(201, &seen.body)),
        _ => send.send_response(status(404)),
    })
}

/// What `h`'s view holds for ns-u1: addresses and resourceVersion.
fn viewed(h: &Harness) -> (Vec<String>, Option<String>) {
    let record = h.producer.view.record("ns-u1").unwrap_or_default();
    (record.addresses, record.version)
}

/// A write's answer arriving after the watch has shown a newer record (here a hand edit that
/// drops the served fd20::2, made just after the write) leaves the view at the newer record: the
/// view never moves back. Failed on e09eb79: the view took the write's addresses and version over
/// the watch's, compared every later answer with them, and never wrote fd20::2 again (the second
/// pass was `Unchanged`).
#[tokio::test]
async fn a_write_answered_after_a_newer_record_was_watched_does_not_pin_the_older_one() {
    // The first write's answer, held until the test has seen the view take the newer record.
    let first: Arc<Mutex<Option<(mock::Reply, Value)>>> = Arc::default();
    let held = Arc::clone(&first);
    let hub = hub_driven(vec![hub_record(3, &["fd20::1"], json!({}))], move |n, seen, watch, send| {
        let mut ours = seen.body.clone();
        ours["metadata"]["resourceVersion"] = json!((3 + 2 * n - 1).to_string());
        if let Some(watch) = watch.take().filter(|_| n == 1) {
            // rv 4 is ours; rv 5 another writer's, seen on the watch before our answer arrives.
            watch.send_response(watch_event("MODIFIED", &hub_record(5, &["fd20::1"], json!({}))));
            *held.lock() = Some((send, ours));
        } else {
            send.send_response(json_response(200, &ours));
        }
    });
    let h = start_with(project(None, None), hub);
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    until("the record watch open", || {
        h.hub_log.lock().expect("log").iter().any(|s| s.path() == RECORDS && s.is_watch() && !s.is_streaming_list())
    })
    .await;
    let answered = async {
        until("the newer record watched", || viewed(&h).1.as_deref() == Some("5")).await;
        let (send, ours) = first.lock().take().expect("the first write, held");
        send.send_response(json_response(200, &ours));
    };
    let (written, ()) = tokio::join!(h.producer.pass(&[Trigger::Hub(Change::All)]), answered);
    assert_eq!(written, [Written::Applied]);
    assert_eq!(viewed(&h), (vec!["fd20::1".to_owned()], Some("5".to_owned())), "the newer record, not ours");
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied], "fd20::2 written again");
    let patches: Vec<Seen> = h.hub_log.lock().expect("log").iter().filter(|s| s.method == "PATCH").cloned().collect();
    assert_eq!(patches.len(), 2);
    assert_eq!(patches[1].body["metadata"]["resourceVersion"], json!("5"), "based on the newer record");
    assert_eq!(patches[1].body["spec"]["addresses"], json!(["fd20::1", "fd20::2"]));
    assert_eq!(viewed(&h), (vec!["fd20::1".to_owned(), "fd20::2".to_owned()], Some("6".to_owned())));
}

/// A 409 is told by its `Status`, never its message (tests/fixtures/hub/: bodies captured with
/// curl from the test kube-apiserver, v1.36.3): a server-side apply's field manager conflict has
/// causes of reason `FieldManagerConflict`; the optimistic lock's ("the object has been
/// modified") has none; anything else is retried. The classification is new (e09eb79 read the
/// message); `each_refusal_is_acted_on_as_its_status_says` is the behaviour that failed there.
#[test]
fn a_refusal_is_told_by_its_status_not_its_message() {
    use edgegate_producer::outcome::Refusal;
    let read = |body: &str| -> kube::core::Status { serde_json::from_str(body).expect("a Status") };
    let reworded = |mut status: kube::core::Status, message: &str| {
        status.message = message.to_owned();
        status
    };
    let managers = read(include_str!("fixtures/hub/conflict-field-managers.json"));
    let stale = read(include_str!("fixtures/hub/conflict-stale.json"));
    let rows = [
        (managers.clone(), Refusal::FieldManagers),
        (stale.clone(), Refusal::Stale),
        (reworded(managers, "the object has been modified"), Refusal::FieldManagers),
        (reworded(stale, "Apply failed with 1 conflict"), Refusal::Stale),
        (read(include_str!("fixtures/hub/already-exists.json")), Refusal::Other),
        (
            serde_json::from_value(
                json!({"code": 409, "reason": "Conflict", "details": {"causes": [{"reason": "FieldValueInvalid"}]}}),
            )
            .expect("status"),
            Refusal::Other,
        ),
        (serde_json::from_value(json!({"code": 409})).expect("status"), Refusal::Other),
        (serde_json::from_value(json!({"code": 500, "reason": "Conflict"})).expect("status"), Refusal::Other),
    ];
    for (status, refusal) in rows {
        assert_eq!(Refusal::of(&status), refusal, "{status:?}");
    }
}

/// Another field manager owns the record, names fd20::dead (which edgegate cannot vouch for)
/// and lacks the served fd20::2: the producer puts fd20::2 back beside fd20::dead, forced, and
/// keeps fd20::dead from then on (annotated) however short `--withdraw-after` is, until the other
/// writer or an operator removes it from the record. Failed on e09eb79: the forced restore made
/// the producer the list's owner, and its next write dropped fd20::dead as a withdrawal.
#[tokio::test]
async fn a_restore_keeps_what_another_writer_named() {
    let theirs = hub_record(3, &["fd20::1", "fd20::dead"], json!({}));
    let conflict: Value =
        serde_json::from_str(include_str!("fixtures/hub/conflict-field-managers.json")).expect("a Status");
    let hub = hub_driven(vec![theirs], move |n, seen, _watch, send| {
        if n == 1 {
            send.send_response(json_response(409, &conflict));
        } else {
            let mut ours = seen.body.clone();
            ours["metadata"]["resourceVersion"] = json!((3 + n).to_string());
            send.send_response(json_response(200, &ours));
        }
    });
    let h = start_with(project(None, None), hub);
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    let patches =
        || -> Vec<Seen> { h.hub_log.lock().expect("log").iter().filter(|s| s.method == "PATCH").cloned().collect() };
    let sent = patches();
    assert_eq!(sent.len(), 2, "the apply, then the restore");
    assert!(!sent[0].uri.contains("force=true") && sent[1].uri.contains("force=true"));
    assert_eq!(sent[1].body["spec"]["addresses"], json!(["fd20::1", "fd20::2", "fd20::dead"]));
    // withdraw-after is zero here: a withdrawal would be written at once.
    for _ in 0..3 {
        assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Unchanged], "fd20::dead kept");
    }
    assert_eq!(patches().len(), 2);
    // Kept across restarts and handovers: the record says so itself.
    assert_eq!(sent[1].body["metadata"]["annotations"]["edgegate.datumapis.com/kept-addresses"], json!("fd20::dead"));
}

/// What the producer does with each refusal of its apply (the record lacks the served fd20::2):
/// a field manager's conflict, however worded, puts the served address back (forced); a stale
/// resourceVersion waits for the watch; any other 409 is a failed write, retried after a backoff,
/// and never forces anything. Failed on e09eb79: a field manager's conflict worded as the
/// optimistic lock's was skipped as stale, and an `AlreadyExists` 409 forced a restore.
#[tokio::test]
async fn each_refusal_is_acted_on_as_its_status_says() {
    let managers: Value =
        serde_json::from_str(include_str!("fixtures/hub/conflict-field-managers.json")).expect("a Status");
    let mut reworded = managers.clone();
    reworded["message"] = json!("Operation cannot be fulfilled: the object has been modified");
    let stale: Value = serde_json::from_str(include_str!("fixtures/hub/conflict-stale.json")).expect("a Status");
    let exists: Value = serde_json::from_str(include_str!("fixtures/hub/already-exists.json")).expect("a Status");
    let rows = [
        (managers, Written::Applied, true),
        (reworded, Written::Applied, true),
        (stale, Written::Skipped, false),
        (exists, Written::Error, false),
    ];
    for (refusal, written, forced) in rows {
        let record = hub_record(3, &["fd20::1"], json!({}));
        let hub = hub_driven(vec![record], move |_, seen, _, send| {
            if seen.uri.contains("force=true") {
                send.send_response(json_response(200, &seen.body));
            } else {
                send.send_response(json_response(409, &refusal));
            }
        });
        let h = start_with(project(None, None), hub);
        until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
        let reason = h.producer.pass(&[Trigger::Hub(Change::All)]).await;
        let log = h.hub_log.lock().expect("log").clone();
        let sent_forced = log.iter().any(|s| s.method == "PATCH" && s.uri.contains("force=true"));
        assert_eq!((reason, sent_forced), (vec![written], forced), "{log:?}");
    }
}

/// A restore keeps only what the other writer alone named: an address the producer itself is
/// withdrawing (held since an earlier look, here fd20::9) is put back with the rest but not kept,
/// so it still leaves once `--withdraw-after` has passed. As a review of the first version found
/// (it kept every address the answer lacked, the producer's own withdrawals included).
#[tokio::test]
async fn a_restore_does_not_keep_the_producers_own_withdrawals() {
    use edgegate::core::plan::Scope;
    let conflict: Value =
        serde_json::from_str(include_str!("fixtures/hub/conflict-field-managers.json")).expect("a Status");
    let hub = hub_driven(vec![hub_record(3, &["fd20::1", "fd20::9"], json!({}))], move |n, seen, _, send| {
        if n == 1 {
            send.send_response(json_response(409, &conflict));
        } else {
            send.send_response(json_response(200, &seen.body));
        }
    });
    let mut h = start_with(project(None, None), hub);
    h.producer.withdrawals = Mutex::new(Hold::new(Duration::from_secs(60)));
    let earlier = edgegate::index::clock::now();
    let ours = ("ns-u1".to_owned(), "fd20::9".to_owned());
    h.producer.withdrawals.lock().observe(earlier, &Scope::Namespace("ns-u1".into()), [ours]);
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    assert_eq!(h.producer.pass(&[Trigger::Hub(Change::All)]).await, [Written::Applied]);
    let sent: Vec<Seen> = h.hub_log.lock().expect("log").iter().filter(|s| s.method == "PATCH").cloned().collect();
    assert_eq!(sent.len(), 2, "the apply, then the restore");
    assert_eq!(sent[1].body["spec"]["addresses"], json!(["fd20::1", "fd20::2", "fd20::9"]));
    assert_eq!(sent[1].body["metadata"]["annotations"], Value::Null, "nothing kept: {}", sent[1].body);
}

/// Writes run on the work queue: the first record's write hangs (the hub never answers it), and
/// the other namespace's record is written meanwhile. Failed before the queue: one pass wrote
/// every namespace in turn, so a write that hung held up every other one.
#[tokio::test]
async fn a_hung_write_holds_up_its_own_namespace_only() {
    let mut lists = project(None, None);
    let namespaces = lists.iter_mut().find(|(p, _)| *p == NAMESPACES).expect("namespaces");
    namespaces.1 = Some(vec![
        json!({"metadata": {"name": "p", "uid": "u1", "resourceVersion": "1"}}),
        json!({"metadata": {"name": "q", "uid": "u2", "resourceVersion": "1"}}),
    ]);
    let hub_namespaces = vec![json!({"metadata": {"name": "ns-u1"}}), json!({"metadata": {"name": "ns-u2"}})];
    // The hub, but the first PATCH it gets is never answered.
    let hung: Arc<Mutex<Vec<mock::Reply>>> = Arc::default();
    let hub = mock::serve({
        let hung = Arc::clone(&hung);
        let lists = [(NAMESPACES, hub_namespaces), (RECORDS, vec![])];
        let mut open = Vec::new();
        move |seen, send| match seen.method.as_str() {
            "GET" if seen.is_watch() && !seen.is_streaming_list() => open.push(send),
            "GET" => match lists.iter().find(|(p, _)| *p == seen.path()) {
                Some((_, items)) => send.send_response(initial_events(items)),
                None => open.push(send),
            },
            "PATCH" if hung.lock().is_empty() => hung.lock().push(send),
            _ => send.send_response(json_response(200, &seen.body)),
        }
    });
    let h = start_with(lists, hub);
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    let Harness { producer, hub_log, .. } = h;
    let triggers = Dirty::default();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(producer.run(triggers.clone(), None, Duration::from_secs(3600), 2, shutdown.clone()));
    triggers.mark(Trigger::Hub(Change::All));
    let patched = || -> std::collections::BTreeSet<String> {
        let log = hub_log.lock().expect("log");
        log.iter().filter(|s| s.method == "PATCH").map(|s| s.path().to_owned()).collect()
    };
    until("both namespaces' writes sent", || patched().len() >= 2).await;
    assert_eq!(patched().len(), 2, "ns-u1's and ns-u2's: {:?}", patched());
    assert_eq!(hung.lock().len(), 1, "one write hangs, the other was answered");
    shutdown.cancel();
    running.await.expect("the producer stops");
}

/// A write the hub refuses (500) is tried again, that namespace alone, after its backoff (2 s,
/// plus up to as much again): the work queue's retry, as the old doubling wait was.
#[tokio::test]
async fn a_failed_write_is_tried_again_after_its_backoff() {
    let h = start_with(project(None, None), serve_with(hub(vec![]), |_| status(500)));
    until("the project and the hub listed", || project_synced(&h) && h.producer.view.synced()).await;
    let Harness { producer, hub_log, .. } = h;
    // No trigger sent: the resync's first tick, at once, asks for every namespace.
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(producer.run(Dirty::default(), None, Duration::from_secs(3600), 2, shutdown.clone()));
    let patches = || -> usize { hub_log.lock().expect("log").iter().filter(|s| s.method == "PATCH").count() };
    until("the first write", || patches() >= 1).await;
    let again = mock::until("the write tried again", Duration::from_secs(8), || patches() >= 2).await;
    assert!(again >= Duration::from_millis(1900), "after its backoff: {again:?}");
    shutdown.cancel();
    running.await.expect("the producer stops");
}
