//! The documented install, emergency and uninstall commands (docs/deploy.md), run as a user runs
//! them against a real kube-apiserver: renders applied server-side, not dry-run. No kubelet runs
//! here, so edgegate's Pods never start — which is exactly the "webhook not serving yet" moment
//! these steps are about.

use std::process::Command;

use edgegate_system_tests::helpers::*;

fn kubectl(cp: &ControlPlane, args: &[&str]) -> std::process::Output {
    Command::new("kubectl").arg("--kubeconfig").arg(&cp.kubeconfig).args(args).output().expect("kubectl runs")
}

fn ok(cp: &ControlPlane, args: &[&str]) -> String {
    let out = kubectl(cp, args);
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Render `resources` + `components` (paths under deploy/) as a user's kustomization, and apply it
/// server-side.
fn apply(cp: &ControlPlane, name: &str, resources: &[&str], components: &[&str]) {
    deploy_dev_certs();
    let dir = repo().join("target/install-test").join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let list = |paths: &[&str]| paths.iter().map(|p| format!("  - ../../../deploy/{p}\n")).collect::<String>();
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{}components:\n{}",
        list(resources),
        list(components)
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).expect("write");
    ok(cp, &["apply", "--server-side", "-k", &dir.display().to_string()]);
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
    ok(
        &cp,
        &[
            "delete",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations,deployments",
            "-A",
            "-l",
            "edgegate.datumapis.com/enforces=true",
        ],
    );
    let took = eventually(Duration::from_secs(30), "copy writes go through", async || {
        write_copy(&client, "cell-a", "after").await.is_ok()
    })
    .await;
    eprintln!("emergency off: copy writes accepted {:?} after the command began", started.elapsed());
    assert!(took < Duration::from_secs(10), "at once: {took:?}");
    let left = ok(&cp, &["-n", "edgegate-system", "get", "deployments", "-o", "name"]);
    assert_eq!(left.trim(), "deployment.apps/edgegate-webhook", "the pruner is gone, the webhook stays");
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

    ok(
        &cp,
        &[
            "delete",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            "-l",
            "app.kubernetes.io/part-of=edgegate",
        ],
    );
    ok(&cp, &["delete", "namespace", "edgegate-system", "--wait=false"]);
    ok(
        &cp,
        &["delete", "clusterroles,clusterrolebindings,priorityclasses", "-l", "app.kubernetes.io/part-of=edgegate"],
    );

    let left = ok(
        &cp,
        &[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations,clusterroles,clusterrolebindings,priorityclasses",
            "-l",
            "app.kubernetes.io/part-of=edgegate",
            "-o",
            "name",
        ],
    );
    assert!(left.trim().is_empty(), "left behind: {left}");
    ok(&cp, &["get", "crd", "edgereachabilities.networking.datumapis.com"]);
    let records: Api<edgegate::EdgeReachability> = Api::namespaced(client.clone(), "cell-b");
    assert_eq!(records.get("default").await.expect("the record stays").entries(), ["fd20:0:99::1"]);
    // Nothing refuses a copy any more.
    write_copy(&client, "cell-b", "after").await.expect("a copy write after the uninstall");
}

/// The observe step, applied whole before anything serves, refuses no copy: the webhook is
/// ignored while unreachable. Enforcement is the second apply, made once the webhook serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observe_step_refuses_nothing_before_the_webhook_serves() {
    let cp = ControlPlane::own();
    let client = cp.client().await;
    apply(&cp, "observe-dev", &["base"], &["components/trim", "components/dev-certs", "components/images"]);
    namespace(&client, "cell-c", &[]).await;
    set_record(&client, "cell-c", &[]).await;
    // Wait until the API server has the configurations (it calls them: an error is logged and
    // ignored), then write: a refusal now would be a refusal for want of a server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..20 {
        write_copy(&client, "cell-c", &format!("c-{i}")).await.expect("observing, nothing is refused");
    }
    let policies = ok(
        &cp,
        &[
            "get",
            "validatingwebhookconfiguration,mutatingwebhookconfiguration",
            "edgegate",
            "-o",
            "jsonpath={.items[*].webhooks[0].failurePolicy}",
        ],
    );
    assert_eq!(policies.split_whitespace().collect::<Vec<_>>(), ["Ignore", "Ignore"], "{policies}");
}
