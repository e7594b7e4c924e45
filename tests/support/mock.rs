//! kube's `tower-test` mock as an API server the mock suites (pruner, producer) share: every
//! request is logged as it was seen, answered by the suite's own routing, and can be checked
//! against the RBAC rules the binary ships with.

#![allow(dead_code)] // each suite uses its part
use std::sync::{Arc, Mutex};

use edgegate::runtime::rbac::{Rule, allows};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::SendResponse;

/// One request as the mock saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub uri: String,
    pub body: Value,
}

impl Seen {
    pub fn is(&self, method: &str, path_prefix: &str) -> bool {
        self.method == method && self.uri.starts_with(path_prefix)
    }

    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or_default()
    }

    pub fn is_watch(&self) -> bool {
        self.uri.contains("watch=true")
    }

    /// A streaming list: a watch that begins with the objects there are.
    pub fn is_streaming_list(&self) -> bool {
        self.is_watch() && self.uri.contains("sendInitialEvents=true")
    }
}

pub type Log = Arc<Mutex<Vec<Seen>>>;
pub type Reply = SendResponse<Response<Body>>;

/// A client whose API server is `route`: it gets each request as seen (already logged) and the
/// means to answer it, now, later, or never (a watch held open, a list still running).
pub fn serve(mut route: impl FnMut(&Seen, Reply) + Send + 'static) -> (Client, Log) {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let entry = Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            seen.lock().expect("log").push(entry.clone());
            route(&entry, send);
        }
    });
    (Client::new(mock, "default"), log)
}

/// A JSON answer.
pub fn json_response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(body).unwrap_or_default()))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// A `Status` answer with this code.
pub fn status(code: u16) -> Response<Body> {
    json_response(code, &json!({"kind": "Status", "apiVersion": "v1", "code": code}))
}

/// A list of `items` at resourceVersion 10.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "10"}, "items": items})
}

/// A streaming list's answer, as an API server that offers them gives it: each of `items` added,
/// then the bookmark that ends the list (at resourceVersion 10); the watch itself then ends, and
/// the client resumes from the bookmark.
pub fn initial_events(items: &[Value]) -> Response<Body> {
    let mut lines = Vec::new();
    let end = json!({"kind": "Bookmark", "apiVersion": "v1",
        "metadata": {"resourceVersion": "10", "annotations": {"k8s.io/initial-events-end": "true"}}});
    let events = items.iter().map(|item| json!({"type": "ADDED", "object": item}));
    for event in events.chain([json!({"type": "BOOKMARK", "object": end})]) {
        lines.extend(serde_json::to_vec(&event).unwrap_or_default());
        lines.push(b'\n');
    }
    Response::new(Body::from(lines))
}

/// One watch event as the API server streams it (a JSON line).
pub fn watch_event(kind: &str, object: &Value) -> Response<Body> {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Response::new(Body::from(line))
}

/// The RBAC (group, resource, verb) a request needs.
pub fn rbac_of(call: &Seen) -> (String, String, &'static str) {
    let path = call.path();
    let (group, rest) = match path.strip_prefix("/api/v1/") {
        Some(rest) => (String::new(), rest.split('/').collect::<Vec<_>>()),
        None => {
            let parts: Vec<&str> = path.trim_start_matches("/apis/").split('/').collect();
            (parts[0].to_owned(), parts.get(2..).unwrap_or_default().to_vec())
        }
    };
    let (resource, named) = match rest.as_slice() {
        ["namespaces", _, resource, _name, ..] => (*resource, true),
        ["namespaces", _, resource] => (*resource, false),
        [resource, _name, ..] => (*resource, true),
        [resource] => (*resource, false),
        [] => ("", false),
    };
    let verb = match (call.method.as_str(), named, call.is_watch()) {
        ("GET", false, true) => "watch",
        ("GET", false, false) => "list",
        ("GET", true, _) => "get",
        ("POST", ..) => "create",
        ("PUT", ..) => "update",
        ("PATCH", ..) => "patch",
        ("DELETE", ..) => "delete",
        _ => "unknown",
    };
    (group, resource.to_owned(), verb)
}

/// Every call in `log` is allowed by `rules` (named `which` in the failure).
pub fn assert_within(log: &Log, rules: &[Rule], which: &str) {
    for call in log.lock().expect("log").iter() {
        let (group, resource, verb) = rbac_of(call);
        assert!(allows(rules, &group, &resource, verb), "{call:?} is not in rbac::{which}");
    }
}

/// Wait until `done`, at most `bound` (the failure names `what`); returns how long it took.
pub async fn until(what: &str, bound: std::time::Duration, mut done: impl FnMut() -> bool) -> std::time::Duration {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < bound, "{what}: not within {bound:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    start.elapsed()
}
