//! The pruner's safety valves on a real kube-apiserver, each in the incident it exists for: a
//! withdrawal spread over many namespaces is paced as one; a copy that slipped past the webhook is
//! collected on its own event; a leader that cannot renew stops deleting before another may start,
//! and a clean stop hands the Lease over at once.
//!
//! Each runs deploy/'s pruner as installed (overlays/dev: enforcing) through the pod runner, under
//! its own ServiceAccount, on a control plane of its own; the timings it shortens are in the test.

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::pod::{Render, Rewrite, RunningPod, run};
use edgegate_system_tests::shipped::with_pruner_flags;

async fn pruner(cp: &ControlPlane, render: &Render, replica: usize) -> RunningPod {
    run(cp, render, "edgegate-pruner", replica, &[Rewrite::ListenAddress]).await
}

fn deleted_lines(log: &str) -> usize {
    log.lines().filter(|l| l.contains("deleted copy")).count()
}

fn leads(p: &Process) -> bool {
    metrics(p).lines().any(|l| l == "edgegate_leader 1")
}

/// 200 namespaces whose records empty at once: one pass each, one pace for all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_over_many_namespaces_is_paced_as_one() {
    const TEST: &str = "pace";
    const NAMESPACES: usize = 200;
    let (cp, render, client) = with_pruner_flags("safety-pace", &["--max-deletes-per-second=20", "--grace=0s"]).await;
    let names: Vec<String> = (0..NAMESPACES).map(|i| format!("pace-{i:03}")).collect();
    futures::future::join_all(names.iter().enumerate().map(async |(i, ns)| {
        namespace(&client, ns, &[]).await;
        let address = format!("fd20:0:7::{:x}", i + 1);
        set_record(&client, ns, &[&address]).await;
        create(&client, ns, &slice(TEST, "vm", true, &[&address]), false).await.expect("copy");
    }))
    .await;
    let pod = pruner(&cp, &render, 0).await;
    let pruner = &pod.process;
    until_ready("pruner ready", pruner, None).await;
    eventually(Duration::from_secs(30), "the pruner leads", async || leads(pruner)).await;
    futures::future::join_all(names.iter().map(async |ns| set_record(&client, ns, &[]).await)).await;
    let started = Instant::now();
    let slices: Api<EndpointSlice> = Api::all(client.clone());
    let selector = format!("{COPY_LABEL}=true,edgegate-e2e={TEST}");
    eventually(Duration::from_secs(60), "every copy deleted", async || {
        slices.list(&kube::api::ListParams::default().labels(&selector)).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
    let took = started.elapsed();
    let m = metrics(pruner);
    eprintln!("{NAMESPACES} namespaces withdrawn at once at 20/s: all deleted after {took:?}");
    assert!(took >= Duration::from_millis(9_500), "paced across namespaces: {took:?}");
    assert_eq!(counter(&m, "edgegate_prune_deletions_total{result=\"deleted\"}"), NAMESPACES as u64, "{m}");
    assert_eq!(counter(&m, "edgegate_prune_deletions_total{result=\"gone\"}"), 0, "none deleted twice: {m}");
    assert_eq!(deleted_lines(&pruner.log()), NAMESPACES);
    cp.assert_nothing_refused();
}

/// A copy written while the webhook did not judge it (warn mode, failurePolicy Ignore, a bypass)
/// is collected on its own event, not at the next resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_slipped_past_the_webhook_is_collected_at_once() {
    const TEST: &str = "slipped";
    let (cp, render, client) = with_pruner_flags("safety-slipped", &["--resync=10m", "--grace=1s"]).await;
    namespace(&client, "slipped-a", &[]).await;
    set_record(&client, "slipped-a", &["fd20:0:8::1"]).await;
    let pod = pruner(&cp, &render, 0).await;
    until_ready("pruner ready", &pod.process, None).await;
    eventually(Duration::from_secs(30), "the pruner leads", async || leads(&pod.process)).await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the pass after the list has run
    let started = Instant::now();
    create(&client, "slipped-a", &slice(TEST, "slipped", true, &["fd20:0:8::9"]), false).await.expect("no webhook");
    eventually(Duration::from_secs(30), "slipped copy collected", async || {
        !exists(&client, "slipped-a", "slipped").await
    })
    .await;
    let took = started.elapsed();
    eprintln!("a copy created past the webhook (grace 1 s, resync 10 min): deleted after {took:?}");
    assert!(took >= Duration::from_millis(900), "held for the grace: {took:?}");
    assert!(took < Duration::from_secs(4), "collected on its event, within grace + a little: {took:?}");
    cp.assert_nothing_refused();
}

/// Two pruners on one Lease. The leader is stopped (SIGSTOP) in the middle of a paced withdrawal
/// for longer than the Lease: the other takes over, and the old one, resumed, deletes nothing until
/// it holds the Lease again. Then the new leader stops cleanly and hands over within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_deleting_and_a_clean_stop_hands_over() {
    const TEST: &str = "lease";
    let (cp, render, client) =
        with_pruner_flags("safety-lease", &["--lease-duration=4s", "--max-deletes-per-second=1", "--grace=0s"]).await;
    namespace(&client, "lease-a", &[]).await;
    set_record(&client, "lease-a", &["fd20:0:9::ffff"]).await;
    let first_pod = pruner(&cp, &render, 0).await;
    let first = &first_pod.process;
    eventually(Duration::from_secs(30), "the first pruner leads", async || leads(first)).await;
    let second_pod = pruner(&cp, &render, 1).await;
    let second = &second_pod.process;
    until_ready("the second pruner ready", second, None).await;
    assert!(!leads(second), "one leader");

    for i in 0..20 {
        let address = format!("fd20:0:9::{:x}", i + 1);
        create(&client, "lease-a", &slice(TEST, &format!("vm-{i:02}"), true, &[&address]), false).await.expect("copy");
    }
    set_record(&client, "lease-a", &[]).await;
    eventually(Duration::from_secs(30), "the leader deleting", async || deleted_lines(&first.log()) >= 2).await;
    signal(pid_of(first), "STOP");
    let stopped = Instant::now();
    eventually(Duration::from_secs(30), "the second pruner takes over", async || leads(second)).await;
    eprintln!("leader stopped → the other leads after {:?} (lease 4 s)", stopped.elapsed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = deleted_lines(&first.log());
    signal(pid_of(first), "CONT");
    // Resumed: its paced deletions are due at once, but its deadline has passed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = first.log();
    assert_eq!(deleted_lines(&log), before, "the old leader deleted after it resumed:\n{log}");
    assert!(!leads(first), "it follows now");

    signal(pid_of(second), "TERM");
    let handed = Instant::now();
    eventually(Duration::from_secs(10), "the first pruner leads again", async || leads(first)).await;
    let took = handed.elapsed();
    eprintln!("clean stop of the leader → the other leads after {took:?}");
    assert!(took <= Duration::from_secs(2), "a released Lease is taken within 2 s: {took:?}");
    eventually(Duration::from_secs(60), "the withdrawal completes", async || {
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "lease-a");
        slices.list(&Default::default()).await.is_ok_and(|l| l.items.is_empty())
    })
    .await;
    cp.assert_nothing_refused();
}
