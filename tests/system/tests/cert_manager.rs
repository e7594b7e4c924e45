//! The repository's cert-manager install path against the real cert-manager (controllers and CA
//! injector built from its Go module) and a real control plane with kube-controller-manager
//! (namespace and garbage-collector controllers): the cert-manager component
//! (deploy/components/cert-manager, formerly certs/cert-manager/) issues the webhook's serving
//! certificate, the CA injector fills a webhook configuration's caBundle, a manual renewal
//! (what `cmctl renew` does) re-issues it under the same CA, and deleted namespaces go away.
//!
//! cert-manager's admission webhook does not run here, so nothing defaults or validates the
//! Certificates: the component's objects must be complete as written.
//!
//! Every wait is bounded and every measured time printed.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use edgegate_system_tests::cert_manager::start_cert_manager;
use edgegate_system_tests::control_plane::{ControlPlane, repo};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use serde_json::{Value, json};

const COMPONENT: &str = "deploy/components/cert-manager";
const NS: &str = "edgegate-system";
const SECRET: &str = "edgegate-webhook-tls";
const SAN: &str = "edgegate-webhook.edgegate-system.svc";

#[test]
fn cert_manager_issues_injects_renews_and_namespaces_go() {
    let test_start = Instant::now();
    let cp = ControlPlane::own();
    eprintln!("[time] control plane up after {:?}", test_start.elapsed());

    let t = Instant::now();
    cp.start_controller_manager();
    eprintln!("[time] kube-controller-manager started (build included if not cached) in {:?}", t.elapsed());
    let t = Instant::now();
    start_cert_manager(&cp);
    eprintln!("[time] cert-manager started (build + CRDs included) in {:?}", t.elapsed());
    // Idempotent: a second call neither builds nor starts anything.
    let t = Instant::now();
    cp.start_controller_manager();
    start_cert_manager(&cp);
    assert!(t.elapsed() < Duration::from_secs(1), "second start calls took {:?}", t.elapsed());

    // The install path: namespace first (the kustomization does not create it), then the
    // self-signed root → CA → Issuer → Certificate chain, applied server-side.
    ok(&cp.kubectl(&["create", "namespace", NS]));
    let t = Instant::now();
    // The component renders on its own (its patches target webhook configurations not here).
    ok(&cp.kubectl(&["apply", "-k", &repo().join(COMPONENT).display().to_string(), "--server-side"]));
    wait_for(&cp, Duration::from_secs(90), "Secret edgegate-webhook-tls with tls.crt, tls.key, ca.crt", || {
        tls_secret(&cp)
    });
    eprintln!("[time] applied {COMPONENT} → {SECRET} issued in {:?}", t.elapsed());
    // cert-manager may issue twice at first: its trigger can act on an informer that has not yet
    // seen the new Secret ("Issuing certificate as Secret does not exist"). The certificate this
    // test follows is the one left when the Certificate has stayed Ready, not Issuing, at one
    // revision for 2 s.
    let issued = settled_revision(&cp);
    let first = tls_secret(&cp).expect("the Secret of a settled Certificate");

    let text = openssl_text(&cp, &first.crt, &["-text"]);
    assert!(text.contains(&format!("DNS:{SAN}")), "SANs lack {SAN}:\n{text}");
    assert!(text.contains(&format!("DNS:{SAN}.cluster.local")), "SANs lack {SAN}.cluster.local:\n{text}");
    assert!(text.contains("TLS Web Server Authentication"), "no serverAuth usage:\n{text}");
    // Issued by edgegate's CA, which is what ca.crt holds.
    let ca_subject = openssl_text(&cp, &first.ca, &["-subject"]);
    assert!(ca_subject.contains("edgegate-ca"), "ca.crt is not edgegate's CA: {ca_subject}");
    verify_chain(&cp, &first);

    // CA injection from a Certificate (cert-manager.io/inject-ca-from) into a
    // ValidatingWebhookConfiguration, and from a Secret (inject-ca-from-secret, which the Secret
    // must allow) into a MutatingWebhookConfiguration.
    let probe_ca = std::fs::read(cp.dir.join("ca.crt")).expect("control plane ca.crt");
    let t = Instant::now();
    apply_yaml(&cp, "injection.yaml", &injection_objects(&probe_ca));
    let applied = t.elapsed();
    wait_for(&cp, Duration::from_secs(30), "caBundle injected into the ValidatingWebhookConfiguration", || {
        (vwc_bundle(&cp) == Some(first.ca.clone())).then_some(())
    });
    eprintln!(
        "[time] inject-ca-from (Certificate) → ValidatingWebhookConfiguration caBundle {:?} after kubectl apply started (the apply itself: {applied:?})",
        t.elapsed()
    );
    wait_for(&cp, Duration::from_secs(30), "caBundle injected into the MutatingWebhookConfiguration", || {
        (mwc_bundle(&cp) == Some(probe_ca.clone())).then_some(())
    });
    eprintln!(
        "[time] inject-ca-from-secret (Secret) → MutatingWebhookConfiguration caBundle {:?} after kubectl apply started",
        t.elapsed()
    );

    // Re-issue as `cmctl renew` does: Issuing=True, reason ManuallyTriggered, on the status.
    let old_serial = openssl_text(&cp, &first.crt, &["-serial"]);
    let t = Instant::now();
    trigger_renewal(&cp, "edgegate-webhook");
    let (second, _) = wait_for(&cp, Duration::from_secs(90), "a re-issued certificate in the Secret", || {
        tls_secret(&cp).filter(|s| s.crt != first.crt)
    });
    eprintln!("[time] manual renewal → new certificate in {SECRET} in {:?}", t.elapsed());
    let new_serial = openssl_text(&cp, &second.crt, &["-serial"]);
    assert_ne!(old_serial, new_serial, "the serial did not change");
    assert_eq!(second.ca, first.ca, "ca.crt changed on renewal");
    assert_ne!(second.key, first.key, "rotationPolicy: Always, yet the private key was kept");
    verify_chain(&cp, &second);
    eprintln!("serial {} → {}", old_serial.trim(), new_serial.trim());
    wait_for(
        &cp,
        Duration::from_secs(30),
        &format!("Certificate edgegate-webhook Ready past revision {issued} and no longer Issuing"),
        || ready_revision(&cp).filter(|r| *r > issued),
    );
    assert_eq!(vwc_bundle(&cp), Some(first.ca.clone()), "caBundle no longer the CA after renewal");

    // kube-controller-manager: the garbage collector removes a dependent of a deleted owner...
    ok(&cp.kubectl(&["create", "configmap", "-n", "default", "gc-owner"]));
    let owner = get_json(&cp, &["get", "configmap", "-n", "default", "gc-owner"]).expect("owner");
    let dependent = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gc-dependent", "namespace": "default", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": owner["metadata"]["uid"],
        }]},
    });
    apply_yaml(&cp, "gc-dependent.json", &dependent.to_string());
    ok(&cp.kubectl(&["delete", "configmap", "-n", "default", "gc-owner", "--wait=false"]));
    let (_, took) = wait_for(&cp, Duration::from_secs(60), "the dependent ConfigMap collected", || {
        gone(&cp.kubectl(&["get", "configmap", "-n", "default", "gc-dependent"]))
    });
    eprintln!("[time] owner deleted → dependent garbage-collected in {took:?}");

    // ...and the namespace controller empties and removes deleted namespaces: one holding a
    // ConfigMap, then edgegate-system with everything cert-manager made in it.
    ok(&cp.kubectl(&["create", "namespace", "kcm-probe"]));
    ok(&cp.kubectl(&["create", "configmap", "-n", "kcm-probe", "probe", "--from-literal=k=v"]));
    for ns in ["kcm-probe", NS] {
        ok(&cp.kubectl(&["delete", "namespace", ns, "--wait=false"]));
        let (_, took) = wait_for(&cp, Duration::from_secs(60), &format!("namespace {ns} gone"), || {
            gone(&cp.kubectl(&["get", "namespace", ns]))
        });
        eprintln!("[time] namespace {ns} deleted → gone in {took:?}");
    }

    assert!(cp.is_running("cert-manager"), "cert-manager died:\n{}", cp.log_tail("cert-manager.log"));
    assert!(cp.is_running("kube-controller-manager"), "kube-controller-manager died");
    eprintln!("[time] whole test {:?}", test_start.elapsed());
}

/// The webhook configurations the CA injector fills, and the Secret one of them names.
fn injection_objects(probe_ca: &[u8]) -> String {
    let webhook = |name: &str| {
        json!({
            "name": name,
            // A Service nothing serves; failurePolicy Ignore and rules on a group nothing serves
            // keep it harmless.
            "clientConfig": {"service": {"namespace": NS, "name": "edgegate-webhook-probe", "path": "/probe", "port": 443}},
            "rules": [{"apiGroups": ["probe.edgegate.test"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["probes"]}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 1,
        })
    };
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "edgegate-cm-probe", "annotations": {"cert-manager.io/inject-ca-from": format!("{NS}/edgegate-webhook")}},
            "webhooks": [webhook("validate.probe.edgegate.test")],
        },
        {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "edgegate-probe-ca", "namespace": NS,
                         "annotations": {"cert-manager.io/allow-direct-injection": "true"}},
            "stringData": {"ca.crt": String::from_utf8_lossy(probe_ca)},
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "edgegate-cm-probe", "annotations": {"cert-manager.io/inject-ca-from-secret": format!("{NS}/edgegate-probe-ca")}},
            "webhooks": [webhook("mutate.probe.edgegate.test")],
        },
    ]});
    list.to_string()
}

/// What `cmctl renew` does: add (or replace) the condition Issuing=True, reason
/// ManuallyTriggered, through the status subresource; retried on conflicts.
fn trigger_renewal(cp: &ControlPlane, name: &str) {
    let now =
        String::from_utf8(Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date").stdout)
            .expect("utf-8");
    for attempt in 0.. {
        let mut cert = get_json(cp, &["get", "certificate", "-n", NS, name]).expect("certificate");
        let generation = cert["metadata"]["generation"].clone();
        let conditions = cert["status"]["conditions"].as_array_mut().expect("status.conditions");
        assert!(
            !conditions.iter().any(|c| c["type"] == "Issuing" && c["status"] == "True"),
            "already issuing: {conditions:?}"
        );
        conditions.retain(|c| c["type"] != "Issuing");
        conditions.push(json!({
            "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": now.trim(), "observedGeneration": generation,
        }));
        let file = cp.dir.join("renew.json");
        std::fs::write(&file, cert.to_string()).expect("write");
        let out = cp.kubectl(&["replace", "--subresource=status", "-f", &file.display().to_string()]);
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(attempt < 5 && err.contains("modified"), "setting Issuing=True: {err}");
    }
}

#[derive(Clone, PartialEq)]
struct Tls {
    crt: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
}

fn tls_secret(cp: &ControlPlane) -> Option<Tls> {
    let secret: Secret = serde_json::from_value(get_json(cp, &["get", "secret", "-n", NS, SECRET])?).ok()?;
    let data = secret.data?;
    let field = |k: &str| data.get(k).map(|b| b.0.clone()).filter(|b| !b.is_empty());
    Some(Tls { crt: field("tls.crt")?, key: field("tls.key")?, ca: field("ca.crt")? })
}

fn vwc_bundle(cp: &ControlPlane) -> Option<Vec<u8>> {
    let vwc: ValidatingWebhookConfiguration =
        serde_json::from_value(get_json(cp, &["get", "validatingwebhookconfiguration", "edgegate-cm-probe"])?).ok()?;
    vwc.webhooks?.first()?.client_config.ca_bundle.clone().map(|b| b.0)
}

fn mwc_bundle(cp: &ControlPlane) -> Option<Vec<u8>> {
    let mwc: MutatingWebhookConfiguration =
        serde_json::from_value(get_json(cp, &["get", "mutatingwebhookconfiguration", "edgegate-cm-probe"])?).ok()?;
    mwc.webhooks?.first()?.client_config.ca_bundle.clone().map(|b| b.0)
}

/// The Certificate's revision while it is Ready and not Issuing.
fn ready_revision(cp: &ControlPlane) -> Option<i64> {
    let cert = get_json(cp, &["get", "certificate", "-n", NS, "edgegate-webhook"])?;
    let conditions = cert["status"]["conditions"].as_array()?;
    let ready = conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
    let issuing = conditions.iter().any(|c| c["type"] == "Issuing" && c["status"] == "True");
    (ready && !issuing).then(|| cert["status"]["revision"].as_i64()).flatten()
}

/// The revision once the Certificate has been Ready, not Issuing, at that revision for 2 s.
fn settled_revision(cp: &ControlPlane) -> i64 {
    let mut since: Option<(i64, Instant)> = None;
    let (revision, took) = wait_for(cp, Duration::from_secs(60), "Certificate edgegate-webhook settled", || {
        let now = ready_revision(cp);
        since = match (now, since) {
            (Some(r), Some((seen, at))) if r == seen => Some((seen, at)),
            (Some(r), _) => Some((r, Instant::now())),
            (None, _) => None,
        };
        since.filter(|(_, at)| at.elapsed() >= Duration::from_secs(2)).map(|(r, _)| r)
    });
    eprintln!("[time] Certificate edgegate-webhook settled at revision {revision} ({took:?} of waiting)");
    revision
}

/// `openssl x509 -noout ARGS` on a PEM certificate.
fn openssl_text(cp: &ControlPlane, pem: &[u8], args: &[&str]) -> String {
    let file = cp.dir.join("probe.pem");
    std::fs::write(&file, pem).expect("write");
    let out = Command::new("openssl").args(["x509", "-noout", "-in"]).arg(&file).args(args).output().expect("openssl");
    ok(&out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn verify_chain(cp: &ControlPlane, tls: &Tls) {
    let (ca, crt) = (cp.dir.join("verify-ca.pem"), cp.dir.join("verify-crt.pem"));
    std::fs::write(&ca, &tls.ca).expect("write");
    std::fs::write(&crt, &tls.crt).expect("write");
    let out = Command::new("openssl").arg("verify").arg("-CAfile").arg(&ca).arg(&crt).output().expect("openssl");
    ok(&out);
}

fn apply_yaml(cp: &ControlPlane, name: &str, text: &str) {
    let file = cp.dir.join(name);
    std::fs::write(&file, text).expect("write");
    ok(&cp.kubectl(&["apply", "-f", &file.display().to_string()]));
}

fn get_json(cp: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    let out = cp.kubectl(&args);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("kubectl -o json"))
}

fn gone(out: &Output) -> Option<()> {
    (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound")).then_some(())
}

fn ok(out: &Output) {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Poll `check` every 100ms until it yields, at most `limit`; the value and how long it took.
fn wait_for<T>(cp: &ControlPlane, limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> (T, Duration) {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return (v, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}\n--- cert-manager.log\n{}\n--- kube-controller-manager.log\n{}",
            cp.log_tail("cert-manager.log"),
            cp.log_tail("kube-controller-manager.log")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
