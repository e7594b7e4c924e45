//! The elector (`runtime::lease`) against kube's `tower-test` mock API server holding one Lease:
//! a Lease that names this replica is renewed only when this process wrote it. A replica's name
//! comes back in a new process (a StatefulSet makes its Pod again under the same name; a container
//! restarts), and the process before it may still be inside its deadline, or wake from a pause
//! after its successor has taken over.

#[path = "support/mock.rs"]
mod mock;

use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegate::runtime::lease::{INSTANCE_ANNOTATION, Leadership, LeaseConfig, elect};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use mock::{Log, json_response, status, until};

const NAME: &str = "edgegate-producer-member-edgegate-producer-0";
const ME: &str = "edgegate-producer-0";
const DURATION: Duration = Duration::from_secs(2);

/// The Lease as another process named `ME` left it: renewed just now, at resourceVersion `version`.
fn written_by_another(version: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": "edgegate-system", "resourceVersion": version.to_string(),
                     "annotations": {INSTANCE_ANNOTATION: format!("another-{version}")}},
        "spec": {"holderIdentity": ME, "leaseDurationSeconds": 2,
                 "renewTime": jiff::Timestamp::now().to_string()},
    })
}

/// One Lease, as the API server keeps it: a GET returns it, a PUT replaces it at the next version
/// (a PUT of an older version gets 409), a release included.
fn serve(lease: Arc<Mutex<Value>>) -> (kube::Client, Log) {
    mock::serve(move |seen, send| {
        let mut stored = lease.lock();
        match seen.method.as_str() {
            "GET" => send.send_response(json_response(200, &stored)),
            "PUT" if seen.body["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"] => {
                let next = stored["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse::<u64>().ok());
                let mut written = seen.body.clone();
                written["metadata"]["resourceVersion"] = json!(next.unwrap_or(0).saturating_add(1).to_string());
                *stored = written.clone();
                send.send_response(json_response(200, &written));
            }
            "PUT" => send.send_response(status(409)),
            _ => send.send_response(status(404)),
        }
    })
}

fn start(client: &kube::Client, shutdown: &CancellationToken) -> Leadership {
    let config = LeaseConfig {
        name: NAME.into(),
        namespace: "edgegate-system".into(),
        identity: ME.into(),
        duration: DURATION,
        disabled: false,
        renewals: 4,
        annotations: None,
    };
    let (leadership, _task) = elect(client, &config, shutdown.clone());
    leadership
}

fn puts(log: &Log) -> usize {
    log.lock().expect("log").iter().filter(|s| s.method == "PUT").count()
}

/// A new process whose name holds the Lease (its predecessor's last renewal) waits, as for anyone
/// else's, until the Lease has gone unchanged for its duration, and two looks more (so that other
/// replicas count it gone first); only then does it take it.
#[tokio::test]
async fn a_lease_naming_this_replica_written_by_another_process_is_taken_only_once_expired() {
    let lease = Arc::new(Mutex::new(written_by_another(7)));
    let (client, log) = serve(Arc::clone(&lease));
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let leadership = start(&client, &shutdown);
    // The state that would act: the elector has read the Lease (several looks, one a second).
    until("the elector has looked twice", Duration::from_secs(10), || {
        log.lock().expect("log").iter().filter(|s| s.method == "GET").count() >= 2
    })
    .await;
    assert!(started.elapsed() < DURATION, "looked twice within the duration");
    assert_eq!(puts(&log), 0, "nothing written over a predecessor's Lease inside its duration");
    assert!(!leadership.is_leader(), "not leading on a predecessor's renewal");

    let taken = until("the Lease taken once expired", Duration::from_secs(15), || leadership.is_leader()).await;
    let taken = started.elapsed().max(taken);
    eprintln!("lease: a predecessor's Lease taken {taken:?} after start (its duration {DURATION:?}, and two looks)");
    // Looks every 500 ms (a quarter of the duration): two of them are 1 s.
    let bound = DURATION + Duration::from_secs(1);
    assert!(taken >= bound, "taken only after the Lease went unchanged for its duration and two looks: {taken:?}");
    let written = lease.lock().clone();
    assert_eq!(written["spec"]["holderIdentity"], ME);
    assert_ne!(written["metadata"]["annotations"][INSTANCE_ANNOTATION], "another-7", "written by this process");
    shutdown.cancel();
}

/// A process that leads and then finds the Lease written under its name by another process (its
/// successor, while it was paused) stops leading at once and writes nothing over it.
#[tokio::test]
async fn a_successor_of_the_same_name_ends_this_ones_leading_without_a_write() {
    let lease = Arc::new(Mutex::new(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": "edgegate-system", "resourceVersion": "3"},
        "spec": {"holderIdentity": null},
    })));
    let (client, log) = serve(Arc::clone(&lease));
    let shutdown = CancellationToken::new();
    let leadership = start(&client, &shutdown);
    until("leading on a released Lease", Duration::from_secs(10), || leadership.is_leader()).await;
    until("renewed once", Duration::from_secs(10), || puts(&log) >= 2).await;

    *lease.lock() = written_by_another(100);
    let writes = puts(&log);
    let ended = until("leading ended", Duration::from_secs(10), || !leadership.is_leader()).await;
    eprintln!("lease: leading ended {ended:?} after a successor wrote the Lease (renewals every 500 ms)");
    assert!(ended < Duration::from_secs(1), "at the next renewal, not at the deadline: {ended:?}");
    // Inside the successor's duration: nothing is written over it.
    tokio::time::sleep(DURATION / 2).await;
    assert_eq!(puts(&log), writes, "nothing written over the successor's Lease");
    assert_eq!(lease.lock()["metadata"]["annotations"][INSTANCE_ANNOTATION], "another-100");
    shutdown.cancel();
}
