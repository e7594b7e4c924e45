//! The soak's world: a project control plane and a hub, each with kube-controller-manager (so
//! namespaces can be deleted), and edgegate as a hub runs it: the producer between them, two
//! webhook replicas reached through their Service (failurePolicy Fail, deploy/'s configuration),
//! two pruners sharing a Lease. Every binary can be killed and started again with the same flags.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::Config;
use crate::control_plane::{ControlPlane, spawn_guarded};
use crate::helpers::*;
use crate::netns::{NETNS_ADDRESS, NetNs, kubeconfig_through_link};
use crate::replica::Replica;

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
    pub webhooks: [Option<Replica>; 2],
    pub pruners: [Option<Process>; 2],
    pub producer: Option<Process>,
}

/// The dev certificate as the Secret cert-manager would write.
fn dev_secret() -> Secret {
    let dir = dev_certs();
    let data = ["tls.crt", "tls.key", "ca.crt"]
        .map(|f| (f.to_owned(), k8s_openapi::ByteString(std::fs::read(dir.join(f)).expect("dev certificate"))));
    Secret { data: Some(data.into()), ..Secret::default() }
}

impl World {
    pub async fn start(config: Config) -> World {
        let (hub_cp, project_cp) = (Arc::new(ControlPlane::own_audited()), Arc::new(ControlPlane::own_audited()));
        hub_cp.start_controller_manager();
        project_cp.start_controller_manager();
        let (hub, project) = (hub_cp.client().await, project_cp.client().await);
        install_crd(&hub).await;
        let crds = std::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", project_cp.kubeconfig.display()))
            .args(["apply", "--server-side", "-f"])
            .arg(repo().join("tests/crds/project.yaml"))
            .output()
            .expect("kubectl");
        assert!(crds.status.success(), "project CRDs: {}", String::from_utf8_lossy(&crds.stderr));
        register_service_webhook(&hub).await;

        let netns = NetNs::create();
        let webhook_kubeconfig = kubeconfig_through_link(&hub_cp, "soak-webhook.kubeconfig").await;
        let mut world = World {
            config,
            hub_cp,
            project_cp,
            hub,
            project,
            netns,
            webhook_kubeconfig,
            secret: dev_secret(),
            webhooks: [None, None],
            pruners: [None, None],
            producer: None,
        };
        for i in 0..2 {
            world.start_webhook(i).await;
            world.start_pruner(i);
        }
        world.start_producer();
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

    pub fn start_pruner(&mut self, i: usize) {
        let c = &self.config;
        let args = [
            format!("--grace={}ms", c.grace.as_millis()),
            "--lease-namespace=edgegate-system".to_owned(),
            format!("--identity=pruner-{i}"),
            "--lease-duration=4s".to_owned(),
            format!("--max-deletes-per-second={}", c.deletes_per_second),
            "--resync=20s".to_owned(),
            "--producer-lease=edgegate-producer".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let identity = self.hub_cp.impersonating(&format!("edgegate-pruner-{i}"), &["system:masters"]);
        self.pruners[i] = Some(start_pruner(&self.hub_cp, SCOPE, &identity, &args));
    }

    pub fn start_producer(&mut self) {
        let port = free_port();
        let log = self.hub_cp.dir.join(format!("producer-{port}.log"));
        let identity = self.hub_cp.impersonating("edgegate-producer", &["system:masters"]);
        let args = vec![
            format!("--kubeconfig={}", identity.display()),
            format!("--project-kubeconfig={}", self.project_cp.kubeconfig.display()),
            "--project-name=soak".to_owned(),
            format!("--listen=127.0.0.1:{port}"),
            format!("--withdraw-after={}ms", self.config.withdraw_after.as_millis()),
            "--resync=20s".to_owned(),
            "--lease-namespace=edgegate-system".to_owned(),
            "--identity=producer-0".to_owned(),
            "--lease-duration=4s".to_owned(),
        ];
        self.producer = Some(Process { child: spawn_guarded(&binary("edgegate-producer"), &args, &log), port, log });
    }

    /// The pruner holding the Lease, by its metric.
    pub fn pruner_leader(&self) -> Option<usize> {
        (0..2).find(|&i| {
            self.pruners[i].as_ref().is_some_and(|p| metrics(p).lines().any(|l| l.trim() == "edgegate_leader 1"))
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
            .all(|p| http_status(&format!("http://127.0.0.1:{}/readyz", p.port), None) == 200);
        webhooks && others && self.webhooks.iter().all(Option::is_some) && self.pruners.iter().all(Option::is_some)
    }

    /// Every binary's log, for the panic check.
    pub fn logs(&self) -> String {
        let dirs = [&self.hub_cp.dir, &self.project_cp.dir];
        let mut text = String::new();
        for dir in dirs {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if ["webhook", "pruner", "producer"].iter().any(|b| name.starts_with(b)) && name.ends_with(".log") {
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

/// deploy/'s ValidatingWebhookConfiguration as components/enforce makes it (failurePolicy Fail),
/// unmodified but for the dev CA and a namespaceSelector on the soak's hub namespaces, and its
/// Service in edgegate-system.
async fn register_service_webhook(hub: &Client) {
    namespace(hub, "edgegate-system", &[]).await;
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "edgegate-webhook", "namespace": "edgegate-system"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}});
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(hub.clone(), "edgegate-system");
    services.create(&PostParams::default(), &serde_json::from_value(service).expect("service")).await.expect("service");
    let text = std::fs::read_to_string(repo().join("deploy/base/admission/validating-webhook.yaml")).expect("vwc");
    let mut vwc: serde_json::Value = serde_saphyr::from_str(&text).expect("vwc parses");
    let hook = &mut vwc["webhooks"][0];
    hook["failurePolicy"] = json!("Fail");
    hook["clientConfig"]["caBundle"] = json!(base64(&std::fs::read(dev_certs().join("ca.crt")).expect("ca")));
    hook["namespaceSelector"] = json!({"matchLabels": {"edgegate-soak": "true"}});
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> = Api::all(hub.clone());
    api.create(&PostParams::default(), &serde_json::from_value(vwc).expect("vwc")).await.expect("vwc");
}
