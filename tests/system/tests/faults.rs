//! Faults on the real control plane during a mass withdrawal: the namespace's record is emptied
//! over 2,000 copies, deletions paced, and kube-apiserver (then etcd) is stopped and started again
//! in the middle. No copy outside that namespace may go, none may be deleted twice, and the
//! withdrawal must resume on its own and finish soon after the API server is back. And the pruner
//! cut off from the API server in the middle of a paced withdrawal, the addresses named again
//! behind its back: nothing more is deleted.
//!
//! The pruner is deploy/'s (overlays/dev, enforcing), run through the pod runner under its own
//! ServiceAccount; the timings each test shortens are in the test.

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::netns::NetNs;
use edgegate_system_tests::pod::{Render, Rewrite, run, run_in};
use futures::StreamExt;

/// The shipped install with the pruner's `flags` set (`name`: the test's kustomization).
fn tuned(name: &str, flags: &[&str]) -> Render {
    Render::tuned(name, &["overlays/dev"], &[], &[("edgegate-pruner", flags)])
}

const COPIES: usize = 2000;

/// How many EndpointSlices `ns` holds (`usize::MAX` when the API server does not answer): a page
/// of one item and the API server's count of the rest, since listing all 2,000 copies every 250 ms
/// would load the API server as much as the withdrawal does.
async fn copies_in(client: &Client, ns: &str) -> usize {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let page = api.list(&kube::api::ListParams::default().limit(1)).await;
    page.map(|l| l.items.len() + l.metadata.remaining_item_count.unwrap_or(0) as usize).unwrap_or(usize::MAX)
}

/// The two faults run one after the other: each starts a control plane of its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn withdrawal_survives(fault: &'static str) {
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::own();
    let client = cp.client().await;
    let render = tuned(&format!("faults-{fault}"), &["--max-deletes-per-second=400", "--grace=0s"]);
    render.apply_but_admission(&cp);
    for ns in ["withdrawn", "served", "unrecorded"] {
        namespace(&client, ns, &[]).await;
    }
    let addresses: Vec<String> = (0..COPIES).map(|i| format!("fd20:7::{:x}", i + 1)).collect();
    let all: Vec<&str> = addresses.iter().map(String::as_str).collect();
    set_record(&client, "withdrawn", &all).await;
    set_record(&client, "served", &["fd20:8::1"]).await;
    let created = futures::stream::iter(0..COPIES)
        .map(|i| {
            let (client, address) = (client.clone(), addresses[i].clone());
            async move {
                create(&client, "withdrawn", &slice("faults", &format!("web-{i:04}"), true, &[&address]), false).await
            }
        })
        .buffer_unordered(16)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(created, COPIES);
    for i in 0..20 {
        create(&client, "served", &slice("faults", &format!("keep-{i}"), true, &["fd20:8::1"]), false)
            .await
            .expect("create");
        create(&client, "unrecorded", &slice("faults", &format!("keep-{i}"), true, &["fd20:9::1"]), false)
            .await
            .expect("create");
    }

    let pod = run(&cp, &render, "edgegate-pruner", 0, &[Rewrite::ListenAddress]).await;
    let pruner = &pod.process;
    eventually(Duration::from_secs(60), "pruner ready", async || {
        http_status(&format!("http://127.0.0.1:{}/readyz", pruner.port), None) == 200
    })
    .await;
    eventually(Duration::from_secs(30), "the pruner leads", async || metrics(pruner).contains("edgegate_leader 1"))
        .await;
    let count = async |ns: &str| copies_in(&client, ns).await;

    let wait_count = async |what: &str, done: &dyn Fn(usize) -> bool| {
        let start = std::time::Instant::now();
        loop {
            let n = count("withdrawn").await;
            if done(n) {
                return (start.elapsed(), n);
            }
            assert!(start.elapsed() < Duration::from_secs(120), "{what}: not within 120 s ({n} left)");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    set_record(&client, "withdrawn", &[]).await;
    let (before, n) = wait_count("withdrawal under way", &|n| n < COPIES - 200).await;
    let rate_before = (COPIES - n) as f64 / before.as_secs_f64();
    let restart = std::time::Instant::now();
    let down = std::time::SystemTime::now();
    {
        let cp = &cp;
        tokio::task::block_in_place(|| cp.restart(fault, Duration::from_secs(2)));
    }
    let back = std::time::Instant::now();
    let back_wall = std::time::SystemTime::now();
    let left_at_back = count("withdrawn").await;
    let (resumed, _) = wait_count("deleting again", &|n| n < left_at_back).await;
    let (took, _) = wait_count("withdrawal complete", &|n| n == 0).await;
    let text = metrics(pruner);
    let deleted = counter(&text, "edgegate_prune_deletions_total{result=\"deleted\"}");
    let gone = counter(&text, "edgegate_prune_deletions_total{result=\"gone\"}");
    eprintln!(
        "{fault} restart: down {:?}; {left_at_back} copies left when it was back; deleting again {resumed:?} after, all gone {took:?} after \
         (deleting at {rate_before:.0}/s before the fault); deleted={deleted} gone={gone}",
        back - restart
    );
    assert_eq!(count("served").await, 20, "no copy outside the namespace is deleted");
    assert_eq!(count("unrecorded").await, 20, "no copy outside the namespace is deleted");
    assert!(deleted <= COPIES as u64, "no copy deleted twice: {deleted}");
    assert_eq!(deleted + gone, COPIES as u64, "every copy accounted for once");
    // The pruner resumes on its own within 5 s of the API server being back, and then finishes at
    // the rate it deleted at before the fault (with slack for a loaded 2-core machine).
    assert!(resumed <= Duration::from_secs(5), "resumed {resumed:?} after the API server was back");
    let budget = Duration::from_secs(5) + Duration::from_secs_f64(1.5 * left_at_back as f64 / rate_before);
    assert!(took <= budget, "finished {took:?} after the API server was back ({left_at_back} left; budget {budget:?})");
    // A kube-apiserver just started refuses what its RBAC informers have not synced yet.
    let (refused, excused) = cp.refused_outside(&[(down, back_wall)]);
    eprintln!("{fault} restart: {excused} requests of edgegate's refused while RBAC synced after it");
    assert!(refused.is_empty(), "the API server refused edgegate's requests: {refused:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_withdrawal_survives_an_api_server_restart() {
    withdrawal_survives("kube-apiserver").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_withdrawal_survives_an_etcd_restart() {
    withdrawal_survives("etcd").await;
}

/// The pruner in a network namespace (its Pod's own network) whose only way to the API server is
/// one veth link. The record empties and the pruner starts its paced withdrawal (1 a second, so
/// most deletions are still queued); the link drops; the addresses are named again behind its
/// back; the link heals. Nothing more may be deleted: a queued deletion is no decision, and the
/// record it was decided on is gone. It says it is cut off on /readyz, and is ready again soon
/// after the link heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruner_cut_off_mid_withdrawal_deletes_nothing_named_again() {
    if !runs_as_root("a network namespace") {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::own();
    let client = cp.client().await;
    let render = tuned("faults-cut", &["--max-deletes-per-second=1", "--grace=0s"]);
    render.apply_but_admission(&cp);
    for ns in ["cut", "bystander"] {
        namespace(&client, ns, &[]).await;
    }
    let addresses: Vec<String> = (0..20).map(|i| format!("fd20:a::{:x}", i + 1)).collect();
    let all: Vec<&str> = addresses.iter().map(String::as_str).collect();
    set_record(&client, "cut", &all).await;
    for (i, address) in all.iter().enumerate() {
        create(&client, "cut", &slice("netns", &format!("web-{i:02}"), true, &[address]), false).await.expect("create");
        create(&client, "bystander", &slice("netns", &format!("web-{i:02}"), true, &[address]), false)
            .await
            .expect("create");
    }

    let netns = NetNs::create();
    let pod = run_in(&cp, &render, "edgegate-pruner", 0, &[], &netns).await;
    let admin = pod.port("admin");
    let readyz = format!("http://127.0.0.1:{admin}/readyz");
    let ready = async |want: u16| netns.http_status(&readyz) == want;
    eventually(Duration::from_secs(60), "pruner ready in its network", async || ready(200).await).await;
    let deleted = || {
        counter(
            &netns.curl(&[&format!("http://127.0.0.1:{admin}/metrics")]),
            "edgegate_prune_deletions_total{result=\"deleted\"}",
        )
    };
    let count = async |ns: &str| copies_in(&client, ns).await;

    // The withdrawal under way: two deleted, eighteen queued at one a second.
    set_record(&client, "cut", &[]).await;
    eventually(Duration::from_secs(60), "the paced withdrawal under way", async || count("cut").await <= 18).await;
    netns.link(false);
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await; // a DELETE already on the wire lands or not
    let at_cut = count("cut").await;
    set_record(&client, "cut", &all).await;
    let noticed = eventually(Duration::from_secs(60), "readiness reflects the cut", async || ready(503).await).await;
    // Long enough for every queued deletion to have come due (18 at 1/s) while cut off.
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(cut.elapsed())).await;
    assert_eq!(count("cut").await, at_cut, "nothing deleted while cut off");

    let down = cut.elapsed();
    netns.link(true);
    let healed = Instant::now();
    let ready_again = eventually(Duration::from_secs(60), "ready again", async || ready(200).await).await;
    // What would act has had its chance: ready, so its caches are whole again, and then as long
    // again as the rest of the queue (18 s at 1/s) would take.
    tokio::time::sleep(Duration::from_secs(18)).await;
    let left = count("cut").await;
    eprintln!(
        "cut off {down:?} with {at_cut} of 20 copies left and the rest queued: not ready {noticed:?} after the cut; \
         ready again {ready_again:?} after the link healed; {left} left {:?} after the heal ({} deletions counted)",
        healed.elapsed(),
        deleted()
    );
    assert_eq!(
        left,
        at_cut,
        "a copy named again while the pruner was cut off was deleted after the heal\n{}",
        pod.log()
    );
    assert_eq!(count("bystander").await, 20, "no copy outside the namespace is deleted");
    cp.assert_nothing_refused();
}
