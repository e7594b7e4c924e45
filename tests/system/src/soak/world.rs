//! The soak's world: a project control plane and a hub, each with kube-controller-manager (so
//! namespaces can be deleted), and edgegate as deploy/ installs it (components/producer before
//! components/enforce, with the dev certificate; the soak's shorter timings a patch in
//! [`World::start`]): two producer replicas sharing a Lease between them, the leader writing the
//! records and deleting copies (`--prune`), each a Pod of the render run by the pod runner under
//! its own ServiceAccount (a restarted one is a new Pod, as a ReplicaSet makes it); and two
//! webhook replicas, Pods of the render each in a network namespace of its own, published behind
//! the render's Service by kube-controller-manager's EndpointSlice controller and called through
//! it (deploy/'s configuration, failurePolicy Fail).

use std::sync::Arc;

use kube::Client;
use serde_json::json;

use super::Config;
use crate::control_plane::ControlPlane;
use crate::helpers::*;
use crate::netns::NetNs;
use crate::pod::{Render, Rewrite, RunningPod, run};
use crate::shipped::{add_project, published, webhook_in};

pub const SCOPE: &str = "soak";

pub struct World {
    pub config: Config,
    pub hub_cp: Arc<ControlPlane>,
    pub project_cp: Arc<ControlPlane>,
    pub hub: Client,
    pub project: Client,
    /// Each webhook replica's network: its Pod's address.
    pub netns: Vec<NetNs>,
    render: Render,
    pub webhooks: [Option<RunningPod>; 2],
    /// A replica killed, until its replacement starts: its Pod, reported not ready.
    killed: [Option<RunningPod>; 2],
    /// The producer's two replicas: the one holding the Lease writes and deletes.
    pub producers: [Option<RunningPod>; 2],
    /// When the hub's API server was restarted (the `hub-restart` fault), by the wall clock.
    pub hub_restarts: Vec<(std::time::SystemTime, std::time::SystemTime)>,
}

impl World {
    pub async fn start(config: Config) -> World {
        let (hub_cp, project_cp) = (Arc::new(ControlPlane::own_audited()), Arc::new(ControlPlane::own_audited()));
        hub_cp.start_controller_manager();
        project_cp.start_controller_manager();
        let (hub, project) = (hub_cp.client().await, project_cp.client().await);
        let crds = std::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", project_cp.kubeconfig.display()))
            .args(["apply", "--server-side", "-f"])
            .arg(repo().join("tests/crds/project.yaml"))
            .output()
            .expect("kubectl");
        assert!(crds.status.success(), "project CRDs: {}", String::from_utf8_lossy(&crds.stderr));
        let c = &config;
        let (grace, withdraw_after, pace) = (
            format!("--grace={}ms", c.grace.as_millis()),
            format!("--withdraw-after={}ms", c.withdraw_after.as_millis()),
            format!("--max-deletes-per-second={}", c.deletes_per_second),
        );
        let render = Render::tuned(
            "soak",
            &["base"],
            &["components/dev-certs", "components/producer", "components/enforce", "components/images"],
            &[("edgegate-producer", &[&withdraw_after, &grace, &pace, "--lease-duration=4s", "--resync=20s"])],
        );
        render.apply_but_admission(&hub_cp);
        add_project(&hub_cp, "soak", &project_cp).await;
        register_service_webhook(&hub_cp, &render);

        let netns = NetNs::create_many(2);
        let mut world = World {
            config,
            hub_cp,
            project_cp,
            hub,
            project,
            netns,
            render,
            webhooks: [None, None],
            killed: [None, None],
            producers: [None, None],
            hub_restarts: Vec::new(),
        };
        for i in 0..2 {
            world.start_webhook(i).await;
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
        if let Some(pod) = self.webhooks[i].take() {
            crate::helpers::signal(pod.pid(), "KILL");
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
    }

    /// Producer replica `i` (a new Pod, as a ReplicaSet makes one).
    pub async fn start_producer(&mut self, i: usize) {
        let both = [Rewrite::ListenAddress, Rewrite::MountPath];
        self.producers[i] = Some(run(&self.hub_cp, &self.render, "edgegate-producer", i, &both).await);
    }

    /// The producer replica holding the Lease, by its metric.
    pub fn producer_leader(&self) -> Option<usize> {
        (0..2).find(|&i| {
            self.producers[i]
                .as_ref()
                .is_some_and(|p| metrics(&p.process).lines().any(|l| l.trim() == "edgegate_leader 1"))
        })
    }

    /// Every binary's `/readyz` answers 200.
    pub fn all_ready(&self) -> bool {
        let webhooks = self.webhooks.iter().flatten().all(|p| p.get("/readyz").contains("ok"));
        let producers = self
            .producers
            .iter()
            .flatten()
            .all(|p| http_status(&format!("http://127.0.0.1:{}/readyz", p.process.port), None) == 200);
        webhooks && producers && self.webhooks.iter().all(Option::is_some) && self.producers.iter().all(Option::is_some)
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
