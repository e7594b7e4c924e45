//! edgegate-producer discovering its projects from Milo, as installed with components/producer
//! and components/producer-milo, against the Milo stand-in (tests/system/src/milo.rs: a TLS path
//! proxy in front of one real kube-apiserver serving every project by path, with the Project
//! CRD of tests/crds/milo.yaml at its root), under the producer's own ServiceAccount on the hub
//! and its own identity on Milo (the render's roles bound to it).

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::milo::{Fault, Milo, PROJECT_LABEL, ROOT, world};
use edgegate_system_tests::pod::{Render, Rewrite, RunningPod, run};
use edgegate_system_tests::shipped;
use edgegate_system_tests::soak::project::{put, resource};
use kube::api::DynamicObject;

async fn project(backing: &Client, name: &str, ready: &str) {
    world::project(backing, name, Some(ready)).await;
}

/// A kind of Milo's IAM (tests/crds/milo-iam.yaml).
fn iam(kind: &str, plural: &str) -> kube::discovery::ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("iam.miloapis.com", "v1alpha1", kind);
    kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// Projects come and go in Milo: a Ready one is engaged and its records written; one not ready
/// is left (no record) until it turns Ready; one whose requests Milo answers 500 goes unsynced
/// alone, the others served; a deleted one, lingering while its resources drain (as Milo's do),
/// is left at once and its record left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_discovered_from_milo_each_on_its_own() {
    let hub_cp = ControlPlane::own();
    let backing_cp = ControlPlane::own();
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    install_crd(&hub).await;
    world::install_crds(&backing_cp);
    let projects = world::projects(&backing);
    let proxies: Api<DynamicObject> = Api::all_with(backing.clone(), &resource("HTTPProxy", "httpproxies"));
    eventually(Duration::from_secs(30), "Milo's CRDs served", async || {
        projects.list(&Default::default()).await.is_ok() && proxies.list(&Default::default()).await.is_ok()
    })
    .await;
    let milo = Milo::start(&backing_cp).await;

    let render = shipped::install_with_milo("milo", &hub_cp, &backing_cp, &milo, &[]).await;
    project(&backing, "alpha", "True").await;
    project(&backing, "beta", "False").await;
    let a = world::project_namespace(&backing, &hub, "alpha", "alpha-web", Some("fd20:0:a1::1")).await;
    let b = world::project_namespace(&backing, &hub, "beta", "beta-web", Some("fd20:0:b1::1")).await;

    let started = Instant::now();
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    let producer = &pod.process;
    let took = eventually(Duration::from_secs(30), "alpha's record", async || {
        record(&hub, &a).await == Some(vec!["fd20:0:a1::1".to_owned()])
    })
    .await;
    eprintln!("milo: producer started → the Ready project's record written after {:?}", started.elapsed());
    // `edgegate reachability` for a Milo project, with the producer's own credential and grant
    // (deploy/milo): what the producer does with the Project, then its answer.
    let token = format!("{{token: {}}}", edgegate_system_tests::control_plane::MILO_USER_TOKEN);
    let file = backing_cp.dir.join("milo-producer.kubeconfig");
    std::fs::write(&file, shipped::milo_kubeconfig(&backing_cp, &milo, &token)).expect("kubeconfig");
    let explain = |project: &str| {
        std::process::Command::new(binary("edgegate"))
            .args(["reachability", &format!("--milo-kubeconfig={}", file.display()), "--project", project])
            .args(["-n", &format!("{project}-web")])
            .output()
            .expect("edgegate reachability")
    };
    let out = explain("alpha");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("project alpha: engaged by the producer") && text.contains("fd20:0:a1::1"), "{text}");
    let out = explain("nobody");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no Project nobody"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

    // No polling: an idle project's watches are long requests (10 to 20 min), so over 30 s of nothing
    // changing beta costs Milo next to no request.
    let before = milo.requests().get("beta").copied().unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let idle = milo.requests().get("beta").copied().unwrap_or_default() - before;
    eprintln!(
        "milo: an idle project's requests over 30 s: {idle} ({:.3}/s; five watches of 10 to 20 min: about 0.006/s)",
        idle as f64 / 30.0
    );
    assert!(idle <= 3, "an idle project polled: {idle} requests in 30 s");

    // Beta deleted as Milo deletes a Project: it lingers while its resources drain (a finalizer,
    // condition ResourceCleanup), still Ready: left at once, not when it is gone.
    use kube::api::{Patch, PatchParams};
    let draining = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
        "metadata": {"name": "beta", "finalizers": ["milo.test/resource-cleanup"]}});
    projects.patch("beta", &PatchParams::apply("milo-cleanup"), &Patch::Apply(&draining)).await.expect("finalizer");
    let cleanup = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": {"name": "beta"},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Test", "message": "", "lastTransitionTime": "2026-12-05T00:00:00Z"},
            {"type": "ResourceCleanup", "status": "True", "reason": "Deleting", "message": "", "lastTransitionTime": "2026-12-05T00:00:00Z"}]}});
    projects.patch_status("beta", &PatchParams::apply("milo").force(), &Patch::Apply(&cleanup)).await.expect("cleanup");
    projects.delete("beta", &Default::default()).await.expect("delete beta");
    eventually(Duration::from_secs(30), "beta left while it drains", async || {
        metrics(producer).contains("edgegate_producer_projects{state=\"synced\"} 1")
    })
    .await;
    assert!(projects.get_opt("beta").await.expect("get beta").is_some(), "beta lingers while it drains");
    assert_eq!(record(&hub, &b).await.map(|r| r.len()), Some(2), "a draining project leaves its record");
    let gone = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
        "metadata": {"name": "beta", "finalizers": []}});
    projects.patch("beta", &PatchParams::apply("milo-cleanup"), &Patch::Apply(&gone)).await.expect("drained");
    eventually(Duration::from_secs(30), "beta gone", async || {
        projects.get_opt("beta").await.is_ok_and(|p| p.is_none())
    })
    .await;
    // Nothing asks Milo for beta any more: it was let go while it drained.
    let asked = milo.requests().get("beta").copied().unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(milo.requests().get("beta").copied().unwrap_or_default(), asked, "beta still watched");
    assert_eq!(record(&hub, &b).await.map(|r| r.len()), Some(2), "a project that goes leaves its record");
    let requests = milo.requests();
    eprintln!("milo: requests served per project: {requests:?}");
    assert!(requests.get("alpha").is_some_and(|n| *n > 0) && requests.get("beta").is_some_and(|n| *n > 0));
    hub_cp.assert_nothing_refused();
    backing_cp.assert_nothing_refused();
}

/// A hub and a Milo stand-in of their own, with the producer installed as `name` with short
/// timings (not yet running).
struct Quick {
    withdraw_after: Duration,
    grace: Duration,
    hub_cp: ControlPlane,
    backing_cp: ControlPlane,
    hub: Client,
    backing: Client,
    milo: Milo,
    render: edgegate_system_tests::pod::Render,
}

async fn quick(name: &str) -> Quick {
    let (withdraw_after, grace) = (Duration::from_secs(2), Duration::from_secs(2));
    let hub_cp = ControlPlane::own();
    let backing_cp = ControlPlane::own();
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let flags = [format!("--withdraw-after={}s", withdraw_after.as_secs()), format!("--grace={}s", grace.as_secs())];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let render = shipped::install_with_milo(name, &hub_cp, &backing_cp, &milo, &flags).await;
    Quick { withdraw_after, grace, hub_cp, backing_cp, hub, backing, milo, render }
}

/// Beta's unserved copy in `beta` (made just now) collected within the grace and a few seconds,
/// while `alpha` (what happened to alpha) holds nobody else's deletions.
async fn collected_in_time(hub: &Client, beta: &str, grace: Duration, alpha: &str) {
    let started = Instant::now();
    eventually(Duration::from_secs(90), "beta's copy collected", async || !exists(hub, beta, "unserved").await).await;
    let took = started.elapsed();
    eprintln!("milo: {alpha}: beta's unserved copy collected after {took:?} (grace {grace:?})");
    let bound = grace + Duration::from_secs(6);
    assert!(took <= bound, "beta's copy took {took:?}, over {bound:?}, with {alpha}");
}

/// A project that stops answering (Milo holds its requests open, its watches cut) holds its own
/// copies and nobody else's: beta's copy, unserved, is collected within the grace and a few
/// seconds while alpha's six, due at the same moment, are kept (counted as incomplete) until
/// alpha answers again. Failed on the old code: each of alpha's due copies waited 5 s for a live
/// read inside the pruner's one sequence of passes, over and over, and beta's waited behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_project_holds_only_its_own_deletions() {
    const SCOPE: &str = "silent";
    let Quick { withdraw_after, grace, hub_cp, backing_cp: _backing_cp, hub, backing, milo, render } =
        quick("milo-silent").await;
    project(&backing, "alpha", "True").await;
    project(&backing, "beta", "True").await;
    let mut alpha = Vec::new();
    for k in 0..6 {
        let address = format!("fd20:0:a{k}::1");
        alpha.push(world::project_namespace(&backing, &hub, "alpha", &format!("alpha-{k}"), Some(&address)).await);
    }
    let beta = world::project_namespace(&backing, &hub, "beta", "beta-web", Some("fd20:0:b1::1")).await;
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    let producer = &pod.process;
    eventually(Duration::from_secs(60), "every record written", async || {
        for ns in alpha.iter().chain([&beta]) {
            if record(&hub, ns).await.is_none_or(|r| r.is_empty()) {
                return false;
            }
        }
        true
    })
    .await;
    // Both projects whole for longer than --withdraw-after + --grace.
    tokio::time::sleep(withdraw_after + grace + Duration::from_secs(1)).await;

    milo.set_fault("alpha", Some(Fault::Silent));
    // Copies nobody serves, due once the grace has run: one in each of alpha's namespaces, one in
    // beta's.
    for ns in &alpha {
        create(&hub, ns, &slice(SCOPE, "unserved", true, &["fd20:0:dead::1"]), false).await.expect("alpha's copy");
    }
    create(&hub, &beta, &slice(SCOPE, "unserved", true, &["fd20:0:dead::2"]), false).await.expect("beta's copy");
    let started = Instant::now();
    collected_in_time(&hub, &beta, grace, "alpha silent").await;
    let held = eventually(Duration::from_secs(30), "alpha's namespaces held as incomplete", async || {
        metrics(producer).contains("edgegate_producer_prune_held_namespaces{reason=\"incomplete\"} 6")
    })
    .await;
    eprintln!("milo: alpha's six namespaces counted as held {:?} after its copies were made", started.elapsed());
    let _ = held;
    for ns in &alpha {
        assert!(exists(&hub, ns, "unserved").await, "alpha's copy in {ns} deleted while alpha did not answer");
    }

    milo.set_fault("alpha", None);
    let back = Instant::now();
    eventually(Duration::from_secs(180), "alpha's copies collected once it answers", async || {
        for ns in &alpha {
            if exists(&hub, ns, "unserved").await {
                return false;
            }
        }
        true
    })
    .await;
    eprintln!("milo: alpha answering again: its copies collected {:?} after", back.elapsed());
    hub_cp.assert_nothing_refused();
}

/// The fidelity case: projects served by kube-apiservers of their own on one etcd, each under
/// `/projects/<p>` (Milo's layout), reached through Milo's paths. While alpha's server is down,
/// beta's unserved copy is collected as usual, alpha's is kept (its namespace counted as held,
/// incomplete) and alpha's record still names what it served; once the server is back, alpha's
/// copy is collected and its record was never withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_server_restarting_holds_only_its_own_copies() {
    const SCOPE: &str = "restart";
    let Quick { withdraw_after, grace, hub_cp, backing_cp, hub, backing, milo, render } = quick("milo-restart").await;
    let mut namespaces = Vec::new();
    let mut servers = Vec::new();
    for (p, address) in [("alpha", "fd20:0:c1::1"), ("beta", "fd20:0:c2::1")] {
        let server = backing_cp.start_project_server(p);
        world::install_crds_with(&server.kubeconfig);
        shipped::grant_project_server(&server);
        milo.route(p, &server.server, &backing_cp).await;
        let client = edgegate::runtime::client::kube_client(Some(&server.kubeconfig), None).await.expect("client");
        let proxies: Api<DynamicObject> = Api::all_with(client.clone(), &resource("HTTPProxy", "httpproxies"));
        eventually(Duration::from_secs(30), "the project kinds served", async || {
            proxies.list(&Default::default()).await.is_ok()
        })
        .await;
        project(&backing, p, "True").await;
        namespaces
            .push((world::project_namespace(&client, &hub, p, &format!("{p}-web"), Some(address)).await, address));
        servers.push(server);
    }
    let [(alpha, alpha_address), (beta, _)] = [namespaces[0].clone(), namespaces[1].clone()];
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(60), "both records written", async || {
        record(&hub, &alpha).await.is_some_and(|r| !r.is_empty())
            && record(&hub, &beta).await.is_some_and(|r| !r.is_empty())
    })
    .await;
    // Both projects whole for longer than --withdraw-after + --grace.
    tokio::time::sleep(withdraw_after + grace + Duration::from_secs(1)).await;

    let down = std::time::SystemTime::now();
    tokio::task::block_in_place(|| backing_cp.pause(&servers[0].name));
    create(&hub, &alpha, &slice(SCOPE, "unserved", true, &["fd20:0:dead::1"]), false).await.expect("alpha's copy");
    create(&hub, &beta, &slice(SCOPE, "unserved", true, &["fd20:0:dead::2"]), false).await.expect("beta's copy");
    collected_in_time(&hub, &beta, grace, "alpha's server down").await;
    eventually(Duration::from_secs(30), "alpha's namespace held as incomplete", async || {
        metrics(&pod.process).contains("edgegate_producer_prune_held_namespaces{reason=\"incomplete\"} 1")
    })
    .await;
    assert!(exists(&hub, &alpha, "unserved").await, "alpha's copy deleted while its server was down");
    let named = record(&hub, &alpha).await.unwrap_or_default();
    assert!(named.iter().any(|a| a == alpha_address), "alpha's record withdrawn while its server was down: {named:?}");

    tokio::task::block_in_place(|| backing_cp.resume(&servers[0].name));
    let up = std::time::SystemTime::now();
    let back = Instant::now();
    eventually(Duration::from_secs(180), "alpha's copy collected once its server is back", async || {
        !exists(&hub, &alpha, "unserved").await
    })
    .await;
    eprintln!("milo: alpha's server back: its copy collected {:?} after", back.elapsed());
    let named = record(&hub, &alpha).await.unwrap_or_default();
    assert!(named.iter().any(|a| a == alpha_address), "alpha's record lost its address across the restart: {named:?}");
    hub_cp.assert_nothing_refused();
    // A kube-apiserver just started refuses what its RBAC informers have not synced yet.
    let (refused, excused) = backing_cp.refused_outside(&[(down, up)]);
    eprintln!("milo: refusals on the project servers right after the restart (excused): {excused}");
    assert!(refused.is_empty(), "Milo's servers refused the producer: {refused:#?}");
}

/// Whether the pod's process has ended.
fn exited(pod: &mut RunningPod) -> bool {
    matches!(pod.process.child.try_wait(), Ok(Some(_)))
}

/// `/readyz`'s status and body.
fn readyz(pod: &RunningPod) -> (u16, String) {
    let url = format!("http://127.0.0.1:{}/readyz", pod.process.port);
    let out = std::process::Command::new("curl").args(["-s", "--max-time", "2", "-w", "\n%{http_code}", &url]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let (body, code) = text.rsplit_once('\n').unwrap_or_default();
    (code.parse().unwrap_or(0), body.to_owned())
}

/// The producer's discovery from Milo, as its metrics say: synced, and failures so far.
fn discovery(pod: &RunningPod) -> (bool, u64) {
    let scrape = metrics(&pod.process);
    let value =
        |name: &str| scrape.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or_default();
    let synced = value("edgegate_producer_discovery_synced{source=\"milo\"} ") == 1.0;
    (synced, value("edgegate_producer_discovery_failures_total{source=\"milo\"} ") as u64)
}

/// docs/producer.md's Milo install pasted as written, in a clone, kubectl's current context the
/// hub's: "Milo's side" (its own kustomization binding a group: the group may then list projects
/// and read a project's proxies, and nothing more), then "Deploy" with Milo, the hub's install
/// applied where the page says to add the component and apply. The producer, run as the render
/// ships it with that Secret (its credential a client certificate of Milo's), engages a Ready
/// project and writes its record, and exports when the certificate expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_milo_install_works_when_pasted() {
    use edgegate_system_tests::docs::{clone, paste, sh_block, split_at};
    let (hub_cp, backing_cp) = (ControlPlane::own(), ControlPlane::own());
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let clone = clone();
    std::fs::copy(&backing_cp.kubeconfig, clone.path().join("milo-admin.kubeconfig")).expect("Milo's admin kubeconfig");
    // The producer's credential a client certificate of Milo's client CA (CN edgegate-producer).
    let pem = |f: &str| base64(&std::fs::read(backing_cp.dir.join(f)).expect("the producer's certificate"));
    let certificate = format!(
        "{{client-certificate-data: {}, client-key-data: {}}}",
        pem("milo-producer.crt"),
        pem("milo-producer.key")
    );
    std::fs::write(clone.path().join("milo.kubeconfig"), shipped::milo_kubeconfig(&backing_cp, &milo, &certificate))
        .expect("the producer's kubeconfig");

    paste(clone.path(), &hub_cp.kubeconfig, &sh_block("producer.md", "### Milo's side"));
    let may = |verb: &str, what: &str| {
        let commands = format!(
            "kubectl --kubeconfig milo-admin.kubeconfig auth can-i {verb} {what} --as=someone --as-group=my-producers || true"
        );
        paste(clone.path(), &hub_cp.kubeconfig, &commands).trim() == "yes"
    };
    assert!(may("watch", "projects.resourcemanager.miloapis.com"), "the group may not watch projects");
    assert!(may("list", "httpproxies.networking.datumapis.com"), "the group may not list proxies");
    assert!(!may("create", "httpproxies.networking.datumapis.com"), "the group may write");

    // Its IAM alternative: refused as shipped (no uid), applied as the page says with the uid of
    // the producer's User.
    let users = Api::<DynamicObject>::all_with(backing.clone(), &iam("User", "users"));
    let user: DynamicObject = serde_json::from_value(json!({"apiVersion": "iam.miloapis.com/v1alpha1",
        "kind": "User", "metadata": {"name": "edgegate-producer"}, "spec": {"email": "edgegate@example.com"}}))
    .expect("user");
    let uid = users.create(&Default::default(), &user).await.expect("the producer's User").metadata.uid.expect("uid");
    let shipped = std::process::Command::new("kubectl")
        .args(["--kubeconfig", "milo-admin.kubeconfig", "apply", "--server-side", "-k", "deploy/milo-iam"])
        .current_dir(clone.path())
        .output()
        .expect("kubectl");
    let refusal = String::from_utf8_lossy(&shipped.stderr);
    assert!(!shipped.status.success() && refusal.contains("UID is required"), "deploy/milo-iam as shipped: {refusal}");
    paste(clone.path(), &hub_cp.kubeconfig, &sh_block("producer.md", "authorizes through its IAM webhook"));
    let bindings =
        Api::<DynamicObject>::namespaced_with(backing.clone(), "milo-system", &iam("PolicyBinding", "policybindings"));
    let binding = bindings.get("edgegate-producer").await.expect("the binding applied");
    assert_eq!(binding.data["spec"]["subjects"][0]["uid"], json!(uid), "{:?}", binding.data);

    let (on_milo, on_hub) = split_at(&sh_block("producer.md", "With Milo instead of a Secret"), "# on the hub");
    paste(clone.path(), &hub_cp.kubeconfig, &on_milo);
    let render = Render::tuned(
        "milo-pasted",
        &["base"],
        &[
            "components/dev-certs",
            "components/producer",
            "components/producer-milo",
            "components/enforce",
            "components/images",
        ],
        &[],
    );
    render.apply_but_admission(&hub_cp);
    paste(clone.path(), &hub_cp.kubeconfig, &on_hub);

    project(&backing, "alpha", "True").await;
    let a = world::project_namespace(&backing, &hub, "alpha", "alpha-web", Some("fd20:0:a1::1")).await;
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(60), "alpha's record", async || {
        record(&hub, &a).await == Some(vec!["fd20:0:a1::1".to_owned()])
    })
    .await;
    assert_eq!(readyz(&pod).0, 200, "{}", readyz(&pod).1);
    // The certificate's notAfter (two days from its making) as the credential's expiry.
    let expiry = metrics(&pod.process)
        .lines()
        .find_map(|l| l.strip_prefix("edgegate_producer_milo_credential_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the credential's expiry exported");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    assert!((1.9..=2.01).contains(&((expiry - now) / 86400.0)), "expires {expiry}, now {now}");
    hub_cp.assert_nothing_refused();
}

/// Milo refusing the producer from the start, or not serving Projects yet: the replica is not
/// Ready (engaging nothing, it would look healthy while writing nothing), says why at /readyz
/// and counts it; once Milo
/// answers, Ready and writing. Milo failing later: the replica stays Ready, its projects as they
/// are, and discovery shows unsynced (the one alert, not one per project). Failed on the old
/// code: Ready with no project, and nothing counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_that_cannot_see_milo_says_so() {
    let (hub_cp, backing_cp) = (ControlPlane::own(), ControlPlane::own());
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let render = shipped::install_with_milo("milo-unseen", &hub_cp, &backing_cp, &milo, &[]).await;
    project(&backing, "alpha", "True").await;
    let a = world::project_namespace(&backing, &hub, "alpha", "alpha-web", Some("fd20:0:a1::1")).await;

    milo.set_fault(ROOT, Some(Fault::Status(403)));
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(30), "the hub listed and a failed list of Milo's projects counted", async || {
        discovery(&pod).1 >= 1 && !readyz(&pod).1.contains("hub namespaces")
    })
    .await;
    let (code, why) = readyz(&pod);
    assert_eq!(code, 503, "not Ready before Milo's projects are listed: {why}");
    assert!(why.contains("projects not discovered yet (milo)") && why.contains("403"), "{why}");
    assert!(!discovery(&pod).0, "discovery synced while Milo refuses");
    assert_eq!(record(&hub, &a).await, None);
    // Milo up before its own CRDs are established (its /readyz turns green first): Projects not
    // found is no answer either, not "no projects".
    let failures = discovery(&pod).1;
    milo.set_fault(ROOT, Some(Fault::Status(404)));
    eventually(Duration::from_secs(30), "a list of Projects not found counted and said", async || {
        discovery(&pod).1 > failures && readyz(&pod).1.contains("404")
    })
    .await;
    let (code, why) = readyz(&pod);
    assert_eq!(code, 503, "Ready while Milo's Projects are not served: {why}");
    assert!(!discovery(&pod).0, "discovery synced while Projects are not found");

    milo.set_fault(ROOT, None);
    let lifted = Instant::now();
    eventually(Duration::from_secs(60), "Ready once Milo answers", async || readyz(&pod).0 == 200).await;
    eprintln!("milo: Milo answering again → the producer Ready after {:?}", lifted.elapsed());
    eventually(Duration::from_secs(30), "alpha's record", async || {
        record(&hub, &a).await == Some(vec!["fd20:0:a1::1".to_owned()])
    })
    .await;
    assert!(discovery(&pod).0, "discovery not synced once listed");

    // Milo failing later: discovery unsynced, the replica Ready all the same, alpha left as it is.
    // (A 500: a 503 is retried by the client for minutes before it counts.)
    milo.set_fault(ROOT, Some(Fault::Status(500)));
    let took = eventually(Duration::from_secs(30), "discovery unsynced", async || !discovery(&pod).0).await;
    eprintln!("milo: Milo's root answering 500 → discovery unsynced after {took:?}");
    let (code, why) = readyz(&pod);
    assert_eq!(code, 200, "a Milo outage after the first list took the replica out: {why}");
    assert_eq!(record(&hub, &a).await, Some(vec!["fd20:0:a1::1".to_owned()]), "alpha's record changed");
    milo.set_fault(ROOT, None);
    eventually(Duration::from_secs(60), "discovery synced again", async || discovery(&pod).0).await;
    hub_cp.assert_nothing_refused();
}

/// Credentials from the Secret edgegate-producer-milo as a workload has them: an exec plugin the
/// image does not carry is refused at start, naming the plugin and what is supported (failed on
/// the old code: "a task the process needs ended", the plugin never named); a kubeconfig that
/// changes in the Secret stops the producer, saying why, so the container starts again with it
/// (the certificates in it are read once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn milo_credentials_refused_or_taken_up() {
    let (hub_cp, backing_cp) = (ControlPlane::own(), ControlPlane::own());
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let render = shipped::install_with_milo("milo-credentials", &hub_cp, &backing_cp, &milo, &[]).await;
    let token = format!("{{token: {}}}", edgegate_system_tests::control_plane::MILO_USER_TOKEN);
    let good = shipped::milo_kubeconfig(&backing_cp, &milo, &token);

    let plugin = "{exec: {apiVersion: client.authentication.k8s.io/v1, command: datumctl, args: [auth, get-token]}}";
    shipped::set_milo_kubeconfig(&hub_cp, &shipped::milo_kubeconfig(&backing_cp, &milo, plugin)).await;
    let mut pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(30), "the producer refused to start", async || exited(&mut pod)).await;
    let log = pod.log();
    assert!(log.contains("exec plugin") && log.contains("datumctl"), "the plugin named: {log}");
    assert!(log.contains("tokenFile"), "the supported kinds named: {log}");
    drop(pod);

    shipped::set_milo_kubeconfig(&hub_cp, &good).await;
    let mut pod = run(&hub_cp, &render, "edgegate-producer", 1, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(60), "Ready", async || readyz(&pod).0 == 200).await;
    // The same credential, rewritten: the Secret changed, so the kubeconfig does.
    shipped::set_milo_kubeconfig(&hub_cp, &format!("{good}# rotated\n")).await;
    let took = eventually(Duration::from_secs(120), "the producer stopped", async || exited(&mut pod)).await;
    eprintln!("milo: the kubeconfig Secret changed → the producer stopped to start again after {took:?}");
    assert!(pod.log().contains("Milo's kubeconfig or a file it names changed"), "{}", pod.log());
}

/// A `tokenFile` beside the kubeconfig in the Secret, rotated while the producer runs: no restart
/// (the kubeconfig is unchanged), the requests after the rotation carry the new token (a valid
/// one keeps them succeeding; an invalid one, rotated in next, is refused: so it was read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_is_read_again_without_a_restart() {
    use edgegate_system_tests::control_plane::{MILO_USER_NEXT_TOKEN, MILO_USER_TOKEN};
    let (hub_cp, backing_cp) = (ControlPlane::own(), ControlPlane::own());
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let render = shipped::install_with_milo("milo-token-file", &hub_cp, &backing_cp, &milo, &[]).await;
    project(&backing, "alpha", "True").await;
    let a = world::project_namespace(&backing, &hub, "alpha", "alpha-web", Some("fd20:0:a1::1")).await;
    let kubeconfig = shipped::milo_kubeconfig(&backing_cp, &milo, "{tokenFile: token}");
    shipped::set_milo_secret(&hub_cp, &[("kubeconfig", &kubeconfig), ("token", MILO_USER_TOKEN)]).await;
    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    eventually(Duration::from_secs(60), "alpha's record", async || {
        record(&hub, &a).await == Some(vec!["fd20:0:a1::1".to_owned()])
    })
    .await;
    let pid = pod.pid();
    // Each rotation: past the client's minute between reads of the file, then Milo's root
    // watch cut (a 500, lifted), so the next requests are made with what the file says now.
    let rotate = async |token: &str| {
        shipped::set_milo_secret(&hub_cp, &[("kubeconfig", &kubeconfig), ("token", token)]).await;
        tokio::time::sleep(Duration::from_secs(75)).await;
        milo.set_fault(ROOT, Some(Fault::Status(500)));
        eventually(Duration::from_secs(30), "the root watch cut", async || !discovery(&pod).0).await;
        milo.set_fault(ROOT, None);
    };
    rotate(MILO_USER_NEXT_TOKEN).await;
    eventually(Duration::from_secs(30), "listed again with the next token", async || discovery(&pod).0).await;
    assert_eq!(pod.pid(), pid, "restarted for a token file");
    let (mark, failures) = (pod.log().len(), discovery(&pod).1);
    rotate("not-a-token").await;
    // Lifted: the lists that follow carry the token the file says now, refused.
    eventually(Duration::from_secs(30), "a list refused as unauthorized after the rotation", async || {
        discovery(&pod).1 > failures + 1 && pod.log()[mark..].contains("code: 401")
    })
    .await;
    assert!(!discovery(&pod).0, "listed with a token Milo does not know: the file was not read again");
    assert_eq!(pod.pid(), pid, "restarted for a token file");
}
