//! A stand-in for the cell: one copy on the hub for each pod (Bound interface) the project has,
//! written as the real cell writes back EndpointSlices: created, replaced when its address
//! changes, deleted when the pod goes; a refused write is requeued with a controller-runtime-style
//! per-item exponential backoff (5 ms doubling, capped at [`BACKOFF_CAP`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};

use super::project::{ProjectView, pods};
use crate::helpers::slice;

/// controller-runtime's default per-item backoff starts at 5 ms and doubles; its cap (1,000 s)
/// is beyond any soak, so the cell models a cap of 10 s.
pub const BACKOFF_CAP: Duration = Duration::from_secs(10);
const BACKOFF_START: Duration = Duration::from_millis(5);

/// One refused write.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub at: Instant,
    pub hub_ns: String,
    pub name: String,
    pub address: String,
    pub message: String,
}

/// What the cell did, for the checker and the report.
#[derive(Default)]
pub struct Ledger {
    pub written: u64,
    pub refusals: Vec<Refusal>,
    /// Writes that failed otherwise (the webhook unreachable: fail closed; the hub down).
    pub failed: u64,
    /// Copies the cell deleted itself (its pod went), by uid.
    pub deleted: std::collections::HashSet<String>,
}

pub type SharedLedger = Arc<Mutex<Ledger>>;

struct Backoff {
    next: Instant,
    delay: Duration,
}

/// Run the cell until `stop`; `copies` is the harness's view of the hub's copies.
pub async fn run(
    hub: Client,
    view: ProjectView,
    copies: kube::runtime::reflector::Store<EndpointSlice>,
    ledger: SharedLedger,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut backoff: HashMap<(String, String), Backoff> = HashMap::new();
    while !stop.is_cancelled() {
        let mut present: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut uids: BTreeMap<(String, String), String> = BTreeMap::new();
        for copy in copies.state() {
            let key =
                (copy.metadata.namespace.clone().unwrap_or_default(), copy.metadata.name.clone().unwrap_or_default());
            let address = copy
                .endpoints
                .as_ref()
                .and_then(|e| e.first())
                .and_then(|e| e.addresses.first())
                .cloned()
                .unwrap_or_default();
            uids.insert(key.clone(), copy.metadata.uid.clone().unwrap_or_default());
            present.insert(key, address);
        }
        let mut wanted: BTreeMap<(String, String), String> = BTreeMap::new();
        for (hub_ns, objects) in view.snapshot() {
            for (name, address) in pods(&objects) {
                wanted.insert((hub_ns.clone(), name), address);
            }
        }
        for (key, address) in &wanted {
            if present.get(key) == Some(address) {
                backoff.remove(key);
                continue;
            }
            if backoff.get(key).is_some_and(|b| b.next > Instant::now()) {
                continue;
            }
            let result = write(&hub, &key.0, &key.1, address, present.contains_key(key)).await;
            let mut ledger = ledger.lock().expect("ledger");
            match result {
                Ok(()) => {
                    ledger.written += 1;
                    backoff.remove(key);
                    continue;
                }
                Err(message) if message.contains("is not carried") => ledger.refusals.push(Refusal {
                    at: Instant::now(),
                    hub_ns: key.0.clone(),
                    name: key.1.clone(),
                    address: address.clone(),
                    message,
                }),
                Err(_) => ledger.failed += 1,
            }
            let delay = backoff.get(key).map_or(BACKOFF_START, |b| (b.delay * 2).min(BACKOFF_CAP));
            backoff.insert(key.clone(), Backoff { next: Instant::now() + delay, delay });
        }
        for key in present.keys().filter(|k| !wanted.contains_key(*k)) {
            // Noted before the call, by uid (this copy, not a later one of the same name): the
            // watch may tell the checker before the call returns. Preconditioned on that uid.
            let uid = uids.get(key).cloned().unwrap_or_default();
            ledger.lock().expect("ledger").deleted.insert(uid.clone());
            let api: Api<EndpointSlice> = Api::namespaced(hub.clone(), &key.0);
            let params = DeleteParams {
                preconditions: Some(kube::api::Preconditions { uid: Some(uid), resource_version: None }),
                ..DeleteParams::default()
            };
            let _ = api.delete(&key.1, &params).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Create the copy, or replace the one there (its address changed).
async fn write(hub: &Client, ns: &str, name: &str, address: &str, exists: bool) -> Result<(), String> {
    let api: Api<EndpointSlice> = Api::namespaced(hub.clone(), ns);
    let copy = slice(super::world::SCOPE, name, true, &[address]);
    let result = if exists {
        let patch = serde_json::json!({"endpoints": copy.endpoints});
        api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch)).await.map(|_| ())
    } else {
        api.create(&PostParams::default(), &copy).await.map(|_| ())
    };
    result.map_err(|e| e.to_string())
}
