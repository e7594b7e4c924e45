//! The project control plane's side of the soak: its objects as the churn writes them, and the
//! checker's own reading of which addresses they serve. This reading is written from the
//! producer's contract (docs/producer.md), not from edgegate's code, so the checker can catch
//! the producer being wrong: a proxy's `networkService` backends → that NetworkService's
//! `matchLabels` selector → the `Bound` NetworkInterfaces it picks → their addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

pub const KINDS: [(&str, &str); 3] =
    [("HTTPProxy", "httpproxies"), ("NetworkService", "networkservices"), ("NetworkInterface", "networkinterfaces")];

pub fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("networking.datumapis.com", "v1alpha", kind), plural)
}

/// Create or replace a project object by server-side apply.
pub async fn put(client: &Client, ns: &str, kind: &str, name: &str, body: Value) -> Result<(), kube::Error> {
    let plural = KINDS.iter().find(|(k, _)| *k == kind).map_or("", |(_, p)| p);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind, plural));
    let mut object = body;
    object["apiVersion"] = json!("networking.datumapis.com/v1alpha");
    object["kind"] = json!(kind);
    object["metadata"]["name"] = json!(name);
    object["metadata"]["namespace"] = json!(ns);
    api.patch(name, &PatchParams::apply("soak-churn").force(), &Patch::Apply(&object)).await.map(|_| ())
}

pub async fn remove(client: &Client, ns: &str, kind: &str, name: &str) -> Result<(), kube::Error> {
    let plural = KINDS.iter().find(|(k, _)| *k == kind).map_or("", |(_, p)| p);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind, plural));
    api.delete(name, &DeleteParams::default()).await.map(|_| ())
}

pub fn interface(app: &str, phase: &str, address: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}},
        "spec": {"addresses": [{"address": address}]},
        "status": {"phase": phase}})
}

pub fn service(app: &str) -> Value {
    json!({"spec": {"networkInterfaces": {"selector": {"matchLabels": {"app": app}}}}})
}

pub fn proxy(services: &[&str]) -> Value {
    let backends: Vec<Value> = services.iter().map(|s| json!({"networkService": {"name": s, "port": 80}})).collect();
    json!({"spec": {"hostnames": ["soak.example"], "rules": [{"backends": backends}]}})
}

/// The project's objects of one namespace, as last seen.
#[derive(Default)]
pub struct Objects {
    pub proxies: Vec<DynamicObject>,
    pub services: Vec<DynamicObject>,
    pub interfaces: Vec<DynamicObject>,
}

fn labels_match(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    match selector.get("matchLabels").and_then(Value::as_object) {
        Some(wanted) => wanted.iter().all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str()),
        None => selector.as_object().is_some_and(serde_json::Map::is_empty),
    }
}

/// The addresses one namespace serves.
pub fn served(objects: &Objects) -> BTreeSet<String> {
    let mut served = BTreeSet::new();
    for proxy in objects.proxies.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let rules = proxy.data["spec"]["rules"].as_array().cloned().unwrap_or_default();
        for backend in rules.iter().flat_map(|r| r["backends"].as_array().cloned().unwrap_or_default()) {
            let Some(name) = backend["networkService"]["name"].as_str() else { continue };
            let Some(service) = objects.services.iter().find(|s| s.metadata.name.as_deref() == Some(name)) else {
                continue;
            };
            let Some(selector) = service.data["spec"]["networkInterfaces"].get("selector") else { continue };
            for interface in &objects.interfaces {
                let labels = interface.metadata.labels.clone().unwrap_or_default();
                if interface.data["status"]["phase"] != "Bound" || !labels_match(selector, &labels) {
                    continue;
                }
                for address in interface.data["spec"]["addresses"].as_array().into_iter().flatten() {
                    let address = address["address"].as_str().unwrap_or_default();
                    let address = address.split('/').next().unwrap_or_default();
                    if !address.is_empty() {
                        served.insert(address.to_owned());
                    }
                }
            }
        }
    }
    served
}

/// The pods a namespace has: each Bound interface's name and first address (the cell publishes
/// one copy per pod).
pub fn pods(objects: &Objects) -> BTreeMap<String, String> {
    objects
        .interfaces
        .iter()
        .filter(|i| i.data["status"]["phase"] == "Bound")
        .filter_map(|i| {
            let address = i.data["spec"]["addresses"][0]["address"].as_str()?.split('/').next()?.to_owned();
            Some((i.metadata.name.clone()?, address))
        })
        .collect()
}

/// The harness's own watch of the project (kube-rs reflectors, nothing of edgegate's): every
/// namespace's objects, by the hub namespace its copies and record live in (`ns-<uid>`).
#[derive(Clone)]
pub struct ProjectView {
    namespaces: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Namespace>,
    kinds: Vec<kube::runtime::reflector::Store<DynamicObject>>,
    pub lag: Arc<Mutex<Lag>>,
}

/// How far behind the project the view runs: for each change it receives, now less the object's
/// newest `managedFields` time (which the API server stamps, to the second). A view that trails
/// the project by seconds would flag withdrawals the producer timed right: the report says
/// whether it did.
#[derive(Default)]
pub struct Lag {
    /// Changes received, and the most any of them trailed.
    pub changes: u64,
    pub max: Duration,
    /// When each change that trailed by more than [`LATE`] arrived, and by how much.
    pub late: Vec<(Instant, Duration)>,
}

/// More than the stamp's own resolution (1 s) and a loaded machine's delay.
pub const LATE: Duration = Duration::from_millis(2500);

fn note_lag(lag: &Mutex<Lag>, meta: &ObjectMeta) {
    let newest =
        meta.managed_fields.iter().flatten().filter_map(|f| f.time.as_ref()).map(|t| t.0.as_millisecond()).max();
    let Some(newest) = newest else { return };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    let trailed = Duration::from_millis(u64::try_from(now - newest).unwrap_or(0));
    let mut lag = lag.lock().expect("lag");
    lag.changes += 1;
    lag.max = lag.max.max(trailed);
    if trailed > LATE && lag.late.len() < 1000 {
        lag.late.push((Instant::now(), trailed));
    }
}

fn reflect<K>(api: Api<K>, writer: kube::runtime::reflector::store::Writer<K>, lag: Option<Arc<Mutex<Lag>>>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let stream = reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    tokio::spawn(stream.for_each(move |event| {
        // Only live changes: a (re-)list brings objects written long ago.
        if let (Some(lag), Ok(watcher::Event::Apply(object))) = (&lag, &event) {
            note_lag(lag, object.meta());
        }
        async {}
    }));
}

impl ProjectView {
    pub fn start(client: &Client) -> ProjectView {
        let (namespaces, writer) = kube::runtime::reflector::store();
        reflect(Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()), writer, None);
        let lag = Arc::<Mutex<Lag>>::default();
        let kinds = KINDS
            .iter()
            .map(|(kind, plural)| {
                let resource = resource(kind, plural);
                let writer = kube::runtime::reflector::store::Writer::new(resource.clone());
                let store = writer.as_reader();
                reflect(Api::<DynamicObject>::all_with(client.clone(), &resource), writer, Some(Arc::clone(&lag)));
                store
            })
            .collect();
        ProjectView { namespaces, kinds, lag }
    }

    /// Wait until every watch has listed once.
    pub async fn synced(&self) {
        let _ = self.namespaces.wait_until_ready().await;
        for store in &self.kinds {
            let _ = store.wait_until_ready().await;
        }
    }

    /// The objects of every live namespace, by hub namespace.
    pub fn snapshot(&self) -> BTreeMap<String, Objects> {
        let mut by_ns: BTreeMap<String, Objects> = BTreeMap::new();
        let mut hub_of = BTreeMap::new();
        for ns in self.namespaces.state() {
            if let (Some(name), Some(uid)) = (ns.metadata.name.clone(), ns.metadata.uid.clone())
                && ns.metadata.deletion_timestamp.is_none()
                && name.starts_with("soak-")
            {
                hub_of.insert(name, format!("ns-{uid}"));
                by_ns.insert(format!("ns-{uid}"), Objects::default());
            }
        }
        for (i, store) in self.kinds.iter().enumerate() {
            for object in store.state() {
                let Some(hub_ns) = object.metadata.namespace.as_ref().and_then(|ns| hub_of.get(ns)) else { continue };
                let Some(objects) = by_ns.get_mut(hub_ns) else { continue };
                let list = match i {
                    0 => &mut objects.proxies,
                    1 => &mut objects.services,
                    _ => &mut objects.interfaces,
                };
                list.push((*object).clone());
            }
        }
        by_ns
    }
}
