//! The project control plane's side of the soak: its objects as the churn writes them, and the
//! checker's own reading of which addresses they serve. This reading is written from the
//! producer's contract (docs/producer.md), not from edgegate's code, so the checker can catch
//! the producer being wrong: a proxy's `networkService` backends → that NetworkService's
//! `matchLabels` selector → the `Bound` NetworkInterfaces it picks → their addresses.

use std::collections::{BTreeMap, BTreeSet};

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
}

fn reflect<K>(api: Api<K>, writer: kube::runtime::reflector::store::Writer<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let stream = reflector(writer, watcher(api, watcher::Config::default()).default_backoff()).touched_objects();
    tokio::spawn(stream.for_each(|_| async {}));
}

impl ProjectView {
    pub fn start(client: &Client) -> ProjectView {
        let (namespaces, writer) = kube::runtime::reflector::store();
        reflect(Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()), writer);
        let kinds = KINDS
            .iter()
            .map(|(kind, plural)| {
                let resource = resource(kind, plural);
                let writer = kube::runtime::reflector::store::Writer::new(resource.clone());
                let store = writer.as_reader();
                reflect(Api::<DynamicObject>::all_with(client.clone(), &resource), writer);
                store
            })
            .collect();
        ProjectView { namespaces, kinds }
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
