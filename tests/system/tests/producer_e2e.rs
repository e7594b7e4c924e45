//! edgegate-producer on two real kube-apiservers: one plays a project control plane (with test
//! CRDs for HTTPProxy, NetworkService and NetworkInterface, tests/crds/project.yaml), the other
//! the hub. Upstream's seven cases, the safety cases of its contract (docs/producer.md), then the
//! whole flow with the webhook attached to the hub and the producer pruning.
//!
//! edgegate runs as installed with components/producer listed before components/enforce (as
//! docs/deploy.md says): the producer, which prunes too, and the webhook are Pods of the render
//! run by the pod runner under their own ServiceAccounts, each project handed over as
//! docs/producer.md says (a ServiceAccount there, its kubeconfig in the hub's Secret). Each test
//! has a hub of its own, since the producer's Lease and copy selector are the hub's; its shorter
//! timings are a visible patch.

use std::sync::Arc;

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::pod::{Render, Rewrite, RunningPod, run};
use edgegate_system_tests::shipped;
use kube::api::DynamicObject;

const SCOPE: &str = "producer";

use edgegate_system_tests::soak::project::resource;

/// Create or replace a project object by server-side apply.
async fn put(client: &Client, ns: &str, kind: &str, name: &str, body: serde_json::Value) {
    edgegate_system_tests::soak::project::put(client, ns, kind, name, body).await.expect("apply project object");
}

async fn remove(client: &Client, ns: &str, kind: &str, name: &str) {
    edgegate_system_tests::soak::project::remove(client, ns, kind, name).await.expect("delete project object");
}

async fn interface(client: &Client, ns: &str, name: &str, app: &str, phase: &str, address: &str) {
    let body = json!({"metadata": {"labels": {"app": app}},
        "spec": {"addresses": [{"address": address}], "externalAddresses": [{"address": "203.0.113.7"}]},
        "status": {"phase": phase}});
    put(client, ns, "NetworkInterface", name, body).await;
}

async fn service(client: &Client, ns: &str, name: &str, app: &str) {
    let body = json!({"spec": {"networkInterfaces": {"selector": {"matchLabels": {"app": app}}}}});
    put(client, ns, "NetworkService", name, body).await;
}

async fn proxy(client: &Client, ns: &str, name: &str, backends: serde_json::Value) {
    let body = json!({"spec": {"hostnames": ["x.example"], "rules": [{"backends": backends}]}});
    put(client, ns, "HTTPProxy", name, body).await;
}

/// A project namespace serving `address` through one proxy → service → held interface, and its
/// hub namespace (no record yet); returns the hub namespace.
async fn served_namespace(project: &Client, hub: &Client, ns: &str, address: &str) -> String {
    let hub_ns = format!("ns-{}", project_namespace(project, ns).await);
    namespace(hub, &hub_ns, &[]).await;
    service(project, ns, "web", "web").await;
    interface(project, ns, "web-1", "web", "Bound", address).await;
    proxy(project, ns, "web", json!([{"networkService": {"name": "web"}}])).await;
    hub_ns
}

/// deploy/ with components/producer (before components/enforce) rendered as kustomization `name`,
/// the producer's `flags` set by a patch, applied to `hub_cp` (but its admission configurations).
fn install(hub_cp: &ControlPlane, name: &str, flags: &[&str]) -> Render {
    deploy_dev_certs();
    let components = ["components/dev-certs", "components/producer", "components/enforce", "components/images"];
    let render = Render::tuned(name, &["base"], &components, &[("edgegate-producer", flags)]);
    assert!(
        render.objects.iter().all(|o| o["metadata"]["name"] != "edgegate-pruner" || o["kind"] != "Deployment"),
        "components/producer runs no edgegate-pruner"
    );
    render.apply_but_admission(hub_cp);
    render
}

/// Replica `replica` of the rendered producer, ready.
async fn producer_pod(hub_cp: &ControlPlane, render: &Render, replica: usize) -> RunningPod {
    let pod = run(hub_cp, render, "edgegate-producer", replica, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    until_ready("producer ready", &pod.process, None).await;
    pod
}

/// The hub record's addresses; `None` without a record.
async fn project_namespace(client: &Client, name: &str) -> String {
    namespace(client, name, &[]).await;
    let api: Api<Namespace> = Api::all(client.clone());
    api.get(name).await.expect("ns").metadata.uid.expect("uid")
}

fn kubectl_apply(cp: &ControlPlane, path: &Path) {
    let out = std::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .args(["apply", "--server-side", "-f"])
        .arg(path)
        .output()
        .expect("kubectl");
    assert!(out.status.success(), "applying {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
}

/// A project control plane of its own beside the hub `hub_cp`, with the project kinds' test CRDs
/// served there and the EdgeReachability CRD on the hub; and a client for each (hub, project).
async fn project_beside(hub_cp: &ControlPlane) -> (ControlPlane, Client, Client) {
    let project_cp = ControlPlane::own();
    let (hub, project) = (hub_cp.client().await, project_cp.client().await);
    install_crd(&hub).await;
    kubectl_apply(&project_cp, &repo().join("tests/crds/project.yaml"));
    let proxies: Api<DynamicObject> = Api::all_with(project.clone(), &resource("HTTPProxy", "httpproxies"));
    eventually(Duration::from_secs(30), "project CRDs served", async || {
        proxies.list(&Default::default()).await.is_ok()
    })
    .await;
    (project_cp, hub, project)
}

/// The shipped producer for `project_cp` (project "e2e") on hub `hub_cp`, `flags` set by a patch
/// (rendered as kustomization `name`): the render applied, the project handed over, the producer
/// ready.
async fn start_producer(
    hub_cp: &ControlPlane,
    project_cp: &ControlPlane,
    name: &str,
    flags: &[&str],
) -> (Render, RunningPod) {
    let render = install(hub_cp, name, flags);
    shipped::add_project(hub_cp, "e2e", project_cp).await;
    let pod = producer_pod(hub_cp, &render, 0).await;
    (render, pod)
}

fn median_max(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_between_a_project_and_the_hub() {
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;

    let a = format!("ns-{}", project_namespace(&project, "proj-a").await);
    let b = format!("ns-{}", project_namespace(&project, "proj-b").await);
    let c = format!("ns-{}", project_namespace(&project, "proj-c").await);
    namespace(&hub, &a, &[("edgegate-e2e", SCOPE)]).await;
    namespace(&hub, &c, &[]).await;
    // proj-c's record is owned by another writer (the Go reconciler, say).
    let theirs = json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
                        "metadata": {"name": "default", "namespace": c}, "spec": {"addresses": ["fd20:0:c::1"]}});
    Api::<edgegate::EdgeReachability>::namespaced(hub.clone(), &c)
        .patch("default", &PatchParams::apply("network-services-operator"), &Patch::Apply(&theirs))
        .await
        .expect("their record");

    // Withdrawing at once and resyncing often: the suite measures the producer's own latency.
    let render = install(hub_cp, "producer-flow", &["--withdraw-after=0s", "--resync=2s", "--grace=1s"]);
    shipped::add_acme_as_documented(hub_cp, &project_cp).await;
    let pod = producer_pod(hub_cp, &render, 0).await;
    let producer = &pod.process;

    // Upstream 1: no proxy → an empty record.
    eventually(Duration::from_secs(10), "empty record for proj-a", async || record(&hub, &a).await == Some(vec![]))
        .await;
    // Upstream 7: no hub namespace → no record; safety: the namespace created later gets its record.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(record(&hub, &b).await, None, "no hub namespace: no record");
    namespace(&hub, &b, &[]).await;
    let took = eventually(Duration::from_secs(30), "record once the hub namespace exists", async || {
        record(&hub, &b).await == Some(vec![])
    })
    .await;
    eprintln!("hub namespace → record: {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "hub namespace → record took {took:?} (sub-second expected; 5 s allows a loaded 2-core machine)"
    );
    // Safety: another field manager's record is not overridden, and the conflict is counted.
    eventually(Duration::from_secs(10), "conflict counted", async || {
        counter(&metrics(producer), "edgegate_producer_writes_total{result=\"conflict\"}") > 0
    })
    .await;
    assert_eq!(record(&hub, &c).await, Some(vec!["fd20:0:c::1".to_owned()]), "their record stays");

    // Upstream 2, 3, 5: only Bound members of a proxied service, prefix length stripped.
    service(&project, "proj-a", "web", "web").await;
    interface(&project, "proj-a", "web-1", "web", "Bound", "fd20:0:2::1:0:0/128").await;
    interface(&project, "proj-a", "web-2", "web", "Bound", "fd20:0:2::1:0:1").await;
    interface(&project, "proj-a", "web-3", "web", "Available", "fd20:0:2::1:0:3").await;
    interface(&project, "proj-a", "db-1", "db", "Bound", "fd20:0:2::db").await;
    proxy(&project, "proj-a", "web", json!([{"networkService": {"name": "web", "port": 80}}])).await;
    let want = |v: &[&str]| Some(v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
    eventually(Duration::from_secs(5), "members recorded", async || {
        record(&hub, &a).await == want(&["fd20:0:2::1:0:0", "fd20:0:2::1:0:1"])
    })
    .await;
    // Upstream 4: an interface relabelled out of the selector is removed.
    interface(&project, "proj-a", "web-2", "other", "Bound", "fd20:0:2::1:0:1").await;
    eventually(Duration::from_secs(5), "relabelled interface removed", async || {
        record(&hub, &a).await == want(&["fd20:0:2::1:0:0"])
    })
    .await;
    // Upstream 6: an instance backend's slice addresses are recorded.
    create(&project, "proj-a", &slice(SCOPE, "vm-1", false, &["fd20:0:9::1"]), false).await.expect("slice");
    proxy(&project, "proj-a", "vm", json!([{"instance": {"name": "vm-1", "port": 22}}])).await;
    eventually(Duration::from_secs(5), "instance recorded", async || {
        record(&hub, &a).await == want(&["fd20:0:2::1:0:0", "fd20:0:9::1"])
    })
    .await;
    // `edgegate reachability` explains the same answer, reading the project and writing nothing
    // (the operator's command, run with the operator's admin credentials).
    let out = std::process::Command::new(binary("edgegate"))
        .args(["reachability", &format!("--project-kubeconfig={}", project_cp.kubeconfig.display()), "-n", "proj-a"])
        .output()
        .expect("edgegate reachability");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "NetworkService web: NetworkInterface web-1 (Bound) → fd20:0:2::1:0:0",
        "NetworkService web: NetworkInterface web-3 is Available, not Bound; not recorded",
        "EndpointSlice vm-1: → fd20:0:9::1",
        "record for proj-a: 2 address(es)",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    // Safety: a record deleted by hand comes back.
    Api::<edgegate::EdgeReachability>::namespaced(hub.clone(), &a)
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete record");
    eventually(Duration::from_secs(5), "hand-deleted record back", async || {
        record(&hub, &a).await == want(&["fd20:0:2::1:0:0", "fd20:0:9::1"])
    })
    .await;

    // Safety: an answer over 8,192 addresses is not written; the old record stays, and says why.
    let d = format!("ns-{}", project_namespace(&project, "proj-d").await);
    namespace(&hub, &d, &[]).await;
    for i in 0..9 {
        let addresses: Vec<String> = (1..=1000).map(|j| format!("fd20:d:{:x}::{j:x}", i + 1)).collect();
        let refs: Vec<&str> = addresses.iter().map(String::as_str).collect();
        create(&project, "proj-d", &slice(SCOPE, &format!("big-{i}"), false, &refs), false).await.expect("big slice");
    }
    proxy(&project, "proj-d", "big", json!([{"instance": {"name": "big-0"}}])).await;
    eventually(Duration::from_secs(10), "1,000 addresses recorded", async || {
        record(&hub, &d).await.is_some_and(|r| r.len() == 1000)
    })
    .await;
    let nine: Vec<_> = (0..9).map(|i| json!({"instance": {"name": format!("big-{i}")}})).collect();
    proxy(&project, "proj-d", "big", json!(nine)).await;
    eventually(Duration::from_secs(10), "oversized counted", async || {
        counter(&metrics(producer), "edgegate_producer_writes_total{result=\"oversized\"}") > 0
    })
    .await;
    assert_eq!(record(&hub, &d).await.map(|r| r.len()), Some(1000), "never truncated: the old record stays");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(hub.clone(), &d);
    eventually(Duration::from_secs(5), "a Warning Event on the record", async || {
        events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RecordOversized"))
    })
    .await;

    // Safety: an unreachable project writes nothing; its records stay as they are (here: a
    // record deleted by hand meanwhile is not written back until the project is listed again).
    let down = std::thread::spawn(move || {
        project_cp.restart("kube-apiserver", Duration::from_secs(8));
        project_cp
    });
    eventually(Duration::from_secs(6), "project seen unreachable", async || {
        metrics(producer).contains("edgegate_producer_projects{state=\"unsynced\"} 1")
    })
    .await;
    Api::<edgegate::EdgeReachability>::namespaced(hub.clone(), &b)
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete record");
    tokio::time::sleep(Duration::from_secs(3)).await; // a resync and more
    assert_eq!(record(&hub, &b).await, None, "nothing written while the project is unreachable");
    let _project_cp = down.join().expect("restart");
    let took = eventually(Duration::from_secs(15), "record back once the project is listed again", async || {
        record(&hub, &b).await == Some(vec![])
    })
    .await;
    eprintln!("producer: project back → record written after {took:?}");

    // The whole flow, with the webhook on the hub and the producer pruning.
    let _webhook = shipped::webhook(hub_cp, Some(&render), SCOPE, true).await;
    eventually(Duration::from_secs(30), "webhook in effect", async || {
        create(&hub, &a, &slice(SCOPE, "marker", true, &["fd20:0:2::9"]), true).await.is_err()
    })
    .await;
    let (mut to_record, mut to_gone) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let (name, app, address) = (format!("flow-{i}"), format!("flow-{i}"), format!("fd20:0:7::{:x}", i + 1));
        service(&project, "proj-a", &name, &app).await;
        proxy(&project, "proj-a", &name, json!([{"networkService": {"name": name, "port": 80}}])).await;
        interface(&project, "proj-a", &name, &app, "Bound", &address).await;
        to_record.push(
            eventually(Duration::from_secs(30), "interface → record", async || {
                record(&hub, &a).await.is_some_and(|r| r.contains(&address))
            })
            .await,
        );
        // The webhook's view of the record follows the hub by a watch, a few milliseconds behind
        // (more on a loaded machine): the cell retries a refusal, so does this.
        let copy = slice(SCOPE, &name, true, &[&address]);
        eventually(Duration::from_secs(5), "a served copy is admitted", async || {
            create(&hub, &a, &copy, false).await.is_ok()
        })
        .await;
        remove(&project, "proj-a", "HTTPProxy", &name).await;
        to_gone.push(
            eventually(Duration::from_secs(30), "proxy deleted → copy gone", async || !exists(&hub, &a, &name).await)
                .await,
        );
    }
    let (median, max) = median_max(to_record);
    eprintln!("producer: interface change → record updated over 20 changes: median {median:?}, max {max:?}");
    assert!(median < Duration::from_secs(2), "interface change → record median {median:?} (sub-second expected)");
    let (median, max) = median_max(to_gone);
    eprintln!("producer: proxy deleted → copy gone over 20 changes: median {median:?}, max {max:?}");
    // The producer deletes on its own project's evidence, in memory: grace 1 s + a pass (the
    // hub-wide word it replaced added up to a Lease renewal, 3 s: median 2.96 s).
    assert!(median < Duration::from_secs(3), "proxy deleted → copy gone median {median:?} (grace 1 s + a pass)");
    hub_cp.assert_nothing_refused();
}

/// `--projects-dir` (the Secret `edgegate-producer-projects`, projected as a kubelet does): a
/// project's kubeconfig added engages it (records written), removed disengages it and leaves its
/// records as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_dir_engages_and_disengages_projects() {
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let hub_ns = served_namespace(&project, &hub, "dir-a", "fd20:0:d1::1").await;
    let render = install(hub_cp, "producer-dir", &["--resync=2s"]);
    shipped::no_projects(hub_cp).await;
    let pod = producer_pod(hub_cp, &render, 0).await;
    let producer = &pod.process;
    assert_eq!(record(&hub, &hub_ns).await, None, "no project, no record");

    shipped::add_project(hub_cp, "acme", &project_cp).await;
    let took = eventually(Duration::from_secs(30), "record of the engaged project", async || {
        record(&hub, &hub_ns).await == Some(vec!["fd20:0:d1::1".to_owned()])
    })
    .await;
    eprintln!("producer: kubeconfig file added → record written after {took:?}");
    assert!(metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 1"));

    // A second project added: the kubelet projects the whole Secret anew (every file a new one);
    // acme's kubeconfig is the same, so acme is not engaged again (its five watches not listed
    // anew). Failed while files were compared by their modification time: acme was engaged twice.
    shipped::add_project(hub_cp, "other", &project_cp).await;
    eventually(Duration::from_secs(30), "the second project engaged", async || {
        metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 2")
    })
    .await;
    let engaged = |name: &str| {
        let log = pod.log();
        log.lines().filter(|l| l.contains("project engaged") && l.contains(&format!("\"project\":\"{name}\""))).count()
    };
    assert_eq!(
        engaged("acme"),
        1,
        "acme engaged again when another project was added (log: {})",
        producer.log.display()
    );
    assert_eq!(engaged("other"), 1);
    shipped::remove_project(hub_cp, "other").await;
    eventually(Duration::from_secs(30), "the second project disengaged", async || {
        metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 1")
    })
    .await;

    shipped::remove_project(hub_cp, "acme").await;
    eventually(Duration::from_secs(30), "project disengaged", async || {
        metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 0")
    })
    .await;
    interface(&project, "dir-a", "web-2", "web", "Bound", "fd20:0:d1::2").await;
    tokio::time::sleep(Duration::from_secs(3)).await; // a resync and more
    assert_eq!(record(&hub, &hub_ns).await, Some(vec!["fd20:0:d1::1".to_owned()]), "its record stays as it was");
    hub_cp.assert_nothing_refused();
}

/// Not part of CI: the producer's memory with 10,000 NetworkInterfaces across 500 namespaces of
/// one project (`cargo test -p edgegate-producer --test producer_e2e -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, minutes long"]
async fn producer_rss_with_10000_interfaces_in_500_namespaces() {
    producer_at_scale(500, 20).await;
}

/// Not part of CI (scripts/scale.sh): 10,000 namespaces in one project, one proxy, service and
/// interface each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, minutes long"]
async fn producer_with_10000_namespaces() {
    producer_at_scale(10_000, 1).await;
}

/// A project of `namespaces` namespaces, each with a proxy, a service and `per` Bound interfaces,
/// and a hub namespace for each: time to every record written, RSS, and the time from an
/// interface added to its record updated (over 20 changes) once all are written.
async fn producer_at_scale(namespaces: usize, per: usize) {
    use futures::StreamExt;
    let hub_cp = ControlPlane::own();
    let (project_cp, hub, project) = project_beside(&hub_cp).await;
    let started = Instant::now();
    let hub_namespaces: Vec<String> = futures::stream::iter(0..namespaces)
        .map(|n| {
            let (hub, project) = (hub.clone(), project.clone());
            async move {
                let ns = format!("p-{n}");
                let hub_ns = format!("ns-{}", project_namespace(&project, &ns).await);
                namespace(&hub, &hub_ns, &[]).await;
                service(&project, &ns, "web", "web").await;
                proxy(&project, &ns, "web", json!([{"networkService": {"name": "web", "port": 80}}])).await;
                for i in 0..per {
                    let address = format!("fd20:{:x}:{:x}::1/128", n + 1, i + 1);
                    interface(&project, &ns, &format!("nic-{i}"), "web", "Bound", &address).await;
                }
                hub_ns
            }
        })
        .buffered(32)
        .collect()
        .await;
    eprintln!(
        "producer: a world of {namespaces} namespaces, {} interfaces made in {:?}",
        namespaces * per,
        started.elapsed()
    );
    let started = Instant::now();
    let (_render, pod) = start_producer(
        &hub_cp,
        &project_cp,
        &format!("producer-scale-{namespaces}"),
        &["--withdraw-after=0s", "--resync=2s"],
    )
    .await;
    let producer = &pod.process;
    let records: Api<edgegate::EdgeReachability> = Api::all(hub.clone());
    eventually(Duration::from_secs(600), "every record written", async || {
        records
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.iter().filter(|r| r.entries().len() == per).count() >= namespaces)
    })
    .await;
    let first_write = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await; // resyncs over the whole project
    let rss = rss_mib(producer);
    let mut times = Vec::new();
    for k in 0..20 {
        let n = k * (namespaces / 20);
        let address = format!("fd20:{:x}:ffff::1", n + 1);
        interface(&project, &format!("p-{n}"), "nic-new", "web", "Bound", &address).await;
        times.push(
            eventually(Duration::from_secs(30), "interface → record", async || {
                record(&hub, &hub_namespaces[n]).await.is_some_and(|r| r.contains(&address))
            })
            .await,
        );
    }
    let (median, max) = median_max(times);
    eprintln!(
        "producer: {namespaces} namespaces, {} interfaces: every record written {first_write:?} after start, RSS {rss} MiB; interface added → record updated median {median:?}, max {max:?}",
        namespaces * per
    );
}

/// A project passing through a state nobody meant: the NetworkService's selector edited from
/// `app=a` to `app=b` a moment before the interface is relabelled, so for that moment it selects
/// nothing. With the producer's withdraw-after and the pruner's grace, the record never loses the
/// address and the copy stays published; a real withdrawal (the proxy deleted) still completes
/// within withdraw-after + grace and a little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_edited_before_the_interfaces_withdraws_nothing() {
    const FLAP: &str = "flap";
    let (withdraw_after, grace) = (Duration::from_secs(4), Duration::from_secs(3));
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let hub_ns = format!("ns-{}", project_namespace(&project, "flap-a").await);
    namespace(&hub, &hub_ns, &[]).await;
    service(&project, "flap-a", "web", "a").await;
    interface(&project, "flap-a", "nic-1", "a", "Bound", "fd20:0:f1::1").await;
    proxy(&project, "flap-a", "web", json!([{"networkService": {"name": "web"}}])).await;
    let withdraw = format!("--withdraw-after={}s", withdraw_after.as_secs());
    let render = install(hub_cp, "producer-flap", &[&withdraw, &format!("--grace={}s", grace.as_secs())]);
    shipped::add_project(hub_cp, "e2e", &project_cp).await;
    let _producer = producer_pod(hub_cp, &render, 0).await;
    let served = vec!["fd20:0:f1::1".to_owned()];
    eventually(Duration::from_secs(30), "record written", async || {
        record(&hub, &hub_ns).await.as_ref() == Some(&served)
    })
    .await;
    create(&hub, &hub_ns, &slice(FLAP, "vm-1", true, &["fd20:0:f1::1"]), false).await.expect("copy");

    // Watch the record and the copy every 50 ms while the project passes through the gap.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (hub, hub_ns, stop, served) = (hub.clone(), hub_ns.clone(), Arc::clone(&stop), served.clone());
        tokio::spawn(async move {
            let mut lapses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now = record(&hub, &hub_ns).await;
                if now.as_ref() != Some(&served) {
                    lapses.push(format!("record {now:?}"));
                }
                if !exists(&hub, &hub_ns, "vm-1").await {
                    lapses.push("copy gone".to_owned());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            lapses
        })
    };
    service(&project, "flap-a", "web", "b").await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // the GitOps tool's next object
    interface(&project, "flap-a", "nic-1", "b", "Bound", "fd20:0:f1::1").await;
    tokio::time::sleep(withdraw_after + grace + Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let lapses = watcher.await.expect("watcher");
    assert!(lapses.is_empty(), "the gap withdrew something: {lapses:?}");

    // A real withdrawal: nothing serves the address any more.
    let started = Instant::now();
    remove(&project, "flap-a", "HTTPProxy", "web").await;
    eventually(Duration::from_secs(60), "copy collected", async || !exists(&hub, &hub_ns, "vm-1").await).await;
    let took = started.elapsed();
    eprintln!(
        "withdrawal with withdraw-after {withdraw_after:?} and grace {grace:?}: proxy deleted → copy gone {took:?}"
    );
    assert!(took >= withdraw_after + grace - Duration::from_millis(500), "the holds held: {took:?}");
    assert!(took <= withdraw_after + grace + Duration::from_secs(3), "within withdraw-after + grace: {took:?}");
    hub_cp.assert_nothing_refused();
}

/// One project that cannot be reached does not hold the producer unready (that would stall every
/// rollout): the others are served, and the bad one shows in its own metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreachable_project_leaves_the_producer_ready() {
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let hub_ns = served_namespace(&project, &hub, "bad-a", "fd20:0:ba::1").await;

    let render = install(hub_cp, "producer-unreachable", &[]);
    shipped::add_project(hub_cp, "good", &project_cp).await;
    let text = shipped::project_kubeconfig(&project_cp).await;
    shipped::set_project(hub_cp, "gone", &text.replace(&project_cp.server, "https://127.0.0.1:1")).await;
    let started = Instant::now();
    let pod = producer_pod(hub_cp, &render, 0).await;
    let producer = &pod.process;
    let took = started.elapsed();
    eprintln!("producer with one unreachable project: ready after {took:?}");
    eventually(Duration::from_secs(30), "the good project's record", async || {
        record(&hub, &hub_ns).await == Some(vec!["fd20:0:ba::1".to_owned()])
    })
    .await;
    let m = metrics(producer);
    assert!(!m.contains("project=\"good\""), "a whole project has no series of its own: {m}");
    assert!(m.contains("edgegate_producer_project_synced{project=\"gone\"} 0"), "{m}");
    hub_cp.assert_nothing_refused();
}

/// A record edited by hand to drop a served address is put right at once, not at the next resync:
/// the pruner withdraws a copy its record has stopped naming after `--grace` (30 s), so a repair
/// that waits for the resync (60 s) would withdraw a pod that still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_edited_by_hand_is_put_right_at_once() {
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let hub_ns = served_namespace(&project, &hub, "hand-a", "fd20:0:4a::1").await;
    // The shipped timings, unchanged (resync 60 s).
    let _producer = start_producer(hub_cp, &project_cp, "producer-hand", &[]).await;
    eventually(Duration::from_secs(30), "the record", async || {
        record(&hub, &hub_ns).await == Some(vec!["fd20:0:4a::1".to_owned()])
    })
    .await;
    // Another field manager empties it, as a person with kubectl would.
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(hub.clone(), &hub_ns);
    let emptied = json!({"spec": {"addresses": []}});
    api.patch("default", &PatchParams::default(), &Patch::Merge(&emptied)).await.expect("edit by hand");
    let took = eventually(Duration::from_secs(10), "the served address back", async || {
        record(&hub, &hub_ns).await == Some(vec!["fd20:0:4a::1".to_owned()])
    })
    .await;
    eprintln!("a record edited by hand: put right after {took:?}");
    hub_cp.assert_nothing_refused();
}

/// What a restore is. Another writer takes `spec.addresses` over, drops the served address and
/// adds one of its own; the producer's apply conflicts (told by the Status's causes, as this real
/// API server gives them), and it puts the served address back beside the other writer's,
/// forced. Without `--force-ownership` it keeps the other writer's address from then on, however
/// long after `--withdraw-after` (edgegate cannot know it is not served): it stays until that
/// writer removes it. Failed on e09eb79: the other writer's address was withdrawn
/// `--withdraw-after` after the restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_keeps_the_other_writers_addresses_until_it_removes_them() {
    use edgegate_producer::outcome::Refusal;
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let hub_ns = served_namespace(&project, &hub, "takeover-a", "fd20:0:4b::1").await;
    let _producer = start_producer(hub_cp, &project_cp, "producer-takeover", &["--withdraw-after=3s"]).await;
    eventually(Duration::from_secs(30), "the record", async || {
        record(&hub, &hub_ns).await == Some(vec!["fd20:0:4b::1".to_owned()])
    })
    .await;
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(hub.clone(), &hub_ns);
    let theirs = |addresses: &[&str]| {
        json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
               "metadata": {"name": "default", "namespace": hub_ns}, "spec": {"addresses": addresses}})
    };
    // Each refusal as this API server words it, told apart by its status alone.
    let stale = json!({"apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
                       "metadata": {"name": "default", "namespace": hub_ns, "resourceVersion": "1"},
                       "spec": {"addresses": ["fd20:0:4b::1"]}});
    let refused = api.patch("default", &PatchParams::apply("another-writer").force(), &Patch::Apply(&stale)).await;
    assert!(matches!(refused, Err(kube::Error::Api(ref s)) if Refusal::of(s) == Refusal::Stale), "{refused:?}");
    let unforced = api.patch("default", &PatchParams::apply("another-writer"), &Patch::Apply(&theirs(&[]))).await;
    assert!(
        matches!(unforced, Err(kube::Error::Api(ref s)) if Refusal::of(s) == Refusal::FieldManagers),
        "{unforced:?}"
    );

    api.patch("default", &PatchParams::apply("another-writer").force(), &Patch::Apply(&theirs(&["fd20:0:4b::99"])))
        .await
        .expect("the other writer takes the field");
    let both = vec!["fd20:0:4b::1".to_owned(), "fd20:0:4b::99".to_owned()];
    let took = eventually(Duration::from_secs(10), "the served address back beside theirs", async || {
        record(&hub, &hub_ns).await == Some(both.clone())
    })
    .await;
    eprintln!("restored after {took:?}");
    let restored = api.get("default").await.expect("record");
    assert_eq!(
        restored.metadata.annotations.unwrap_or_default().get("edgegate.datumapis.com/kept-addresses"),
        Some(&"fd20:0:4b::99".to_owned()),
        "what only the other writer named is kept, and the record says so"
    );
    // Four times --withdraw-after: the producer looked again when the address it held fell due
    // (3 s after the first conflicting write), and kept it.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(record(&hub, &hub_ns).await, Some(both.clone()), "their address kept after --withdraw-after");
    // The other writer removes its address (forced: the producer owns the list now): gone, and
    // not written back.
    api.patch("default", &PatchParams::apply("another-writer").force(), &Patch::Apply(&theirs(&["fd20:0:4b::1"])))
        .await
        .expect("the other writer removes its address");
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(record(&hub, &hub_ns).await, Some(vec!["fd20:0:4b::1".to_owned()]), "removed by its writer: not kept");
    hub_cp.assert_nothing_refused();
}

/// The start both producer-down cases share: a project serving `address` in `ns`, an elected
/// producer (`withdraw_after`, `grace`), a copy of the address on the hub; then nothing serves it,
/// the record drops it (the copy's grace starts), and the producer, which also prunes, is killed.
struct ProducerKilled {
    hub_cp: ControlPlane,
    _project_cp: ControlPlane,
    render: Render,
    hub: Client,
    project: Client,
    hub_ns: String,
}

async fn withdrawn_then_producer_killed(
    scope: &str,
    ns: &str,
    address: &str,
    withdraw_after: Duration,
    grace: Duration,
) -> ProducerKilled {
    let hub_cp = ControlPlane::own();
    let (project_cp, hub, project) = project_beside(&hub_cp).await;
    let hub_ns = served_namespace(&project, &hub, ns, address).await;
    // The Lease 4 s, so that a producer started again (a new Pod) takes over soon.
    let render = install(
        &hub_cp,
        scope,
        &[
            &format!("--withdraw-after={}ms", withdraw_after.as_millis()),
            &format!("--grace={}ms", grace.as_millis()),
            "--lease-duration=4s",
        ],
    );
    shipped::add_project(&hub_cp, "e2e", &project_cp).await;
    let producer = producer_pod(&hub_cp, &render, 0).await;
    eventually(Duration::from_secs(30), "record written", async || {
        record(&hub, &hub_ns).await.is_some_and(|r| r == [address])
    })
    .await;
    create(&hub, &hub_ns, &slice(scope, "vm-1", true, &[address]), false).await.expect("copy");
    remove(&project, ns, "HTTPProxy", "web").await;
    eventually(Duration::from_secs(20), "address withdrawn", async || {
        record(&hub, &hub_ns).await.is_some_and(|r| r.is_empty())
    })
    .await;
    signal(pid_of(&producer.process), "KILL");
    ProducerKilled { hub_cp, _project_cp: project_cp, render, hub, project, hub_ns }
}

/// An address served again while the producer is down: its record cannot name it until a
/// producer is back, and the copy's grace runs out meanwhile. The producer back must not take the
/// record's silence for a withdrawal: it deletes only once it has watched the project whole for
/// `--withdraw-after` + `--grace`, by when the record names the address again; so the copy stays.
/// A withdrawal while the producer is up still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_served_again_while_the_producer_is_down_is_kept() {
    let (withdraw_after, grace) = (Duration::ZERO, Duration::from_secs(4));
    let w = withdrawn_then_producer_killed("producer-down", "down-a", "fd20:0:d0::1", withdraw_after, grace).await;
    let (project, hub, hub_ns) = (&w.project, &w.hub, &w.hub_ns);
    let served = vec!["fd20:0:d0::1".to_owned()];
    // The address is served again while nobody can tell the hub, for longer than the grace.
    proxy(project, "down-a", "web", json!([{"networkService": {"name": "web"}}])).await;
    tokio::time::sleep(grace + Duration::from_secs(1)).await;

    // The producer back, as a new Pod: the state that would act is its pruner synced with the
    // copy due (unnamed by the record it finds for longer than the grace).
    let started = Instant::now();
    let producer = producer_pod(&w.hub_cp, &w.render, 1).await;
    let took = eventually(Duration::from_secs(30), "record names it again", async || {
        record(hub, hub_ns).await.as_ref() == Some(&served)
    })
    .await;
    eprintln!("producer restarted: record names the address again after {took:?}");
    // The state that would act: a pass over the copy once the producer has watched the project
    // whole for withdraw-after + grace (counted from its start at the latest), brought by a
    // change to the copy (a label), as any change to it brings one.
    tokio::time::sleep_until((started + withdraw_after + grace + Duration::from_secs(1)).into()).await;
    let passes = || counter(&metrics(&producer.process), "edgegate_prune_pass_duration_seconds_count");
    let before = passes();
    let copies: Api<EndpointSlice> = Api::namespaced(hub.clone(), hub_ns);
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    copies.patch("vm-1", &PatchParams::default(), &Patch::Merge(&touch)).await.expect("label the copy");
    eventually(Duration::from_secs(10), "a pass over the touched copy", async || passes() > before).await;
    assert!(
        exists(hub, hub_ns, "vm-1").await,
        "copy of an address served again deleted after the producer came back (log: {})",
        producer.process.log.display()
    );
    eprintln!("copy kept {:?} after the producer came back", started.elapsed());

    // A withdrawal with the producer up completes after the grace.
    let started = Instant::now();
    remove(project, "down-a", "HTTPProxy", "web").await;
    eventually(Duration::from_secs(30), "copy collected", async || !exists(hub, hub_ns, "vm-1").await).await;
    let took = started.elapsed();
    eprintln!("withdrawal with the producer up: proxy deleted → copy gone {took:?} (grace {grace:?})");
    assert!(took >= grace, "the grace held: {took:?}");
    drop(producer);
    w.hub_cp.assert_nothing_refused();
}

/// An address served only while the producer was down: nobody could name it, and the producer
/// back finds it no longer served. It served a moment before, so its copy goes no sooner than
/// `--withdraw-after` plus the grace after that, as one the producer had seen stop serving: the
/// producer deletes only once it has watched the project whole for that long. The copy is still
/// collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_served_only_while_the_producer_was_down_is_held_like_any_withdrawal() {
    let (withdraw_after, grace) = (Duration::from_secs(5), Duration::from_secs(4));
    let w = withdrawn_then_producer_killed("producer-blind", "blind-a", "fd20:0:d2::1", withdraw_after, grace).await;
    let (project, hub, hub_ns) = (&w.project, &w.hub, &w.hub_ns);
    // Served for a second while nobody watches, then not; the producer back at once, and the
    // copy's grace runs out soon after.
    proxy(project, "blind-a", "web", json!([{"networkService": {"name": "web"}}])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    remove(project, "blind-a", "HTTPProxy", "web").await;
    let last_served = Instant::now();
    let restarted = Instant::now();
    let producer =
        run(&w.hub_cp, &w.render, "edgegate-producer", 1, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    let gone = eventually(Duration::from_secs(40), "copy collected", async || !exists(hub, hub_ns, "vm-1").await).await;
    let after_served = (restarted + gone).duration_since(last_served);
    eprintln!(
        "served only while the producer was down: copy gone {after_served:?} after it last served, {gone:?} after the restart (withdraw-after {withdraw_after:?} + grace {grace:?})"
    );
    assert!(
        after_served >= withdraw_after + grace,
        "withdrawn {after_served:?} after it last served, sooner than withdraw-after + grace (log: {})",
        producer.process.log.display()
    );
    drop(producer);
    w.hub_cp.assert_nothing_refused();
}

/// One project that cannot be read holds its own copies and nobody else's. Two projects, alpha
/// and beta, each with a hub namespace (alpha's labelled `cluster-alpha` by the controllers that
/// make hub namespaces; beta's unlabelled, found by its namespace UID). Beta's API server goes
/// down for 45 s; meanwhile alpha withdraws an address, and its copy goes within
/// `--withdraw-after` + `--grace` and a few seconds, while beta's copy that its record does not
/// name is kept (held as incomplete) until beta is back. Failed on the old install (a pruner on
/// the producer's one word for the whole hub, withheld while any project was unreadable): alpha's
/// copy was kept for as long as beta was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreadable_project_holds_only_its_own_deletions() {
    const SCOPE: &str = "unreadable";
    let (withdraw_after, grace) = (Duration::from_secs(2), Duration::from_secs(2));
    let hub_cp = &ControlPlane::own();
    let (alpha_cp, hub, alpha) = project_beside(hub_cp).await;
    let (beta_cp, _, beta) = project_beside(hub_cp).await;
    let a_uid = project_namespace(&alpha, "alpha-a").await;
    let a = format!("ns-{a_uid}");
    namespace(&hub, &a, &[("meta.datumapis.com/upstream-cluster-name", "cluster-alpha")]).await;
    service(&alpha, "alpha-a", "web", "web").await;
    interface(&alpha, "alpha-a", "web-1", "web", "Bound", "fd20:0:a1::1").await;
    proxy(&alpha, "alpha-a", "web", json!([{"networkService": {"name": "web"}}])).await;
    let b = served_namespace(&beta, &hub, "beta-a", "fd20:0:b1::1").await;
    let render = install(
        hub_cp,
        "producer-unreadable",
        &[&format!("--withdraw-after={}s", withdraw_after.as_secs()), &format!("--grace={}s", grace.as_secs())],
    );
    shipped::add_project(hub_cp, "alpha", &alpha_cp).await;
    shipped::add_project(hub_cp, "beta", &beta_cp).await;
    let producer = producer_pod(hub_cp, &render, 0).await;
    eventually(Duration::from_secs(30), "both records written", async || {
        record(&hub, &a).await.is_some_and(|r| r == ["fd20:0:a1::1"])
            && record(&hub, &b).await.is_some_and(|r| r == ["fd20:0:b1::1"])
    })
    .await;
    create(&hub, &a, &slice(SCOPE, "alpha-copy", true, &["fd20:0:a1::1"]), false).await.expect("alpha's copy");

    // Beta unreadable: its API server down for 45 s.
    let down = std::thread::spawn(move || {
        beta_cp.restart("kube-apiserver", Duration::from_secs(45));
        beta_cp
    });
    eventually(Duration::from_secs(20), "beta seen unreadable", async || {
        metrics(&producer.process).contains("edgegate_producer_project_synced{project=\"beta\"} 0")
    })
    .await;
    // A copy in beta's hub namespace its record does not name: due after the grace, but beta's
    // view is broken.
    create(&hub, &b, &slice(SCOPE, "beta-copy", true, &["fd20:0:b1::9"]), false).await.expect("beta's copy");
    let started = Instant::now();
    remove(&alpha, "alpha-a", "HTTPProxy", "web").await;
    eventually(Duration::from_secs(30), "alpha's copy collected", async || !exists(&hub, &a, "alpha-copy").await).await;
    let took = started.elapsed();
    eprintln!(
        "beta unreadable: alpha's proxy deleted → its copy gone {took:?} (withdraw-after {withdraw_after:?} + grace {grace:?})"
    );
    let bound = withdraw_after + grace + Duration::from_secs(8);
    assert!(took <= bound, "alpha's withdrawal took {took:?}, over {bound:?}, while beta was unreadable");
    // Beta's copy is due by now (its grace ran while alpha's withdrawal went through) and held
    // because beta is incomplete; it is still there.
    eventually(Duration::from_secs(10), "beta's copy held as incomplete", async || {
        metrics(&producer.process).contains("edgegate_producer_prune_held_namespaces{reason=\"incomplete\"} 1")
    })
    .await;
    assert!(exists(&hub, &b, "beta-copy").await, "beta's copy deleted while beta could not be read");
    let _beta_cp = down.join().expect("beta back");
    let back = Instant::now();
    eventually(Duration::from_secs(60), "beta's copy collected once beta is back", async || {
        !exists(&hub, &b, "beta-copy").await
    })
    .await;
    let took = back.elapsed();
    eprintln!("beta back: its unnamed copy gone {took:?} after its API server returned");
    assert!(took >= withdraw_after + grace, "beta's copy went {took:?} after beta returned, before a whole view");
    hub_cp.assert_nothing_refused();
}

/// The producer on a Karmada hub as docs/deploy.md installs it: on karmada-apiserver (here the hub's
/// API server) overlays/karmada-hub/hub with components/karmada-producer-hub (its ServiceAccount
/// and roles); in the host cluster (the same API server plays it, as the Karmada webhook's tests
/// do) overlays/karmada-hub/host with components/producer and components/karmada-producer-host, its
/// Pod with no identity of its own there, reaching the hub with the kubeconfig of the hub
/// ServiceAccount's token in the Secret the docs name. It takes its Lease and writes a project's
/// record on the hub, nothing refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_producer_runs_on_a_karmada_host_against_its_hub() {
    let hub_cp = &ControlPlane::own();
    let (project_cp, hub, project) = project_beside(hub_cp).await;
    let kustomization = |name: &str, base: &str, components: &[&str]| {
        Render::of(&edgegate_system_tests::pod::kustomization_with(name, &[base], components, ""))
    };
    let on_hub =
        kustomization("karmada-producer-hub", "overlays/karmada-hub/hub", &["components/karmada-producer-hub"]);
    on_hub.apply_but_admission(hub_cp);
    let token = hub_cp.service_account_kubeconfig("edgegate-system", "edgegate-producer", None, 90 * 86400).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "edgegate-producer-hub-kubeconfig", "namespace": "edgegate-system"},
        "stringData": {"kubeconfig": std::fs::read_to_string(&token).expect("kubeconfig")}});
    shipped::apply_objects(hub_cp, vec![secret]);
    let on_host = kustomization(
        "karmada-producer-host",
        "overlays/karmada-hub/host",
        &["components/producer", "components/karmada-producer-host", "components/images"],
    );
    let producer = on_host.workload("edgegate-producer");
    assert_eq!(producer["spec"]["template"]["spec"]["automountServiceAccountToken"], false, "no identity on the host");
    // The host's objects, but cert-manager's (none runs here).
    on_host.apply(hub_cp, |o| !o["apiVersion"].as_str().unwrap_or_default().starts_with("cert-manager.io/"));
    shipped::add_project(hub_cp, "acme", &project_cp).await;
    let a = format!("ns-{}", project_namespace(&project, "proj-a").await);
    namespace(&hub, &a, &[]).await;

    let pod = producer_pod(hub_cp, &on_host, 0).await;
    eventually(Duration::from_secs(30), "proj-a's record on the hub", async || record(&hub, &a).await == Some(vec![]))
        .await;
    assert!(metrics(&pod.process).contains("edgegate_leader 1"), "{}", metrics(&pod.process));
    hub_cp.assert_nothing_refused();
}
