//! The documented install, emergency and uninstall commands (docs/deploy.md), run as a user runs
//! them against a real kube-apiserver: renders applied server-side, not dry-run. No kubelet runs
//! here, so edgegate's Pods never start — which is exactly the "webhook not serving yet" moment
//! these steps are about.

use std::process::Command;

use edgegate_system_tests::cert_manager::start_cert_manager;
use edgegate_system_tests::helpers::*;
use edgegate_system_tests::netns::NetNs;
use edgegate_system_tests::pod::{Render, RunningPod};
use edgegate_system_tests::shipped::{reloads, reviews, webhook_in};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;

/// Render `resources` + `components` (paths under deploy/) as a user's kustomization, and apply it
/// server-side; the objects applied, for the pod runner.
fn apply(cp: &ControlPlane, name: &str, resources: &[&str], components: &[&str]) -> Render {
    deploy_dev_certs();
    let dir = kustomization(&format!("install-{name}"), resources, components);
    cp.kubectl_ok(&["apply", "--server-side", "-k", &dir.display().to_string()]);
    Render::of(&dir)
}

/// Create a copy the record does not name, as a cell would; `Err` carries the refusal.
async fn write_copy(client: &Client, ns: &str, name: &str) -> Result<(), String> {
    create(client, ns, &slice("install", name, true, &["fd20:0:99::1"]), false).await
}

/// A copy write refused because no webhook serves: fail closed while enforcing; the documented
/// emergency command lets the same write through at once and stops the pruner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emergency_off_lets_copy_writes_through_at_once() {
    let cp = ControlPlane::own();
    let client = cp.client().await;
    apply(&cp, "enforce-dev", &["base"], &["components/dev-certs", "components/enforce", "components/images"]);
    namespace(&client, "cell-a", &[]).await;
    set_record(&client, "cell-a", &[]).await;
    eventually(Duration::from_secs(30), "the enforcing configuration refuses (no webhook serves)", async || {
        write_copy(&client, "cell-a", "probe").await.is_err_and(|e| e.contains("edgegate"))
    })
    .await;
    // Refused at once for want of an endpoint: the API server resolves the Service through its
    // EndpointSlices and dials nothing (not the ClusterIP, which nothing here routes).
    let refusal = write_copy(&client, "cell-a", "probe").await.expect_err("refused");
    eprintln!("enforcing with no webhook serving: {refusal}");
    assert!(refusal.contains("no endpoints available"), "{refusal}");

    let started = Instant::now();
    cp.kubectl_ok(&["delete", EMERGENCY_KINDS, "-A", "-l", "edgegate.datumapis.com/enforces=true"]);
    let took = eventually(Duration::from_secs(30), "copy writes go through", async || {
        write_copy(&client, "cell-a", "after").await.is_ok()
    })
    .await;
    eprintln!("emergency off: copy writes accepted {:?} after the command began", started.elapsed());
    assert!(took < Duration::from_secs(10), "at once: {took:?}");
    let left = cp.kubectl_ok(&["-n", "edgegate-system", "get", "deployments", "-o", "name"]);
    assert_eq!(left.trim(), "deployment.apps/edgegate-webhook", "the pruner is gone, the webhook stays");
}

/// What docs/deploy.md's emergency command deletes, by the label `edgegate.datumapis.com/enforces`.
const EMERGENCY_KINDS: &str = "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicybindings,validatingadmissionpolicies,deployments,statefulsets";

/// With components/policy the API server refuses by itself; the same emergency command stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emergency_off_stops_the_policy_mode_too() {
    let cp = ControlPlane::own();
    let client = cp.client().await;
    apply(
        &cp,
        "emergency-policy",
        &["base"],
        &["components/policy", "components/dev-certs", "components/enforce", "components/images"],
    );
    namespace(&client, "cell-p", &[]).await;
    set_record(&client, "cell-p", &[]).await;
    let refusal = eventually(Duration::from_secs(30), "the policy refuses an unnamed copy", async || {
        write_copy(&client, "cell-p", "before").await.is_err_and(|e| e.contains("is not carried"))
    })
    .await;
    eprintln!("policy mode: refusing {refusal:?} after the apply");
    cp.kubectl_ok(&["delete", EMERGENCY_KINDS, "-A", "-l", "edgegate.datumapis.com/enforces=true"]);
    let took = eventually(Duration::from_secs(30), "copy writes go through", async || {
        write_copy(&client, "cell-p", "after").await.is_ok()
    })
    .await;
    eprintln!("emergency off (policy mode): copy writes accepted after {took:?}");
}

/// The documented uninstall leaves the CRD and the records, and nothing else of edgegate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_keeps_the_crd_and_every_record() {
    let cp = ControlPlane::own();
    let client = cp.client().await;
    apply(
        &cp,
        "uninstall",
        &["base"],
        &["components/trim", "components/dev-certs", "components/enforce", "components/images"],
    );
    namespace(&client, "cell-b", &[]).await;
    set_record(&client, "cell-b", &["fd20:0:99::1"]).await;

    cp.kubectl_ok(&[
            "delete",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicybindings,validatingadmissionpolicies",
            "-l",
            "app.kubernetes.io/part-of=edgegate",
        ],
    );
    cp.kubectl_ok(&["delete", "namespace", "edgegate-system", "--wait=false"]);
    cp.kubectl_ok(&[
        "delete",
        "clusterroles,clusterrolebindings,priorityclasses",
        "-l",
        "app.kubernetes.io/part-of=edgegate",
    ]);

    let left = cp.kubectl_ok(&[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations,validatingadmissionpolicybindings,validatingadmissionpolicies,clusterroles,clusterrolebindings,priorityclasses",
            "-l",
            "app.kubernetes.io/part-of=edgegate",
            "-o",
            "name",
        ],
    );
    assert!(left.trim().is_empty(), "left behind: {left}");
    cp.kubectl_ok(&["get", "crd", "edgereachabilities.networking.datumapis.com"]);
    let records: Api<edgegate::EdgeReachability> = Api::namespaced(client.clone(), "cell-b");
    assert_eq!(records.get("default").await.expect("the record stays").entries(), ["fd20:0:99::1"]);
    // Nothing refuses a copy any more.
    write_copy(&client, "cell-b", "after").await.expect("a copy write after the uninstall");
}

/// The observe step, applied whole before anything serves, refuses no copy: the webhook is
/// ignored while unreachable. Enforcement is the second apply, made once the webhook serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observe_step_refuses_nothing_before_the_webhook_serves() {
    // Audited: each create's audit event says whether the API server called a webhook and
    // ignored its failure (the `failed-open.*` annotations).
    let cp = ControlPlane::own_audited();
    let client = cp.client().await;
    apply(&cp, "observe-dev", &["base"], &["components/trim", "components/dev-certs", "components/images"]);
    namespace(&client, "cell-c", &[]).await;
    set_record(&client, "cell-c", &[]).await;
    // Wait until the API server calls both configurations (and fails open on each: nothing
    // serves), then write: a refusal now would be a refusal for want of a server.
    let mut probe = 0;
    let took = eventually(Duration::from_secs(30), "both webhooks called and ignored", async || {
        probe += 1;
        write_copy(&client, "cell-c", &format!("probe-{probe}")).await.expect("observing, nothing is refused");
        let (validating, mutating) = failed_open(&cp, "probe-");
        validating > 0 && mutating > 0
    })
    .await;
    eprintln!("configurations in effect (called, failing open) after {took:?}");
    for i in 0..20 {
        write_copy(&client, "cell-c", &format!("c-{i}")).await.expect("observing, nothing is refused");
    }
    let (validating, mutating) = failed_open(&cp, "c-");
    assert_eq!((validating, mutating), (20, 20), "every create called both webhooks and ignored their failure");
    let policies = cp.kubectl_ok(&[
        "get",
        "validatingwebhookconfiguration,mutatingwebhookconfiguration",
        "edgegate",
        "-o",
        "jsonpath={.items[*].webhooks[0].failurePolicy}",
    ]);
    assert_eq!(policies.split_whitespace().collect::<Vec<_>>(), ["Ignore", "Ignore"], "{policies}");
}

/// Of the copies created under names starting with `prefix`, how many the API server admitted
/// after calling the validating and the mutating webhook and ignoring their failure (their audit
/// events' `failed-open.*` annotations).
fn failed_open(cp: &ControlPlane, prefix: &str) -> (usize, usize) {
    let log = std::fs::read_to_string(cp.dir.join("audit.log")).unwrap_or_default();
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "endpointslices")
        .filter(|e| e["objectRef"]["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .filter(|e| e["responseStatus"]["code"] == 201)
        .collect();
    let with = |key: &str| {
        events
            .iter()
            .filter(|e| e["annotations"].as_object().is_some_and(|a| a.keys().any(|k| k.starts_with(key))))
            .count()
    };
    (with("failed-open.validating.webhook.admission.k8s.io/"), with("failed-open.mutation.webhook.admission.k8s.io/"))
}

async fn serving_secret(client: &Client) -> Secret {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "edgegate-system");
    let mut found = None;
    eventually(Duration::from_secs(120), "cert-manager issues edgegate-webhook-tls", async || {
        found = secrets.get_opt("edgegate-webhook-tls").await.ok().flatten().filter(|s| {
            s.data.as_ref().is_some_and(|d| ["tls.crt", "tls.key", "ca.crt"].iter().all(|k| d.contains_key(*k)))
        });
        found.is_some()
    })
    .await;
    found.expect("secret")
}

/// What `cmctl renew` does: the Certificate's Issuing condition, reason ManuallyTriggered.
async fn renew(client: &Client, name: &str) {
    let certificates: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "edgegate-system",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
            "certificates",
        ),
    );
    let now = jiff_now();
    let mut cert = certificates.get(name).await.expect("certificate");
    let status = cert.data["status"].as_object_mut().expect("status");
    let conditions = status.entry("conditions").or_insert(json!([])).as_array_mut().expect("conditions");
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(json!({"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                           "message": "re-issued by the renewal test", "lastTransitionTime": now}));
    certificates.replace_status(name, &Default::default(), &cert).await.expect("Issuing=True");
}

fn jiff_now() -> String {
    let out = Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%SZ"]).output().expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn serial(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().and_then(|d| d.get("tls.crt")).map(|b| b.0.clone()).unwrap_or_default()
}

/// The whole path a hub operator takes, on a real API server with the real cert-manager, the
/// webhook called through the rendered configuration unmodified (its Service, port and path; the
/// API server verifying the certificate for edgegate-webhook.edgegate-system.svc against the CA
/// cainjector put in the caBundle): observe, check it serves, enforce; then a renewal of the
/// serving certificate while copies are written, reaching the two replicas late and at different
/// times as their kubelets deliver it, with no admission failing. The replicas are the render's
/// Pods, each in a network namespace of its own, published behind the Service by
/// kube-controller-manager's EndpointSlice controller; their mode is the render's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_then_enforce_with_the_real_cert_manager_through_the_service() {
    if !runs_as_root("a network namespace") {
        return;
    }
    let cp = ControlPlane::own();
    start_cert_manager(&cp);
    cp.start_controller_manager();
    let client = cp.client().await;
    let started = Instant::now();
    let observe = apply(&cp, "observe-cert-manager", &["base"], &["components/cert-manager", "components/images"]);
    let secret = serving_secret(&client).await;
    let ca = secret.data.as_ref().and_then(|d| d.get("ca.crt")).map(|b| b.0.clone()).expect("ca.crt");
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    eventually(Duration::from_secs(60), "cainjector fills the caBundle", async || {
        vwcs.get("edgegate")
            .await
            .ok()
            .and_then(|v| v.webhooks?.first()?.client_config.ca_bundle.clone())
            .is_some_and(|b| b.0 == ca)
    })
    .await;
    eprintln!("observe step: certificate issued and caBundle injected {:?} after apply", started.elapsed());

    let netns = NetNs::create_many(2);
    namespace(&client, "cell-e", &[]).await;
    set_record(&client, "cell-e", &["fd20:0:e::1"]).await;
    let a = webhook_in(&cp, &observe, 0, &netns[0], Duration::ZERO).await;
    // Observing (the render's EDGEGATE_MODE=warn): an unnamed copy is admitted, after a call that
    // went through the Service.
    eventually(Duration::from_secs(30), "the API server calls the webhook through its Service", async || {
        let before = reviews(&a);
        let name = format!("warned-{}", started.elapsed().as_millis());
        write_copy_at(&client, "cell-e", &name, "fd20:0:e::9").await.is_ok() && reviews(&a) > before
    })
    .await;

    // Enforce: the second apply, then the replicas roll to the enforcing Pod template. Their
    // kubelets deliver a changed Secret 3 s and 8 s after it changes.
    let enforce = apply(
        &cp,
        "enforce-cert-manager",
        &["base"],
        &["components/cert-manager", "components/enforce", "components/images"],
    );
    drop(a);
    let a = webhook_in(&cp, &enforce, 0, &netns[0], Duration::from_secs(3)).await;
    let b = webhook_in(&cp, &enforce, 1, &netns[1], Duration::from_secs(8)).await;
    eventually(Duration::from_secs(30), "an unnamed copy refused through the Service", async || {
        write_copy_at(&client, "cell-e", "refused", "fd20:0:e::9").await.is_err_and(|e| e.contains("is not carried"))
    })
    .await;
    write_copy_at(&client, "cell-e", "named", "fd20:0:e::1").await.expect("a named copy is admitted");

    // Renewal under load: copies written continuously while the certificate is re-issued and its
    // Secret reaches replica a, then replica b, as their kubelets project it.
    let load = Load::start(&client, "cell-e", "fd20:0:e::1");
    let old = serial(&secret);
    let (a_reloads, b_reloads) = (reloads(&a), reloads(&b));
    let renewed_at = Instant::now();
    renew(&client, "edgegate-webhook").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "edgegate-system");
    eventually(Duration::from_secs(90), "a re-issued certificate", async || {
        secrets.get("edgegate-webhook-tls").await.is_ok_and(|s| serial(&s) != old)
    })
    .await;
    let changed = Instant::now();
    eprintln!("renewal: new certificate in the Secret {:?} after the trigger", renewed_at.elapsed());
    let (took_a, took_b) = reloaded_in_turn(&a, a_reloads, &b, b_reloads, Duration::from_secs(30)).await;
    eprintln!(
        "renewal: replica a took the new certificate {took_a:.1?} after the Secret changed, replica b {took_b:.1?} after"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop_without_failures("renewal", renewed_at).await;
    eprintln!("renewal: {:?} from the Secret's change to the end of the load", changed.elapsed());
    drop((a, b));
    cp.assert_nothing_refused();
}

/// Wait until replica `a` has reloaded its certificate (more than `a_before` reloads), then
/// replica `b`; fails if `b` reloads first or either takes longer than `limit`. How long after
/// the call each did.
async fn reloaded_in_turn(
    a: &RunningPod,
    a_before: u64,
    b: &RunningPod,
    b_before: u64,
    limit: Duration,
) -> (Duration, Duration) {
    let took_a = eventually(limit, "replica a serves the new certificate", async || {
        assert_eq!(reloads(b), b_before, "replica b took the new certificate before replica a");
        reloads(a) > a_before
    })
    .await;
    let since = Instant::now();
    eventually(limit, "replica b serves the new certificate", async || reloads(b) > b_before).await;
    (took_a, took_a + since.elapsed())
}

/// The caBundle of edgegate's ValidatingWebhookConfiguration, as certificates.
async fn ca_bundle(client: &Client) -> Vec<edgegate_webhook::ca_bundle::BundleCert> {
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let bundle = vwcs.get("edgegate").await.ok().and_then(|v| v.webhooks?.first()?.client_config.ca_bundle.clone());
    edgegate_webhook::ca_bundle::pem_blocks(&bundle.map(|b| b.0).unwrap_or_default())
}

fn ca_of(secret: &Secret) -> Vec<edgegate_webhook::ca_bundle::BundleCert> {
    edgegate_webhook::ca_bundle::pem_blocks(
        secret.data.as_ref().and_then(|d| d.get("ca.crt")).map(|b| b.0.as_slice()).unwrap_or_default(),
    )
}

/// A rotation of edgegate's CA while copies are written, with components/ca-keeper: the replicas
/// (the render's Pods, on the webhook ServiceAccount's tokens, so with the render's RBAC, each in
/// a network namespace of its own behind the Service) keep the caBundle themselves. cert-manager
/// re-issues the CA, then the serving certificate from it; replica a's kubelet delivers the Secret
/// 3 s after it changes, and a serves it once its CA is trusted; replica b's kubelet 8 s after
/// that. Both CAs are trusted from before a presents the new certificate until after b does;
/// then the bundle narrows to the new CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ca_rotation_under_load_with_the_keeper() {
    if !runs_as_root("a network namespace") {
        return;
    }
    let cp = ControlPlane::own();
    start_cert_manager(&cp);
    cp.start_controller_manager();
    let client = cp.client().await;
    // The keeper keeps the old CA 10 minutes by default; 20 s here, so the test sees it go.
    let keep_old: &[(&str, &[&str])] = &[("edgegate-webhook", &["--ca-bundle-keep-old=20s"])];
    let observe = ["components/cert-manager", "components/ca-keeper", "components/images"];
    let observe = Render::tuned("install-observe-ca-keeper", &["base"], &observe, keep_old);
    observe.apply(&cp, |_| true);
    let secret = serving_secret(&client).await;
    let first_ca = ca_of(&secret);

    let netns = NetNs::create_many(2);
    namespace(&client, "cell-r", &[]).await;
    set_record(&client, "cell-r", &["fd20:0:f::1"]).await;
    let a = webhook_in(&cp, &observe, 0, &netns[0], Duration::ZERO).await;
    eventually(Duration::from_secs(30), "the keeper fills the caBundle", async || ca_bundle(&client).await == first_ca)
        .await;
    // Enforce, and the replicas roll to the enforcing template. Their kubelets deliver a changed
    // Secret 3 s and 16 s after it changes: a's, then the keeper's --ca-bundle-settle (5 s) before
    // a serves it, then 8 s. (b takes it at once: a has put its CA in the bundle.)
    let enforce = ["components/cert-manager", "components/ca-keeper", "components/enforce", "components/images"];
    let enforce = Render::tuned("install-enforce-ca-keeper", &["base"], &enforce, keep_old);
    enforce.apply(&cp, |_| true);
    drop(a);
    let a = webhook_in(&cp, &enforce, 0, &netns[0], Duration::from_secs(3)).await;
    let b = webhook_in(&cp, &enforce, 1, &netns[1], Duration::from_secs(16)).await;
    eventually(Duration::from_secs(30), "an unnamed copy refused through the Service", async || {
        write_copy_at(&client, "cell-r", "refused", "fd20:0:f::9").await.is_err_and(|e| e.contains("is not carried"))
    })
    .await;

    let load = Load::start(&client, "cell-r", "fd20:0:f::1");
    let rotated_at = Instant::now();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "edgegate-system");
    let old_ca = secrets.get("edgegate-ca").await.expect("CA secret");
    let (a_reloads, b_reloads) = (reloads(&a), reloads(&b));
    renew(&client, "edgegate-ca").await;
    eventually(Duration::from_secs(90), "a new CA", async || {
        secrets.get("edgegate-ca").await.is_ok_and(|s| serial(&s) != serial(&old_ca))
    })
    .await;
    renew(&client, "edgegate-webhook").await;
    let mut second_ca = Vec::new();
    eventually(Duration::from_secs(90), "a serving certificate from the new CA", async || {
        let renewed = secrets.get("edgegate-webhook-tls").await.ok().map(|s| ca_of(&s)).unwrap_or_default();
        let new = !renewed.is_empty() && renewed != first_ca;
        if new {
            second_ca = renewed;
        }
        new
    })
    .await;
    eprintln!("CA rotation: new CA and certificate in the Secret {:?} after the trigger", rotated_at.elapsed());

    let took_a = eventually(Duration::from_secs(30), "replica a serves the new certificate", async || {
        assert_eq!(reloads(&b), b_reloads, "replica b took the new certificate before replica a");
        reloads(&a) > a_reloads
    })
    .await;
    let both: Vec<_> = first_ca.iter().chain(&second_ca).cloned().collect();
    assert_eq!(ca_bundle(&client).await, both, "while b serves the old certificate, both CAs are trusted");
    let since = Instant::now();
    eventually(Duration::from_secs(30), "replica b serves the new certificate", async || reloads(&b) > b_reloads).await;
    eprintln!(
        "CA rotation: replica a took the new certificate {took_a:.1?} after the Secret changed, replica b {:.1?} after",
        took_a + since.elapsed()
    );
    let narrowed = eventually(Duration::from_secs(60), "the bundle narrowed to the new CA", async || {
        ca_bundle(&client).await == second_ca
    })
    .await;
    eprintln!("CA rotation: bundle narrowed {narrowed:?} after b took the new certificate");
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop_without_failures("CA rotation", rotated_at).await;
    drop((a, b));
    cp.assert_nothing_refused();
}

/// Copies written continuously (one every 20 ms) naming `address`, as a cell writes them.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    writer: tokio::task::JoinHandle<(u64, Vec<String>)>,
}

impl Load {
    fn start(client: &Client, ns: &str, address: &str) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (client, ns, address, stopped) =
            (client.clone(), ns.to_owned(), address.to_owned(), std::sync::Arc::clone(&stop));
        let writer = tokio::spawn(async move {
            let (mut admitted, mut failed) = (0u64, Vec::new());
            let mut i = 0;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match write_copy_at(&client, &ns, &format!("load-{i}"), &address).await {
                    Ok(()) => admitted += 1,
                    Err(e) => failed.push(e),
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (admitted, failed)
        });
        Load { stop, writer }
    }

    /// Stop, print the figures, and fail if any write failed or too few ran.
    async fn stop_without_failures(self, what: &str, since: Instant) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (admitted, failed) = self.writer.await.expect("load");
        eprintln!("{what} under load: {admitted} copies admitted, {} failed, over {:?}", failed.len(), since.elapsed());
        assert!(admitted > 100, "the load ran: {admitted}");
        assert!(failed.is_empty(), "admissions failed during the {what}: {failed:?}");
    }
}

async fn write_copy_at(client: &Client, ns: &str, name: &str, address: &str) -> Result<(), String> {
    create(client, ns, &slice("install", name, true, &[address]), false).await
}

/// Every component, and the Karmada pair, applied for real (server-side, not dry-run) to one API
/// server with cert-manager's CRDs served by the real cert-manager and the Prometheus Operator's
/// by stand-ins: what each documented combination creates is accepted and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_component_and_the_karmada_pair_apply_for_real() {
    let cp = ControlPlane::own();
    start_cert_manager(&cp);
    let client = cp.client().await;
    for (kind, plural) in [("PodMonitor", "podmonitors"), ("PrometheusRule", "prometheusrules")] {
        stand_in_crd(&client, "monitoring.coreos.com", kind, plural).await;
    }
    cp.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ]);
    apply(
        &cp,
        "everything",
        &["base"],
        &[
            "components/producer",
            "components/monitoring",
            "components/trim",
            "components/cert-manager",
            "components/enforce",
            "components/images",
        ],
    );
    for (kind, name) in [
        ("deployment", "edgegate-producer"),
        ("prometheusrule", "edgegate"),
        ("podmonitor", "edgegate-pruner"),
        ("configmap", "edgegate-dashboard"),
        ("certificate", "edgegate-webhook"),
        ("priorityclass", "edgegate-webhook"),
    ] {
        cp.kubectl_ok(&["-n", "edgegate-system", "get", kind, name]);
    }
    cp.kubectl_ok(&["get", "mutatingwebhookconfiguration", "edgegate"]);
    // The Karmada pair on one API server (hub objects and host workloads do not overlap), and a
    // without-crd install over it: the CRD stays, as the component promises.
    apply(&cp, "karmada-hub", &["overlays/karmada-hub/hub"], &[]);
    apply(&cp, "karmada-host", &["overlays/karmada-hub/host"], &[]);
    apply(&cp, "without-crd", &["base"], &["components/without-crd", "components/cert-manager", "components/images"]);
    cp.kubectl_ok(&["get", "crd", "edgereachabilities.networking.datumapis.com"]);
}

/// Service → named `targetPort` → `containerPort` → `--listen`, checked by Kubernetes rather than
/// the test: the webhook's Deployment from overlays/dev run by the pod runner inside a network
/// namespace (its own network: it listens where the render says, 0.0.0.0:8443), its Pod reported
/// Running at the namespace's address and Ready as its readiness probe says, and
/// kube-controller-manager's EndpointSlice controller publishing it behind the render's Service.
/// The API server then calls it through that Service, with the render's configuration unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_reaches_the_webhook_pod_through_its_service() {
    use edgegate_system_tests::pod::{Render, Rewrite, kustomization_with, run_in};
    if !runs_as_root("a network namespace for the webhook's Pod") {
        return;
    }
    let cp = ControlPlane::own();
    cp.start_controller_manager();
    let client = cp.client().await;
    deploy_dev_certs();
    let render = Render::of(&kustomization_with("install-service", &["overlays/dev"], &[], ""));
    render.apply(&cp, |_| true);
    namespace(&client, "routed", &[]).await;
    set_record(&client, "routed", &["fd20:0:1e::1"]).await;

    let netns = NetNs::create();
    let started = Instant::now();
    let pod = run_in(&cp, &render, "edgegate-webhook", 0, &[Rewrite::MountPath], &netns).await;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "edgegate-system");
    let selector = "kubernetes.io/service-name=edgegate-webhook,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";
    let routed =
        eventually(Duration::from_secs(60), "the controller's EndpointSlice names the Pod, ready", async || {
            let list = slices.list(&kube::api::ListParams::default().labels(selector)).await.map(|l| l.items);
            list.unwrap_or_default().iter().any(|s| {
                let ready = s.endpoints.iter().flatten().any(|e| {
                    e.addresses.contains(&netns.address) && e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                });
                let https =
                    s.ports.iter().flatten().any(|p| p.name.as_deref() == Some("https") && p.port == Some(8443));
                ready && https
            })
        })
        .await;
    eprintln!(
        "webhook Pod started → published ready behind its Service after {:?} ({routed:?} of waiting)",
        started.elapsed()
    );
    eventually(Duration::from_secs(30), "the API server calls the webhook through its Service", async || {
        write_copy_at(&client, "routed", "probe", "fd20:0:1e::9").await.is_err_and(|e| e.contains("routed"))
    })
    .await;
    write_copy_at(&client, "routed", "served", "fd20:0:1e::1").await.expect("a named copy is admitted");
    let refused = write_copy_at(&client, "routed", "unserved", "fd20:0:1e::9").await.expect_err("refused");
    assert!(refused.contains("fd20:0:1e::9"), "edgegate's refusal, naming the address: {refused}");
    eprintln!("the webhook Pod's rewrites (none of its listen addresses): {:#?}", pod.rewrites);
    cp.assert_nothing_refused();
}
