//! The real cert-manager against a [`ControlPlane`]: its controllers (issuers, clusterissuers, the
//! certificates-* controllers, CA and self-signed CertificateRequest issuers, the approver) and its
//! CA injector (Validating- and MutatingWebhookConfigurations), built as one binary from the
//! cert-manager Go module by tests/cert-manager/build.sh, with its CRDs.
//!
//! cert-manager's admission webhook does not run (it is internal to the module): Certificates and
//! Issuers get no defaulting or validation beyond the CRD schemas.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::control_plane::{ControlPlane, repo};

/// The cluster resource namespace given to cert-manager: where ClusterIssuers' Secrets live.
pub const CLUSTER_RESOURCE_NAMESPACE: &str = "kube-system";

/// The CRDs build.sh puts beside the binary, in `crds/<file>.yaml`.
pub const CRDS: [&str; 6] = [
    "certificates.cert-manager.io",
    "certificaterequests.cert-manager.io",
    "issuers.cert-manager.io",
    "clusterissuers.cert-manager.io",
    "orders.acme.cert-manager.io",
    "challenges.acme.cert-manager.io",
];

/// Log lines that together say both halves are running with synced caches: each entry's parts all
/// on one line.
const READY: [&[&str]; 3] = [
    &["controllers' caches synced"],
    &["\"Starting workers\"", "controller=\"validatingwebhookconfiguration\""],
    &["\"Starting workers\"", "controller=\"mutatingwebhookconfiguration\""],
];

/// Build (or find in the cache) cert-manager and its CRDs; the directory holding `cert-manager`
/// and `crds/`.
pub fn build() -> PathBuf {
    let out = Command::new(repo().join("tests/cert-manager/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/cert-manager/build.sh runs");
    assert!(out.status.success(), "building cert-manager failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Start cert-manager against `cp`, once per control plane: build it, apply its CRDs and wait
/// until they are established, start it (as the admin, under the watchdog, logging to
/// `cp.dir/cert-manager.log`, stopped with `cp`), and return once its controllers and CA
/// injector run with synced caches. Later calls on the same control plane return at once.
pub fn start_cert_manager(cp: &ControlPlane) {
    let started = Instant::now();
    let fresh = cp.start_once("cert-manager", |cp| {
        let dir = build();
        let built = started.elapsed();
        cp.kubectl_ok(&["apply", "--server-side", "-f", &dir.join("crds").display().to_string()]);
        let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        let names: Vec<String> = CRDS.iter().map(|c| format!("crd/{c}")).collect();
        wait.extend(names.iter().map(String::as_str));
        cp.kubectl_ok(&wait);
        eprintln!(
            "cert-manager: build.sh took {built:?}; CRDs applied and established in {:?}",
            started.elapsed() - built
        );
        let args = vec![
            format!("--kubeconfig={}", cp.kubeconfig.display()),
            format!("--namespace={CLUSTER_RESOURCE_NAMESPACE}"),
            "--v=2".to_owned(),
        ];
        (dir.join("cert-manager"), args)
    });
    if !fresh {
        return;
    }
    let (limit, since) = (Duration::from_secs(60), Instant::now());
    loop {
        let log = std::fs::read_to_string(cp.dir.join("cert-manager.log")).unwrap_or_default();
        if READY.iter().all(|parts| log.lines().any(|line| parts.iter().all(|part| line.contains(part)))) {
            break;
        }
        assert!(cp.is_running("cert-manager"), "cert-manager exited; log tail:\n{}", cp.log_tail("cert-manager.log"));
        assert!(
            since.elapsed() < limit,
            "cert-manager not ready within {limit:?}; log tail:\n{}",
            cp.log_tail("cert-manager.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("cert-manager running in {:?} (ready {:?} after start)", started.elapsed(), since.elapsed());
}
