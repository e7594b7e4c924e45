//! Churn on the project, seeded and reproducible: interfaces created, relabelled, bound and
//! unbound, readdressed and deleted; NetworkService selectors edited; proxies' backends edited,
//! proxies deleted and created; namespaces created and deleted on both sides (the hub namespace
//! of a project namespace is `ns-<uid>`, as the cell and federation make it, labelled with its
//! project's cluster). Namespace `soak-<n>` is in project [`project_of`] it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::DeleteParams;
use kube::{Api, Client};

use super::project::{interface, proxy, put, remove, service};
use super::world::project_of;
use crate::helpers::try_namespace;
use crate::milo::PROJECT_LABEL;

/// xorshift64*: a few lines, seeded, the same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const APPS: [&str; 3] = ["a", "b", "c"];
const SERVICES: [&str; 3] = ["svc-a", "svc-b", "svc-c"];

/// One project namespace as the churn knows it.
struct Space {
    id: u64,
    interfaces: BTreeMap<String, (String, String, String)>, // name → (app, phase, address)
    next: u64,
}

pub struct Churn {
    project: Client,
    hub: Client,
    rng: Rng,
    spaces: BTreeMap<String, Space>,
    next_space: u64,
    pub applied: u64,
    pub failed: u64,
    /// Hub namespaces deleted with their project namespace (each once its deletion was
    /// answered): their copies go with them.
    pub deleted_hub_namespaces: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    /// Every hub namespace made, with its project.
    pub hub_projects: std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>,
}

fn address(space: u64, n: u64) -> String {
    format!("fd20:{:x}:{:x}::{:x}", space + 1, n / 4000 + 1, n % 4000 + 1)
}

impl Churn {
    pub fn new(project: Client, hub: Client, seed: u64) -> Churn {
        Churn {
            project,
            hub,
            rng: Rng::new(seed),
            spaces: BTreeMap::new(),
            next_space: 0,
            applied: 0,
            failed: 0,
            deleted_hub_namespaces: Default::default(),
            hub_projects: Default::default(),
        }
    }

    /// A project namespace with three services, a proxy in front of the first two, and `pods`
    /// interfaces; and its hub namespace. Returns the project namespace's name.
    pub async fn add_namespace(&mut self, pods: usize) -> String {
        let id = self.next_space;
        self.next_space += 1;
        let name = format!("soak-{id}");
        let project = project_of(&name).unwrap_or_default();
        // Either API server may be restarting (a fault): a namespace not created is retried by
        // the writes that follow, or left out; the churn goes on.
        let _ = try_namespace(&self.project, &name, &[(PROJECT_LABEL, project)]).await;
        let uid = Api::<Namespace>::all(self.project.clone()).get(&name).await.ok().and_then(|n| n.metadata.uid);
        let hub_ns = format!("ns-{}", uid.unwrap_or_default());
        let cluster = format!("cluster-{project}");
        let labels = [("edgegate-soak", "true"), ("meta.datumapis.com/upstream-cluster-name", cluster.as_str())];
        let _ = try_namespace(&self.hub, &hub_ns, &labels).await;
        self.hub_projects.lock().expect("projects").insert(hub_ns, project.to_owned());
        let mut space = Space { id, interfaces: BTreeMap::new(), next: 0 };
        for (svc, app) in SERVICES.iter().zip(APPS) {
            let _ = put(&self.project, &name, "NetworkService", svc, service(app)).await;
        }
        let _ = put(&self.project, &name, "HTTPProxy", "web", proxy(&SERVICES[..2])).await;
        for _ in 0..pods {
            let (pod, app, phase, addr) = self.new_pod(&mut space);
            let _ = put(&self.project, &name, "NetworkInterface", &pod, interface(&app, &phase, &addr)).await;
            space.interfaces.insert(pod, (app, phase, addr));
        }
        self.spaces.insert(name.clone(), space);
        name
    }

    fn new_pod(&mut self, space: &mut Space) -> (String, String, String, String) {
        space.next += 1;
        let app = (*self.rng.pick(&APPS)).to_owned();
        let phase = if self.rng.below(5) == 0 { "Available" } else { "Bound" }.to_owned();
        (format!("pod-{}", space.next), app, phase, address(space.id, space.next))
    }

    /// One change, chosen by the seed.
    pub async fn step(&mut self) {
        let names: Vec<String> = self.spaces.keys().cloned().collect();
        if names.is_empty() {
            self.add_namespace(6).await;
            return;
        }
        let ns = self.rng.pick(&names).clone();
        let roll = self.rng.below(100);
        let result = match roll {
            0..=1 if names.len() > 2 => self.delete_namespace(&ns).await,
            2..=3 => {
                self.add_namespace(6).await;
                Ok(())
            }
            4..=23 => self.edit_interface(&ns, |rng, i| i.0 = (*rng.pick(&APPS)).to_owned()).await,
            24..=43 => {
                self.edit_interface(&ns, |_, i| i.1 = if i.1 == "Bound" { "Available" } else { "Bound" }.to_owned())
                    .await
            }
            44..=53 => {
                let id = self.spaces[&ns].id;
                self.edit_interface(&ns, move |rng, i| i.2 = address(id, 100_000 + rng.below(100_000) as u64)).await
            }
            54..=65 => {
                let space = self.spaces.get_mut(&ns).expect("space");
                space.next += 1;
                let pod = format!("pod-{}", space.next);
                let addr = address(space.id, space.next);
                let app = (*self.rng.pick(&APPS)).to_owned();
                let r = put(&self.project, &ns, "NetworkInterface", &pod, interface(&app, "Bound", &addr)).await;
                self.spaces.get_mut(&ns).expect("space").interfaces.insert(pod, (app, "Bound".into(), addr));
                r
            }
            66..=75 => {
                let pods: Vec<String> = self.spaces[&ns].interfaces.keys().cloned().collect();
                if pods.is_empty() {
                    return;
                }
                let pod = self.rng.pick(&pods).clone();
                self.spaces.get_mut(&ns).expect("space").interfaces.remove(&pod);
                remove(&self.project, &ns, "NetworkInterface", &pod).await
            }
            76..=87 => {
                let svc = *self.rng.pick(&SERVICES);
                let app = *self.rng.pick(&APPS);
                put(&self.project, &ns, "NetworkService", svc, service(app)).await
            }
            88..=95 => {
                let n = 1 + self.rng.below(3);
                let first = self.rng.below(3);
                let chosen: Vec<&str> = (0..n).map(|k| SERVICES[(first + k) % 3]).collect();
                put(&self.project, &ns, "HTTPProxy", "web", proxy(&chosen)).await
            }
            _ => {
                if self.rng.below(2) == 0 {
                    remove(&self.project, &ns, "HTTPProxy", "web").await
                } else {
                    put(&self.project, &ns, "HTTPProxy", "web", proxy(&SERVICES[..2])).await
                }
            }
        };
        match result {
            Ok(()) => self.applied += 1,
            Err(_) => self.failed += 1,
        }
    }

    async fn edit_interface(
        &mut self,
        ns: &str,
        edit: impl FnOnce(&mut Rng, &mut (String, String, String)),
    ) -> Result<(), kube::Error> {
        let pods: Vec<String> = self.spaces[ns].interfaces.keys().cloned().collect();
        if pods.is_empty() {
            return Ok(());
        }
        let pod = self.rng.pick(&pods).clone();
        let mut state = self.spaces[ns].interfaces[&pod].clone();
        edit(&mut self.rng, &mut state);
        let r = put(&self.project, ns, "NetworkInterface", &pod, interface(&state.0, &state.1, &state.2)).await;
        self.spaces.get_mut(ns).expect("space").interfaces.insert(pod, state);
        r
    }

    async fn delete_namespace(&mut self, ns: &str) -> Result<(), kube::Error> {
        let uid = Api::<Namespace>::all(self.project.clone()).get(ns).await?.metadata.uid.unwrap_or_default();
        let hub_ns = format!("ns-{uid}");
        Api::<Namespace>::all(self.project.clone()).delete(ns, &DeleteParams::default()).await?;
        self.spaces.remove(ns);
        // The project namespace is going: its hub namespace must go too, or its copies stay
        // (nobody serves them, and no project owns them). Retried through a hub restart.
        let hub = Api::<Namespace>::all(self.hub.clone());
        let started = std::time::Instant::now();
        let deleted = loop {
            match hub.delete(&hub_ns, &DeleteParams::default()).await {
                Ok(_) => break Ok(()),
                // Gone, or already terminating (a deletion answered but its answer lost).
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => break Ok(()),
                Err(e) if started.elapsed() > Duration::from_secs(60) => break Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        // Marked only once deleted: until then, a copy gone there is judged as any other.
        if deleted.is_ok() {
            self.deleted_hub_namespaces.lock().expect("deleted").insert(hub_ns);
        }
        deleted
    }

    /// The project with the most namespaces now.
    pub fn busiest_project(&self) -> Option<&'static str> {
        let mut count: BTreeMap<&'static str, usize> = BTreeMap::new();
        for name in self.spaces.keys() {
            *count.entry(project_of(name).unwrap_or_default()).or_default() += 1;
        }
        count.into_iter().max_by_key(|(_, n)| *n).map(|(p, _)| p)
    }

    /// Every proxy deleted at once (each namespace's record empties: a burst the pruner paces),
    /// and put back after `down`.
    pub async fn burst(&mut self, down: Duration) {
        let names: Vec<String> = self.spaces.keys().cloned().collect();
        for ns in &names {
            let _ = remove(&self.project, ns, "HTTPProxy", "web").await;
        }
        tokio::time::sleep(down).await;
        for ns in &names {
            let _ = put(&self.project, ns, "HTTPProxy", "web", proxy(&SERVICES[..2])).await;
        }
    }
}
