//! The soak's world: a project control plane and a hub, each with kube-controller-manager (so
//! namespaces can be deleted), and edgegate as deploy/ installs it (overlays/dev, enforcing, with
//! components/producer; the soak's shorter timings a patch in [`World::start`]): the producer
//! between them and two pruners sharing a Lease, each a Pod of the render run by the pod runner
//! under its own ServiceAccount (a restarted one is a new Pod, as a ReplicaSet makes it); two
//! webhook replicas reached through their Service (deploy/'s configuration, failurePolicy Fail),
//! on the webhook ServiceAccount's token.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::Config;
use crate::control_plane::ControlPlane;
use crate::helpers::*;
use crate::netns::{NETNS_ADDRESS, NetNs, relayed_kubeconfig};
use crate::pod::{Render, Rewrite, RunningPod, run};
use crate::replica::Replica;
use crate::shipped::add_project;

pub const WEBHOOK_PORTS: [u16; 2] = [8471, 8472];
pub const SCOPE: &str = "soak";

pub struct World {
    pub config: Config,
    pub hub_cp: Arc<ControlPlane>,
    pub project_cp: Arc<ControlPlane>,
    pub hub: Client,
    pub project: Client,
    pub netns: NetNs,
    webhook_kubeconfig: PathBuf,
    secret: Secret,
    render: Render,
    pub webhooks: [Option<Replica>; 2],
    pub pruners: [Option<RunningPod>; 2],
    pub producer: Option<RunningPod>,
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
            &["overlays/dev"],
            &["components/producer"],
            &[
                ("edgegate-pruner", &[&grace, &pace, "--lease-duration=4s", "--resync=20s"]),
                ("edgegate-producer", &[&withdraw_after, "--lease-duration=4s", "--resync=20s"]),
            ],
        );
        render.apply_but_admission(&hub_cp);
        add_project(&hub_cp, &render, "soak", &project_cp).await;
        register_service_webhook(&hub_cp, &render);
        let secrets: Api<Secret> = Api::namespaced(hub.clone(), "edgegate-system");
        let secret = secrets.get("edgegate-webhook-tls").await.expect("the render's webhook Secret, applied");

        let netns = NetNs::create();
        let token = hub_cp.service_account_kubeconfig("edgegate-system", "edgegate-webhook", None, 86_400).await;
        let webhook_kubeconfig = relayed_kubeconfig(&hub_cp, &token, "soak-webhook.kubeconfig").await;
        let mut world = World {
            config,
            hub_cp,
            project_cp,
            hub,
            project,
            netns,
            webhook_kubeconfig,
            secret,
            render,
            webhooks: [None, None],
            pruners: [None, None],
            producer: None,
            hub_restarts: Vec::new(),
        };
        for i in 0..2 {
            world.start_webhook(i).await;
            world.start_pruner(i).await;
        }
        world.start_producer().await;
        world
    }

    pub async fn start_webhook(&mut self, i: usize) {
        let port = WEBHOOK_PORTS[i];
        let replica =
            Replica::start(&self.hub_cp, &self.netns, &self.webhook_kubeconfig, port, "deny", &self.secret, &[]).await;
        endpoint(&self.hub, port, true).await;
        self.webhooks[i] = Some(replica);
    }

    /// A replica killed; then, as the endpoints controller would notice, its endpoint not ready.
    pub async fn kill_webhook(&mut self, i: usize) {
        if let Some(replica) = self.webhooks[i].take() {
            signal("KILL", replica.pid());
            endpoint(&self.hub, WEBHOOK_PORTS[i], false).await;
        }
    }

    pub async fn start_pruner(&mut self, i: usize) {
        let pod = run(&self.hub_cp, &self.render, "edgegate-pruner", i, &[Rewrite::ListenAddress]).await;
        self.pruners[i] = Some(pod);
    }

    pub async fn start_producer(&mut self) {
        let both = [Rewrite::ListenAddress, Rewrite::MountPath];
        self.producer = Some(run(&self.hub_cp, &self.render, "edgegate-producer", 0, &both).await);
    }

    /// The pruner holding the Lease, by its metric.
    pub fn pruner_leader(&self) -> Option<usize> {
        (0..2).find(|&i| {
            self.pruners[i]
                .as_ref()
                .is_some_and(|p| metrics(&p.process).lines().any(|l| l.trim() == "edgegate_leader 1"))
        })
    }

    /// Every binary's `/readyz` answers 200.
    pub fn all_ready(&self) -> bool {
        let webhooks = self.webhooks.iter().flatten().all(|r| r.get(&self.netns, "/readyz").contains("ok"));
        let others = self
            .pruners
            .iter()
            .flatten()
            .chain(&self.producer)
            .all(|p| http_status(&format!("http://127.0.0.1:{}/readyz", p.process.port), None) == 200);
        webhooks && others && self.webhooks.iter().all(Option::is_some) && self.pruners.iter().all(Option::is_some)
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

pub fn signal(signal: &str, pid: u32) {
    let _ = std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

/// The endpoints controller's part for replica `port`: its endpoint behind the Service, ready or not.
async fn endpoint(hub: &Client, port: u16, ready: bool) {
    let name = format!("edgegate-webhook-{port}");
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "edgegate-system",
                     "labels": {"kubernetes.io/service-name": "edgegate-webhook"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [NETNS_ADDRESS], "conditions": {"ready": ready}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    });
    let api: Api<EndpointSlice> = Api::namespaced(hub.clone(), "edgegate-system");
    api.patch(&name, &PatchParams::apply("endpoints-controller").force(), &Patch::Apply(&slice))
        .await
        .expect("endpoint slice");
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
