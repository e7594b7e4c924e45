//! A webhook replica as a Pod runs it, for the suites that call edgegate through its Service as a
//! hub does (the API server dialling an endpoint address over HTTP/1.1, never loopback).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::control_plane::{ControlPlane, spawn_guarded};
use crate::helpers::{Process, binary, counter, eventually, pid_of};
use crate::netns::{NETNS_ADDRESS, NetNs};
use crate::secret_volume::SecretVolume;

/// A webhook replica in the test's network namespace (an address the API server may dial, unlike
/// loopback), its serving certificate projected from a Secret as a kubelet does, records read from
/// the API server through the link, and in the mode the render's `EDGEGATE_MODE` says. Its
/// Service endpoint is one EndpointSlice of its own ([`Replica::publish`]). Stopped when dropped.
pub struct Replica {
    process: Process,
    /// Where its Secret is projected: project a renewed Secret here to hand it a new certificate.
    pub volume: SecretVolume,
    /// Its TLS port on [`NETNS_ADDRESS`].
    pub port: u16,
    /// Its admin port (health, metrics), on the namespace's loopback.
    admin: u16,
}

impl Replica {
    /// Start a replica serving TLS on `port` (admin on `port + 1000`) with `secret`'s certificate,
    /// `extra` appended to its arguments; returns once it is ready.
    pub async fn start(
        cp: &ControlPlane,
        netns: &NetNs,
        kubeconfig: &Path,
        port: u16,
        mode: &str,
        secret: &Secret,
        extra: &[String],
    ) -> Replica {
        let mut volume = SecretVolume::new(&cp.dir.join(format!("webhook-tls-{port}")));
        volume.project(secret);
        let admin = port + 1000;
        let log = cp.dir.join(format!("webhook-netns-{port}.log"));
        let args = [
            "netns".to_owned(),
            "exec".to_owned(),
            netns.name.clone(),
            "env".to_owned(),
            format!("EDGEGATE_MODE={mode}"),
            binary("edgegate-webhook").display().to_string(),
            "--kubernetes".to_owned(),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--listen={NETNS_ADDRESS}:{port}"),
            format!("--admin-listen=127.0.0.1:{admin}"),
            format!("--tls-cert={}", volume.dir.join("tls.crt").display()),
            format!("--tls-key={}", volume.dir.join("tls.key").display()),
            "--shutdown-grace=1s".to_owned(),
        ];
        let args: Vec<String> = args.into_iter().chain(extra.iter().cloned()).collect();
        let process = Process { child: spawn_guarded(Path::new("ip"), &args, &log), port, log };
        let replica = Replica { process, volume, port, admin };
        eventually(Duration::from_secs(30), "replica ready", async || replica.get(netns, "/readyz").contains("ok"))
            .await;
        replica
    }

    /// The body of `path` on its admin port.
    pub fn get(&self, netns: &NetNs, path: &str) -> String {
        netns.curl(&[&format!("http://127.0.0.1:{}{path}", self.admin)])
    }

    /// The endpoints controller's part: this replica, ready, behind the Service's `https` port.
    pub async fn publish(&self, client: &Client) {
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("edgegate-webhook-{}", self.port), "namespace": "edgegate-system",
                         "labels": {"kubernetes.io/service-name": "edgegate-webhook"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NETNS_ADDRESS], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}],
        });
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "edgegate-system");
        api.patch(
            &format!("edgegate-webhook-{}", self.port),
            &PatchParams::apply("endpoints-controller").force(),
            &Patch::Apply(&slice),
        )
        .await
        .expect("endpoint slice");
    }

    /// How many reviews it has answered: the sum of its `edgegate_admission_reviews_total`.
    pub fn reviews(&self, netns: &NetNs) -> u64 {
        self.get(netns, "/metrics")
            .lines()
            .filter(|l| l.starts_with("edgegate_admission_reviews_total{"))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
            .sum()
    }

    /// How many times it has taken up a changed certificate.
    pub fn reloads(&self, netns: &NetNs) -> u64 {
        counter(&self.get(netns, "/metrics"), "edgegate_tls_reloads_total{result=\"success\"}")
    }

    /// The webhook's own pid (`ip netns exec` and `env` exec it in turn under the watchdog).
    pub fn pid(&self) -> u32 {
        pid_of(&self.process)
    }
}
