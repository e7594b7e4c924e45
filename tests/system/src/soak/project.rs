//! The project control plane's side of the soak: its objects as the churn writes them, and the
//! checker's own reading of which addresses they serve. This reading is written from the
//! producer's contract (docs/producer.md), not from edgegate's code, so the checker can catch
//! the producer being wrong: a proxy's `networkService` backends → that NetworkService's
//! `matchLabels` selector → the `Bound` NetworkInterfaces it picks → their addresses.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

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
    // In the soak's project, as Milo scopes it (the stand-in serves a project what is labelled so).
    if let Some(project) = super::world::project_of(ns) {
        object["metadata"]["labels"][crate::milo::PROJECT_LABEL] = json!(project);
    }
    let sent = Sent::sending(kind, ns, name);
    let written = api.patch(name, &PatchParams::apply("soak-churn").force(), &Patch::Apply(&object)).await;
    sent.answered(written.as_ref().ok().and_then(|o| o.metadata.resource_version.clone()));
    written.map(|_| ())
}

pub async fn remove(client: &Client, ns: &str, kind: &str, name: &str) -> Result<(), kube::Error> {
    let plural = KINDS.iter().find(|(k, _)| *k == kind).map_or("", |(_, p)| p);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind, plural));
    let sent = Sent::sending(kind, ns, name);
    let removed = api.delete(name, &DeleteParams::default()).await;
    // Only a deletion done: one of an object already gone has no event, and its entry would date
    // a later deletion of that name (with its namespace) to this sending.
    sent.answered(removed.is_ok().then(|| DELETED.to_owned()));
    removed.map(|_| ())
}

/// (kind, namespace, name) of a project object.
type ObjectKey = (String, String, String);

/// Stands for a deletion's resourceVersion in [`SENT`]: a Delete event is matched by object.
const DELETED: &str = "deleted";

/// When each of the churn's writes was sent, so the view dates each change it receives to the
/// moment it was sent: the earliest anyone, the producer included, could have seen it. Without
/// this, a view trailing the project by half a second on a loaded machine takes a withdrawal
/// timed right by the producer for one made too early.
#[derive(Default)]
struct SentLog {
    /// Writes in flight: an event may arrive before the write's answer.
    pending: HashMap<ObjectKey, Instant>,
    /// Writes answered, by object and the resourceVersion they made ([`DELETED`] for a deletion).
    answered: HashMap<(ObjectKey, String), Instant>,
}

static SENT: LazyLock<Mutex<SentLog>> = LazyLock::new(Mutex::default);

/// How long an answered write waits for its event (a write that changed nothing has none).
const KEEP_SENT: Duration = Duration::from_secs(60);

/// One write of the churn's, from its sending to its answer.
struct Sent {
    key: ObjectKey,
    at: Instant,
}

impl Sent {
    fn sending(kind: &str, ns: &str, name: &str) -> Sent {
        let (key, at) = ((kind.to_owned(), ns.to_owned(), name.to_owned()), Instant::now());
        SENT.lock().expect("sent").pending.insert(key.clone(), at);
        Sent { key, at }
    }

    /// `version`: the resourceVersion the write made, if it was answered with one.
    fn answered(self, version: Option<String>) {
        let mut log = SENT.lock().expect("sent");
        log.pending.remove(&self.key);
        match version {
            // The object is gone: a Delete event to come is this deletion's.
            Some(version) if version == DELETED => {
                log.answered.insert((self.key, version), self.at);
            }
            Some(version) => {
                // It exists again: an earlier deletion's event came, or never will (the watch
                // relisted across it); that entry must not date a later deletion.
                log.answered.remove(&(self.key.clone(), DELETED.to_owned()));
                // A write that changed nothing answers with the version an earlier one made:
                // that one's sending dates the change.
                log.answered.entry((self.key, version)).or_insert(self.at);
            }
            None => {}
        }
        log.answered.retain(|_, at| at.elapsed() < KEEP_SENT);
    }

    /// When the write that made `object`'s change (`deleted`: its deletion) was sent, if it was
    /// the churn's.
    fn of(kind: &str, object: &DynamicObject, deleted: bool) -> Option<Instant> {
        let key = (kind.to_owned(), object.metadata.namespace.clone()?, object.metadata.name.clone()?);
        let version = if deleted { DELETED.to_owned() } else { object.metadata.resource_version.clone()? };
        let mut log = SENT.lock().expect("sent");
        log.answered.remove(&(key.clone(), version)).or_else(|| log.pending.get(&key).copied())
    }
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

/// How far behind the project the view runs: for each of the churn's changes it receives, from
/// the write's sending to the event's arrival.
#[derive(Default)]
pub struct Lag {
    /// Each change received in the last [`KEEP_SENT`]: (arrived, sent, project namespace).
    recent: VecDeque<(Instant, Instant, String)>,
    /// Every change's delay, for the report.
    pub delays: Vec<Duration>,
    /// When each change that trailed by more than [`LATE`] arrived, and by how much.
    pub late: Vec<(Instant, Duration)>,
}

/// A loaded machine's watch delay, and then some.
pub const LATE: Duration = Duration::from_millis(1500);

impl Lag {
    fn note(&mut self, sent: Instant, namespace: String) {
        let now = Instant::now();
        let trailed = now.saturating_duration_since(sent);
        self.delays.push(trailed);
        if trailed > LATE && self.late.len() < 1000 {
            self.late.push((now, trailed));
        }
        self.recent.push_back((now, sent, namespace));
        while self.recent.front().is_some_and(|(arrived, ..)| now.saturating_duration_since(*arrived) > KEEP_SENT) {
            self.recent.pop_front();
        }
    }
}

fn reflect<K>(
    api: Api<K>,
    writer: kube::runtime::reflector::store::Writer<K>,
    on_change: impl Fn(&K, bool) + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let stream = reflector(writer, watcher(api, watcher::Config::default()).default_backoff());
    // Called after the store has the change: a sample that saw the old state came before.
    tokio::spawn(stream.for_each(move |event| {
        // Only live changes: a (re-)list brings objects written long ago.
        match &event {
            Ok(watcher::Event::Apply(object)) => on_change(object, false),
            Ok(watcher::Event::Delete(object)) => on_change(object, true),
            _ => {}
        }
        async {}
    }));
}

impl ProjectView {
    pub fn start(client: &Client) -> ProjectView {
        let (namespaces, writer) = kube::runtime::reflector::store();
        reflect(Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone()), writer, |_, _| {});
        let lag = Arc::<Mutex<Lag>>::default();
        let kinds = KINDS
            .iter()
            .map(|(kind, plural)| {
                let resource = resource(kind, plural);
                let writer = kube::runtime::reflector::store::Writer::new(resource.clone());
                let store = writer.as_reader();
                let (lag, kind) = (Arc::clone(&lag), *kind);
                let on_change = move |object: &DynamicObject, deleted| {
                    if let (Some(sent), Some(ns)) = (Sent::of(kind, object, deleted), &object.metadata.namespace) {
                        lag.lock().expect("lag").note(sent, ns.clone());
                    }
                };
                reflect(Api::<DynamicObject>::all_with(client.clone(), &resource), writer, on_change);
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

    /// The earliest sending of the churn's changes to `hub_ns`'s project namespace that arrived
    /// after `after`. A state this view saw at `after` was the project's until then at least: the
    /// change that ended it is one of these.
    pub fn sent_after(&self, hub_ns: &str, after: Instant) -> Option<Instant> {
        let uid = hub_ns.strip_prefix("ns-")?;
        let ns = self.namespaces.state().into_iter().find(|n| n.metadata.uid.as_deref() == Some(uid))?;
        let name = ns.metadata.name.as_deref()?;
        let lag = self.lag.lock().expect("lag");
        lag.recent.iter().filter(|(arrived, _, n)| *arrived > after && n == name).map(|(_, sent, _)| *sent).min()
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
