//! edgegate-producer discovering its projects from Milo, as installed with components/producer
//! and components/producer-milo, against the Milo stand-in (tests/system/src/milo.rs: a TLS path
//! proxy in front of one real kube-apiserver serving every project by path, with the Project
//! CRD of tests/crds/milo.yaml at its root), under the producer's own ServiceAccount on the hub
//! and its own identity on Milo (the render's roles bound to it).

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::milo::{Fault, Milo, PROJECT_LABEL};
use edgegate_system_tests::pod::{Render, Rewrite, run};
use edgegate_system_tests::shipped;
use edgegate_system_tests::soak::project::{put, resource};
use kube::api::{DynamicObject, Patch, PatchParams};

fn kubectl_apply(cp: &ControlPlane, file: &str) {
    let out = std::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .args(["apply", "--server-side", "-f"])
        .arg(repo().join(file))
        .output()
        .expect("kubectl");
    assert!(out.status.success(), "applying {file}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Project `name` at Milo's root, its Ready condition `ready`.
async fn project(backing: &Client, name: &str, ready: &str) {
    let api: Api<DynamicObject> = Api::all_with(backing.clone(), &milo_project());
    let body =
        json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": {"name": name}});
    api.patch(name, &PatchParams::apply("milo").force(), &Patch::Apply(&body)).await.expect("Project");
    let status = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test", "message": "",
                                   "lastTransitionTime": "2026-12-05T00:00:00Z"}]}});
    api.patch_status(name, &PatchParams::apply("milo").force(), &Patch::Apply(&status)).await.expect("Project status");
}

fn milo_project() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("resourcemanager.miloapis.com", "v1alpha1", "Project"),
        "projects",
    )
}

/// A namespace of project `p` serving `address` (proxy → service → held interface), every object
/// labelled for `p`, and its hub namespace labelled `cluster-<p>`; returns the hub namespace.
async fn served(backing: &Client, hub: &Client, p: &str, ns: &str, address: &str) -> String {
    namespace(backing, ns, &[(PROJECT_LABEL, p)]).await;
    let uid = Api::<Namespace>::all(backing.clone()).get(ns).await.expect("ns").metadata.uid.expect("uid");
    let hub_ns = format!("ns-{uid}");
    namespace(hub, &hub_ns, &[("meta.datumapis.com/upstream-cluster-name", &format!("cluster-{p}"))]).await;
    let labels = json!({PROJECT_LABEL: p, "app": "web"});
    let objects = [
        (
            "NetworkService",
            json!({"metadata": {"labels": labels}, "spec": {"networkInterfaces": {"selector": {"matchLabels": {"app": "web"}}}}}),
        ),
        (
            "NetworkInterface",
            json!({"metadata": {"labels": labels}, "spec": {"addresses": [{"address": address}]}, "status": {"phase": "Bound"}}),
        ),
        (
            "HTTPProxy",
            json!({"metadata": {"labels": labels}, "spec": {"rules": [{"backends": [{"networkService": {"name": "web"}}]}]}}),
        ),
    ];
    for (kind, body) in objects {
        put(backing, ns, kind, "web", body).await.expect("project object");
    }
    hub_ns
}

async fn record(hub: &Client, hub_ns: &str) -> Option<Vec<String>> {
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(hub.clone(), hub_ns);
    api.get_opt("default").await.expect("get record").map(|r| r.entries().to_vec())
}

/// Projects come and go in Milo: a Ready one is engaged and its records written; one not ready
/// is left (no record) until it turns Ready; one whose requests Milo answers 500 goes unsynced
/// alone, the others served; a deleted one is disengaged and its record left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_discovered_from_milo_each_on_its_own() {
    let hub_cp = ControlPlane::own();
    let backing_cp = ControlPlane::own();
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    install_crd(&hub).await;
    kubectl_apply(&backing_cp, "tests/crds/project.yaml");
    kubectl_apply(&backing_cp, "tests/crds/milo.yaml");
    let projects: Api<DynamicObject> = Api::all_with(backing.clone(), &milo_project());
    let proxies: Api<DynamicObject> = Api::all_with(backing.clone(), &resource("HTTPProxy", "httpproxies"));
    eventually(Duration::from_secs(30), "Milo's CRDs served", async || {
        projects.list(&Default::default()).await.is_ok() && proxies.list(&Default::default()).await.is_ok()
    })
    .await;
    let milo = Milo::start(&backing_cp).await;

    let render = Render::of(&edgegate_system_tests::pod::kustomization_with(
        "milo",
        &["base"],
        &[
            "components/dev-certs",
            "components/producer",
            "components/producer-milo",
            "components/enforce",
            "components/images",
        ],
        "",
    ));
    render.apply_but_admission(&hub_cp);
    shipped::hand_milo_over(&hub_cp, &render, &backing_cp, &milo).await;
    project(&backing, "alpha", "True").await;
    project(&backing, "beta", "False").await;
    let a = served(&backing, &hub, "alpha", "alpha-web", "fd20:0:a1::1").await;
    let b = served(&backing, &hub, "beta", "beta-web", "fd20:0:b1::1").await;

    let started = Instant::now();
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    let producer = &pod.process;
    let took = eventually(Duration::from_secs(30), "alpha's record", async || {
        record(&hub, &a).await == Some(vec!["fd20:0:a1::1".to_owned()])
    })
    .await;
    eprintln!("milo: producer started → the Ready project's record written after {:?}", started.elapsed());
    let _ = took;
    assert_eq!(record(&hub, &b).await, None, "beta is not ready: not engaged, nothing written");
    assert!(metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 1"), "{}", metrics(producer));

    let ready = Instant::now();
    project(&backing, "beta", "True").await;
    eventually(Duration::from_secs(30), "beta's record once Ready", async || {
        record(&hub, &b).await == Some(vec!["fd20:0:b1::1".to_owned()])
    })
    .await;
    eprintln!("milo: Project turned Ready → its record written after {:?}", ready.elapsed());

    // Milo answers alpha's requests 500: alpha alone goes unsynced (its next watch request, within
    // the watch's 10 s), beta is served on.
    milo.set_fault("alpha", Some(Fault::Status(500)));
    let took = eventually(Duration::from_secs(30), "alpha unsynced", async || {
        metrics(producer).contains("edgegate_producer_project_synced{project=\"alpha\"} 0")
    })
    .await;
    eprintln!("milo: alpha answered 500 → unsynced after {took:?}");
    assert!(!metrics(producer).contains("project=\"beta\""), "beta is whole: no series of its own");
    put(
        &backing,
        "beta-web",
        "NetworkInterface",
        "web-2",
        json!({"metadata": {"labels": {PROJECT_LABEL: "beta", "app": "web"}},
        "spec": {"addresses": [{"address": "fd20:0:b1::2"}]}, "status": {"phase": "Bound"}}),
    )
    .await
    .expect("interface");
    eventually(Duration::from_secs(30), "beta served while alpha is not", async || {
        record(&hub, &b).await.is_some_and(|r| r.len() == 2)
    })
    .await;
    milo.set_fault("alpha", None);
    eventually(Duration::from_secs(30), "alpha synced again", async || {
        !metrics(producer).contains("edgegate_producer_project_synced{project=\"alpha\"}")
    })
    .await;

    // No polling: an idle project's watches are long requests (290 s), so over 30 s of nothing
    // changing beta costs Milo next to no request.
    let before = milo.requests().get("beta").copied().unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = milo.requests().get("beta").copied().unwrap_or_default() - before;
    eprintln!(
        "milo: an idle project's requests over 30 s: {idle} ({:.3}/s; five watches of 290 s: 0.017/s)",
        idle as f64 / 30.0
    );
    assert!(idle <= 3, "an idle project polled: {idle} requests in 30 s");

    // Beta deleted: disengaged, its record left as it is.
    projects.delete("beta", &Default::default()).await.expect("delete beta");
    eventually(Duration::from_secs(30), "beta disengaged", async || !metrics(producer).contains("project=\"beta\""))
        .await;
    assert_eq!(record(&hub, &b).await.map(|r| r.len()), Some(2), "a project that goes leaves its record");
    let requests = milo.requests();
    eprintln!("milo: requests served per project: {requests:?}");
    assert!(requests.get("alpha").is_some_and(|n| *n > 0) && requests.get("beta").is_some_and(|n| *n > 0));
    hub_cp.assert_nothing_refused();
    backing_cp.assert_nothing_refused();
}
