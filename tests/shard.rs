//! Sharing (`runtime::shard`) against kube's `tower-test` mock API server keeping the namespace's
//! Leases: a list, a watch that shows every change, and GET, PUT (with the resourceVersion seen)
//! and POST of one Lease. This replica renews its member Lease through the real elector; the
//! other member's renewals are the test's.
//!
//! A handover waits for the record writes under way in its bucket, and for nothing else: the
//! sharing loop goes on meanwhile (the other releases, the takes), and the bucket is not taken
//! again while it waits.

#[path = "support/mock.rs"]
mod mock;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use edgegate::core::shard::{BUCKETS, Bucket, bucket, rank};
use edgegate::runtime::lease::elect;
use edgegate::runtime::shard::{Links, Ownership, READY_ANNOTATION, ShardConfig, share};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use mock::{Log, Reply, Seen, json_response, status, until};

const NAMESPACE: &str = "edgegate-system";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/edgegate-system/leases";
const PREFIX: &str = "edgegate-producer";
const ME: &str = "edgegate-producer-0";
const OTHER: &str = "edgegate-producer-1";
/// The member Leases' duration: a release that waited for a write as long as it once did (a
/// duration) is well outside the bounds below.
const DURATION: Duration = Duration::from_secs(8);
/// How soon a release or a take is seen, where the next look (one a second) makes it.
const SOON: Duration = Duration::from_secs(4);

fn bucket_lease(b: Bucket) -> String {
    format!("{PREFIX}-bucket-{b}")
}

fn member_lease(identity: &str) -> String {
    format!("{PREFIX}-member-{identity}")
}

/// The namespace's Leases as an API server keeps them: one resourceVersion counter, every change
/// kept as a watch event, and the watches waiting for the next one.
#[derive(Default)]
struct Server {
    version: u64,
    leases: BTreeMap<String, Value>,
    events: Vec<(u64, &'static str, Value)>,
    watches: Vec<(u64, Reply)>,
    /// What the other member says it is ready for, at its next renewal.
    other_ready: String,
}

impl Server {
    /// Store `lease` at the next resourceVersion, and show it to the watches.
    fn put(&mut self, mut lease: Value) -> Value {
        self.version += 1;
        let name = lease["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let kind = if self.leases.contains_key(&name) { "MODIFIED" } else { "ADDED" };
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        lease["metadata"]["namespace"] = json!(NAMESPACE);
        lease["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.leases.insert(name, lease.clone());
        self.events.push((self.version, kind, lease.clone()));
        for (since, reply) in std::mem::take(&mut self.watches) {
            self.watch(since, reply);
        }
        lease
    }

    /// Answer a watch from `since` with the events after it (the watch then ends, and the client
    /// watches again from the last), or keep it until there is one.
    fn watch(&mut self, since: u64, reply: Reply) {
        let mut lines = Vec::new();
        for (_, kind, object) in self.events.iter().filter(|(v, ..)| *v > since) {
            lines.extend(serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default());
            lines.push(b'\n');
        }
        if lines.is_empty() {
            self.watches.push((since, reply));
        } else {
            reply.send_response(http::Response::new(kube::client::Body::from(lines)));
        }
    }

    fn route(&mut self, seen: &Seen, reply: Reply) {
        let name = seen.path().strip_prefix(LEASES).and_then(|n| n.strip_prefix('/')).map(str::to_owned);
        let version = |lease: &Value| lease["metadata"]["resourceVersion"].clone();
        match (seen.method.as_str(), name) {
            ("GET", None) if seen.is_watch() => {
                let since = query(&seen.uri, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
                self.watch(since, reply);
            }
            ("GET", None) => reply.send_response(json_response(
                200,
                &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                        "metadata": {"resourceVersion": self.version.to_string()},
                        "items": self.leases.values().collect::<Vec<_>>()}),
            )),
            ("GET", Some(name)) => match self.leases.get(&name) {
                Some(lease) => reply.send_response(json_response(200, lease)),
                None => reply.send_response(not_found()),
            },
            ("PUT", Some(name)) => match self.leases.get(&name) {
                Some(stored) if version(stored) == version(&seen.body) => {
                    let written = self.put(seen.body.clone());
                    reply.send_response(json_response(200, &written));
                }
                Some(_) => reply.send_response(status(409)),
                None => reply.send_response(status(404)),
            },
            ("POST", None) => {
                let name = seen.body["metadata"]["name"].as_str().unwrap_or_default();
                if self.leases.contains_key(name) {
                    reply.send_response(status(409));
                } else {
                    let written = self.put(seen.body.clone());
                    reply.send_response(json_response(201, &written));
                }
            }
            _ => reply.send_response(status(404)),
        }
    }

    /// The other member renews its Lease, saying what it is ready for.
    fn renew_other(&mut self) {
        let ready = self.other_ready.clone();
        self.put(json!({
            "metadata": {"name": member_lease(OTHER), "annotations": {READY_ANNOTATION: ready}},
            "spec": {"holderIdentity": OTHER, "leaseDurationSeconds": DURATION.as_secs(),
                     "renewTime": jiff::Timestamp::now().to_string()},
        }));
    }
}

/// A 404 as the API server gives it (kube's `get_opt` reads its reason).
fn not_found() -> http::Response<kube::client::Body> {
    json_response(404, &json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound"}))
}

fn query<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    let query = uri.split_once('?')?.1;
    query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

/// Two buckets the other member ranks first for, the lower first.
fn others_buckets() -> (Bucket, Bucket) {
    let mut theirs = (0..BUCKETS).filter(|b| rank(*b, [ME, OTHER])[0] == OTHER);
    (theirs.next().expect("a bucket"), theirs.next().expect("two buckets"))
}

/// A project in bucket `b`.
fn project_in(b: Bucket) -> String {
    (0..).map(|i| format!("project-{i}")).find(|p| bucket(p) == b).expect("a project")
}

struct Harness {
    server: Arc<Mutex<Server>>,
    log: Log,
    ownership: Ownership,
    shutdown: CancellationToken,
    _links: (watch::Receiver<BTreeSet<Bucket>>, watch::Sender<bool>),
}

impl Harness {
    /// This replica sharing; every fence names the other member but `mine`'s, which name this
    /// replica (from an earlier run: taken again at its first look); the other member renews its
    /// Lease every half second.
    fn start(mine: &[Bucket]) -> Harness {
        let server = Arc::new(Mutex::new(Server::default()));
        {
            let mut s = server.lock();
            s.renew_other();
            for b in 0..BUCKETS {
                let holder = if mine.contains(&b) { ME } else { OTHER };
                s.put(json!({"metadata": {"name": bucket_lease(b)},
                             "spec": {"holderIdentity": holder, "leaseDurationSeconds": DURATION.as_secs()}}));
            }
        }
        let routed = Arc::clone(&server);
        let (client, log) = mock::serve(move |seen, reply| routed.lock().route(seen, reply));
        let shutdown = CancellationToken::new();
        let renewing = Arc::clone(&server);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                renewing.lock().renew_other();
            }
        });
        let config = ShardConfig {
            namespace: NAMESPACE.into(),
            identity: ME.into(),
            duration: DURATION,
            prefix: PREFIX.into(),
            unfenced: false,
        };
        let (ready, annotations) = watch::channel(BTreeMap::new());
        let (member, _elector) = elect(&client, &config.member_lease(annotations), shutdown.clone());
        let (engage, engaged) = watch::channel(BTreeSet::new());
        let (leave, leaving) = watch::channel(false);
        let warm: edgegate::runtime::shard::Warm = Arc::new(|b: &BTreeSet<Bucket>| b.clone());
        let ownership = share(&client, config, member, Links { ready, engage, warm, leaving }, &shutdown);
        Harness { server, log, ownership, shutdown, _links: (engaged, leave) }
    }

    /// The other member says, from its next renewal (now), that it is ready for `buckets`.
    fn other_ready(&self, buckets: &[Bucket]) {
        let mut server = self.server.lock();
        server.other_ready = buckets.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        server.renew_other();
    }

    /// The fence writes this replica sent for `b`: the holder each named (`None`: a release).
    fn fence_writes(&self, b: Bucket) -> Vec<Option<String>> {
        let path = format!("{LEASES}/{}", bucket_lease(b));
        let log = self.log.lock().expect("log");
        let writes = log.iter().filter(|s| s.method == "PUT" && s.path() == path);
        writes.map(|s| s.body["spec"]["holderIdentity"].as_str().map(str::to_owned)).collect()
    }

    fn released(&self, b: Bucket) -> bool {
        self.fence_writes(b).contains(&None)
    }
}

/// Two buckets to hand over, a record write under way in the first: the second is released at
/// the next look, not after the write (nor after a Lease duration); the first is not taken again
/// while it waits, no write starts in it, and it is released at the look after the write ends.
#[tokio::test]
async fn a_release_waiting_for_a_write_holds_up_nothing_else_and_is_not_taken_again() {
    let (a, b) = others_buckets();
    let h = Harness::start(&[a, b]);
    let took = until("both fences taken again", Duration::from_secs(12), || {
        h.ownership.holds_bucket(a) && h.ownership.holds_bucket(b)
    })
    .await;
    let project = project_in(a);
    let (writing, _deadline) = h.ownership.writing(&project).expect("a record write in a held bucket");
    assert_eq!(h.fence_writes(a), [Some(ME.to_owned())], "taken once");

    h.other_ready(&[a, b]);
    let other = until("the other bucket released", SOON, || h.released(b)).await;
    eprintln!(
        "shard: fences taken {took:?} after start; the other bucket released {other:?} after its owner was ready"
    );
    assert!(!h.ownership.holds_bucket(a) && h.ownership.writing(&project).is_none(), "no write starts in it");
    assert!(h.ownership.held().contains(&a), "still held, its fence not cleared: {:?}", h.ownership.held());

    // Three looks with the write under way: nothing written for its fence, neither a release
    // nor a take.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.fence_writes(a), [Some(ME.to_owned())], "neither released nor taken again while written");
    assert!(!h.ownership.holds_bucket(a));

    drop(writing);
    let after = until("the bucket released once its write ended", SOON, || h.released(a)).await;
    eprintln!("shard: the bucket under write released {after:?} after the write ended");
    assert_eq!(h.fence_writes(a), [Some(ME.to_owned()), None], "taken, then released: nothing between");
    assert!(!h.ownership.held().contains(&a) && !h.ownership.held().contains(&b), "{:?}", h.ownership.held());
    h.shutdown.cancel();
}

/// A handover waiting for a write, its owner no longer ready: it is abandoned, the bucket held
/// again as it was (writes start again) without a fence write, and not released once the write
/// ends.
#[tokio::test]
async fn a_handover_abandoned_while_a_write_is_under_way_keeps_the_bucket() {
    let (a, _) = others_buckets();
    let h = Harness::start(&[a]);
    until("the fence taken again", Duration::from_secs(12), || h.ownership.holds_bucket(a)).await;
    let project = project_in(a);
    let (writing, _deadline) = h.ownership.writing(&project).expect("a record write in a held bucket");

    h.other_ready(&[a]);
    until("being released", SOON, || !h.ownership.holds_bucket(a)).await;
    h.other_ready(&[]);
    let kept = until("held again", SOON, || h.ownership.holds_bucket(a)).await;
    eprintln!("shard: the handover abandoned {kept:?} after its owner was no longer ready");
    let again = h.ownership.writing(&project).expect("writes start again");
    drop((writing, again));
    // Two looks with no write under way: nothing to release.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.fence_writes(a), [Some(ME.to_owned())], "taken once, neither released nor taken again");
    assert!(h.ownership.holds_bucket(a));
    h.shutdown.cancel();
}
