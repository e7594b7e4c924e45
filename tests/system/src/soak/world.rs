//! The soak's world: a hub and the Milo stand-in in front of a project API server (each API server
//! with kube-controller-manager, so namespaces can be deleted), [`PROJECTS`] Milo projects, and
//! edgegate as deploy/ installs it with sharing (components/producer, components/producer-milo,
//! components/producer-sharded, components/enforce, with the dev certificate; the soak's shorter
//! timings a patch in [`World::start`]): three producer replicas sharing the projects' buckets
//! through the hub's Leases, each writing and deleting (`--prune`) for its own, each a Pod of the
//! render run by the pod runner under its own ServiceAccount (a restarted one is a new Pod of the
//! same name, as a StatefulSet makes it); and two webhook replicas, Pods of the render each in a
//! network namespace of its own, published behind the render's Service by
//! kube-controller-manager's EndpointSlice controller and called through it (deploy/'s
//! configuration, failurePolicy Fail).

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::Client;
use serde_json::json;

use super::Config;
use crate::control_plane::ControlPlane;
use crate::helpers::*;
use crate::milo::Milo;
use crate::netns::NetNs;
use crate::pod::{Render, Rewrite, RunningPod, run};
use crate::shipped::{published, webhook_in};

pub const SCOPE: &str = "soak";

/// The Milo projects. Chosen so that each of the three replicas holds two or three of them and a
/// fourth takes two (`soak-p2`, `soak-p10`) from the others: every fault on a replica and every
/// move of buckets meets projects that serve.
pub const PROJECTS: [&str; 7] = ["soak-p0", "soak-p1", "soak-p2", "soak-p3", "soak-p6", "soak-p7", "soak-p10"];

/// The project of the soak's namespace `soak-<n>`: the n-th of [`PROJECTS`], round.
pub fn project_of(ns: &str) -> Option<&'static str> {
    let n: usize = ns.strip_prefix("soak-")?.parse().ok()?;
    Some(PROJECTS[n % PROJECTS.len()])
}

/// The StatefulSet's replicas (components/producer-sharded).
pub const REPLICAS: usize = 3;

pub struct World {
    pub config: Config,
    pub hub_cp: Arc<ControlPlane>,
    pub project_cp: Arc<ControlPlane>,
    pub hub: Client,
    /// The project API server behind Milo, as its admin (the churn's and the checker's writes
    /// and reads, unscoped).
    pub project: Client,
    pub milo: Milo,
    /// Each webhook replica's network: its Pod's address.
    pub netns: Vec<NetNs>,
    render: Render,
    pub webhooks: [Option<RunningPod>; 2],
    /// A replica killed, until its replacement starts: its Pod, reported not ready.
    killed: [Option<RunningPod>; 2],
    /// The producer's replicas, `edgegate-producer-<i>`: [`REPLICAS`] of them, one more while
    /// scaled up; `None` while one is down.
    pub producers: Vec<Option<RunningPod>>,
    /// When the hub's API server was restarted (the `hub-restart` fault), by the wall clock.
    pub hub_restarts: Vec<(std::time::SystemTime, std::time::SystemTime)>,
}

impl World {
    pub async fn start(config: Config) -> World {
        let (hub_cp, project_cp) = (Arc::new(ControlPlane::own_audited()), Arc::new(ControlPlane::own_audited()));
        hub_cp.start_controller_manager();
        project_cp.start_controller_manager();
        let (hub, project) = (hub_cp.client().await, project_cp.client().await);
        let milo = Milo::serving(&hub, &project_cp, &project).await;
        for p in PROJECTS {
            crate::milo::world::project(&project, p, Some("True")).await;
        }
        let c = &config;
        let (grace, withdraw_after, pace) = (
            format!("--grace={}ms", c.grace.as_millis()),
            format!("--withdraw-after={}ms", c.withdraw_after.as_millis()),
            format!("--max-deletes-per-second={}", c.deletes_per_second),
        );
        let mut flags = vec![withdraw_after.as_str(), grace.as_str(), pace.as_str(), "--resync=20s"];
        if c.skip_grace {
            flags.push("--test-only-skip-the-grace");
        }
        let sharded = ["components/producer-sharded"];
        let render = crate::shipped::install_with_milo_and("soak", &hub_cp, &project_cp, &milo, &sharded, &flags).await;
        register_service_webhook(&hub_cp, &render);

        let netns = NetNs::create_many(2);
        let mut world = World {
            config,
            hub_cp,
            project_cp,
            hub,
            project,
            milo,
            netns,
            render,
            webhooks: [None, None],
            killed: [None, None],
            producers: (0..REPLICAS).map(|_| None).collect(),
            hub_restarts: Vec::new(),
        };
        for i in 0..2 {
            world.start_webhook(i).await;
        }
        for i in 0..REPLICAS {
            world.start_producer(i).await;
        }
        world
    }

    /// Webhook replica `i` (a new Pod, as a ReplicaSet makes one) in network namespace `i`,
    /// once published ready behind the Service; the killed Pod it replaces deleted first.
    pub async fn start_webhook(&mut self, i: usize) {
        drop(self.killed[i].take());
        let pod = webhook_in(&self.hub_cp, &self.render, i, &self.netns[i], Duration::ZERO).await;
        self.webhooks[i] = Some(pod);
    }

    /// Webhook replica `i` killed: its Pod stays, reported not ready as a kubelet sees the
    /// container gone; returns once the EndpointSlice controller has marked its endpoint so.
    pub async fn kill_webhook(&mut self, i: usize) {
        let pod = self.webhooks[i].take().expect("webhook replica 0 runs");
        signal(pod.pid(), "KILL");
        self.killed[i] = Some(pod);
        let address = &self.netns[i].address;
        // Seconds as a rule; longer right after a hub restart, while kube-controller-manager's
        // informers list again (a 30-minute run once waited over 10 s there).
        let took = eventually(Duration::from_secs(60), "the killed replica's endpoint not ready", async || {
            published(&self.hub, address).await == Some(false)
        })
        .await;
        eprintln!("soak: webhook replica {i} killed: its endpoint not ready {took:.1?} after");
    }

    /// Producer replica `i` (a new Pod of the same name, as a StatefulSet makes one), in slot `i`.
    pub async fn start_producer(&mut self, i: usize) {
        let both = [Rewrite::ListenAddress, Rewrite::MountPath];
        let pod = run(&self.hub_cp, &self.render, "edgegate-producer", i, &both).await;
        if self.producers.len() <= i {
            self.producers.resize_with(i + 1, || None);
        }
        self.producers[i] = Some(pod);
    }

    /// Producer replica `i` stopped as the kubelet stops a Pod (SIGTERM: it hands its buckets
    /// over), once its process has exited.
    pub async fn stop_producer(&mut self, i: usize) -> Duration {
        let pod = self.producers[i].take().expect("the replica to stop runs");
        let pid = pod.pid();
        signal(pid, "TERM");
        // components/producer-sharded's terminationGracePeriodSeconds.
        let took = until_exited(pid, Duration::from_secs(30)).await;
        drop(pod);
        took
    }

    /// The names of the producer replicas running now.
    pub fn producer_names(&self) -> Vec<&str> {
        self.producers.iter().flatten().map(|p| p.name.as_str()).collect()
    }

    /// Which of [`PROJECTS`] each running replica's fences hold now, by slot.
    pub async fn projects_held(&self) -> BTreeMap<usize, Vec<String>> {
        let fences = crate::fences::holders(&self.hub).await;
        let mut held = BTreeMap::new();
        for (i, pod) in self.producers.iter().enumerate() {
            let Some(pod) = pod else { continue };
            let projects = PROJECTS
                .iter()
                .filter(|p| {
                    fences.get(&edgegate::core::shard::bucket(p)).is_some_and(|h| h.as_deref() == Some(&pod.name))
                })
                .map(|p| (*p).to_owned())
                .collect();
            held.insert(i, projects);
        }
        held
    }

    /// The running replica whose fences hold the most of [`PROJECTS`]: a fault's target. There
    /// must be one holding some (the fault would otherwise miss the projects).
    pub async fn busiest_producer(&self) -> usize {
        let held = self.projects_held().await;
        let (i, n) = held
            .iter()
            .map(|(i, projects)| (*i, projects.len()))
            .max_by_key(|(i, n)| (*n, std::cmp::Reverse(*i)))
            .unwrap_or_default();
        assert!(n > 0, "no producer replica holds a soak project's bucket: {held:?}");
        i
    }

    /// Every bucket held as rendezvous hashing ranks the running replicas.
    pub async fn as_ranked(&self) -> bool {
        crate::fences::as_ranked(&crate::fences::holders(&self.hub).await, &self.producer_names())
    }

    /// Every binary's `/readyz` answers 200, and every replica of both is there.
    pub fn all_ready(&self) -> bool {
        let webhooks = self.webhooks.iter().flatten().all(|p| p.get("/readyz").contains("ok"));
        let producers = self
            .producers
            .iter()
            .flatten()
            .all(|p| http_status(&format!("http://127.0.0.1:{}/readyz", p.process.port), None) == 200);
        webhooks
            && producers
            && self.webhooks.iter().all(Option::is_some)
            && self.producers.iter().take(REPLICAS).all(Option::is_some)
    }

    /// Every binary's log, for the panic check.
    pub fn logs(&self) -> String {
        let dirs = [&self.hub_cp.dir, &self.project_cp.dir];
        let mut text = String::new();
        for dir in dirs {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let binary = ["webhook", "pruner", "producer"]
                    .iter()
                    .any(|b| name.starts_with(b) || name.starts_with(&format!("edgegate-{b}")));
                if binary && name.ends_with(".log") {
                    text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
                }
            }
        }
        text
    }
}

/// The render's ValidatingWebhookConfiguration (enforcing, the render's CA) and Service,
/// unmodified but for a namespaceSelector on the soak's hub namespaces.
fn register_service_webhook(hub_cp: &ControlPlane, render: &Render) {
    let mut vwc = render.get("ValidatingWebhookConfiguration", "edgegate").clone();
    for hook in vwc["webhooks"].as_array_mut().expect("webhooks") {
        hook["namespaceSelector"] = json!({"matchLabels": {"edgegate-soak": "true"}});
    }
    crate::shipped::apply_objects(hub_cp, vec![vwc]);
}
