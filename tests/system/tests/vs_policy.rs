//! The same rule three ways on one kube-apiserver (scripts/vs-policy.sh runs this; not part of
//! CI): no admission, a ValidatingAdmissionPolicy with the EdgeReachability as its parameter
//! (tests/policy/edgereachability-vap.yaml), and edgegate's webhook. Prints the answers to the
//! decision table, the create times of large slices, throughput and CPU per create, and the
//! webhook calls its matchConditions save.

use edgegate_system_tests::helpers::*;
use futures::StreamExt;

const SCOPE: &str = "vs";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    None,
    Policy,
    Webhook,
}

fn kubectl(cp: &ControlPlane, args: &[&str]) {
    let out = std::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", cp.kubeconfig.display()))
        .args(args)
        .output()
        .expect("kubectl");
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Put `mode` in force and wait until a known-bad copy shows it.
async fn switch(cp: &ControlPlane, client: &Client, webhook_port: u16, mode: Mode, match_conditions: bool) {
    kubectl(
        cp,
        &[
            "delete",
            "--ignore-not-found",
            "-f",
            &repo().join("tests/policy/edgereachability-vap.yaml").display().to_string(),
        ],
    );
    let vwcs: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let _ = vwcs.delete(&format!("edgegate-{SCOPE}"), &DeleteParams::default()).await;
    match mode {
        Mode::None => {}
        Mode::Policy => {
            kubectl(cp, &["apply", "-f", &repo().join("tests/policy/edgereachability-vap.yaml").display().to_string()])
        }
        Mode::Webhook if match_conditions => register_webhook(client, webhook_port, SCOPE).await,
        Mode::Webhook => register_webhook_called_always(client, webhook_port, SCOPE).await,
    }
    let bad = slice(SCOPE, "probe", true, &["fd20:0:b::9"]);
    eventually(Duration::from_secs(60), "mode in force", async || {
        create(client, "vs-empty", &bad, true).await.is_err() == (mode != Mode::None)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // every API server watcher caught up
}

fn verdict(r: &Result<(), String>) -> String {
    match r {
        Ok(()) => "admitted".to_owned(),
        Err(e) if e.contains("not carried") => "refused".to_owned(),
        Err(e) => format!("error: {}", e.chars().take(90).collect::<String>()),
    }
}

async fn timed_create(client: &Client, ns: &str, s: &EndpointSlice) -> (Result<(), String>, Duration) {
    let start = Instant::now();
    let r = create(client, ns, s, true).await;
    (r, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes: scripts/vs-policy.sh"]
async fn webhook_versus_validating_admission_policy() {
    let cp = ControlPlane::own();
    let client = cp.client().await;
    install_crd(&client).await;
    let scope = [("edgegate-e2e", SCOPE)];
    for ns in ["vs-none", "vs-named", "vs-empty", "vs-big", "vs-one", "vs-load"] {
        namespace(&client, ns, &scope).await;
    }
    set_record(&client, "vs-named", &["fd20:0:b::1", "FD20:0:B:0::2"]).await;
    set_record(&client, "vs-empty", &[]).await;
    let big: Vec<String> = (0..8192).map(|i| format!("fd20:b:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)).collect();
    let big_refs: Vec<&str> = big.iter().map(String::as_str).collect();
    set_record(&client, "vs-big", &big_refs).await;
    set_record(&client, "vs-load", &big_refs).await;
    set_record(&client, "vs-one", &["fd20:0:c::1"]).await;
    let webhook = start_webhook(&cp, &cp.kubeconfig);
    let ca = dev_certs().join("ca.crt");
    until_ready("webhook ready", &webhook, Some(&ca)).await;

    // 1. Answers.
    let last_named = |n: usize| -> Vec<String> {
        let mut a: Vec<String> = (0..n - 1).map(|i| format!("fd20:e:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)).collect();
        a.push(big[8191].clone());
        a
    };
    let (s200, s1000) = (last_named(200), last_named(1000));
    let cases: Vec<(&str, &str, EndpointSlice)> = vec![
        ("no record", "vs-none", slice(SCOPE, "c1", true, &["fd20:0:b::9"])),
        ("record names it", "vs-named", slice(SCOPE, "c2", true, &["fd20:0:b::1"])),
        ("record names none", "vs-named", slice(SCOPE, "c3", true, &["fd20:0:b::9"])),
        ("empty record", "vs-empty", slice(SCOPE, "c4", true, &["fd20:0:b::1"])),
        ("not a copy", "vs-empty", slice(SCOPE, "c5", false, &["fd20:0:b::1"])),
        ("copy without endpoints", "vs-empty", slice(SCOPE, "c6", true, &[])),
        ("record spells it FD20:0:B:0::2", "vs-named", slice(SCOPE, "c7", true, &["fd20:0:b::2"])),
        ("200 endpoints, 8,192-address record, last named", "vs-big", {
            let r: Vec<&str> = s200.iter().map(String::as_str).collect();
            slice(SCOPE, "c8", true, &r)
        }),
        ("1,000 endpoints, 8,192-address record, last named", "vs-big", {
            let r: Vec<&str> = s1000.iter().map(String::as_str).collect();
            slice(SCOPE, "c9", true, &r)
        }),
    ];
    let mut table = vec![String::new(); cases.len()];
    for mode in [Mode::None, Mode::Policy, Mode::Webhook] {
        switch(&cp, &client, webhook.port, mode, true).await;
        for (i, (_, ns, s)) in cases.iter().enumerate() {
            let (r, took) = timed_create(&client, ns, s).await;
            table[i].push_str(&format!(" | {} ({} ms)", verdict(&r), took.as_millis()));
        }
    }
    eprintln!("vs: | case | none | ValidatingAdmissionPolicy | edgegate webhook |");
    for (i, (what, _, _)) in cases.iter().enumerate() {
        eprintln!("vs: | {what}{} |", table[i]);
    }

    // 2. Throughput: 2,000 named copies against a 1-address and an 8,192-address record,
    // modes alternating over rounds.
    let apiserver = cp.pid("kube-apiserver");
    let webhook_pid = pid_of(&webhook);
    for round in 0..3 {
        for mode in [Mode::None, Mode::Policy, Mode::Webhook] {
            switch(&cp, &client, webhook.port, mode, true).await;
            for (ns, address) in [("vs-one", "fd20:0:c::1"), ("vs-load", big[8191].as_str())] {
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
                let _ = api.delete_collection(&DeleteParams::default(), &Default::default()).await;
                let (cpu0, wcpu0, start) = (cpu_seconds(apiserver), cpu_seconds(webhook_pid), Instant::now());
                let mut latencies: Vec<Duration> = futures::stream::iter(0..2000)
                    .map(|i| {
                        let client = client.clone();
                        async move {
                            let s = slice(SCOPE, &format!("load-{i}"), true, &[address]);
                            let t = Instant::now();
                            create(&client, ns, &s, false).await.expect("named copy admitted");
                            t.elapsed()
                        }
                    })
                    .buffer_unordered(16)
                    .collect()
                    .await;
                let wall = start.elapsed();
                let (cpu, wcpu) = (cpu_seconds(apiserver) - cpu0, cpu_seconds(webhook_pid) - wcpu0);
                latencies.sort();
                eprintln!(
                    "vs: round {round} {mode:?} record {} addresses: {:.0} creates/s, p50 {:.1} ms, p99 {:.1} ms, API server CPU {:.0} µs/create, webhook CPU {:.0} µs/create",
                    if ns == "vs-one" { 1 } else { 8192 },
                    2000.0 / wall.as_secs_f64(),
                    latencies[1000].as_secs_f64() * 1000.0,
                    latencies[1980].as_secs_f64() * 1000.0,
                    cpu / 2000.0 * 1e6,
                    if mode == Mode::Webhook { wcpu / 2000.0 * 1e6 } else { 0.0 },
                );
                let _ = api.delete_collection(&DeleteParams::default(), &Default::default()).await;
            }
        }
    }

    // 3. Calls matchConditions save: 500 creates (a third of them without endpoints) and 1,000
    // metadata-only updates, with and without them.
    let reviews = || webhook_reviews(webhook.port, &ca);
    for with in [true, false] {
        switch(&cp, &client, webhook.port, Mode::Webhook, with).await;
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "vs-one");
        let _ = api.delete_collection(&DeleteParams::default(), &Default::default()).await;
        let before = reviews();
        for i in 0..500 {
            let addresses: &[&str] = if i % 3 == 0 { &[] } else { &["fd20:0:c::1"] };
            create(&client, "vs-one", &slice(SCOPE, &format!("mix-{i}"), true, addresses), false)
                .await
                .unwrap_or_else(|e| panic!("creating mix-{i}: {e}"));
        }
        for i in 0..1000 {
            let label = json!({"metadata": {"labels": {"claimed": format!("{i}")}}});
            api.patch(&format!("mix-{}", i % 500), &PatchParams::default(), &Patch::Merge(label))
                .await
                .unwrap_or_else(|e| panic!("labelling: {e}"));
        }
        eprintln!(
            "vs: matchConditions {}: 1,500 writes (500 creates, a third without endpoints; 1,000 label updates) → {} webhook calls",
            if with { "on" } else { "off" },
            reviews() - before
        );
    }
}
