//! Faults on the real control plane during a mass withdrawal: the namespace's record is emptied
//! over 2,000 copies, deletions paced, and kube-apiserver (then etcd) is stopped and started again
//! in the middle. No copy outside that namespace may go, none may be deleted twice, and the
//! withdrawal must resume on its own and finish soon after the API server is back.

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::netns::{NetNs, kubeconfig_through_link};
use futures::StreamExt;

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
    install_crd(&client).await;
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

    let pruner = start_pruner(
        &cp,
        "faults",
        &cp.kubeconfig,
        &["--no-leader-election", "--max-deletes-per-second=400", "--resync=60s"],
    );
    eventually(Duration::from_secs(60), "pruner ready", async || {
        http_status(&format!("http://127.0.0.1:{}/readyz", pruner.port), None) == 200
    })
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
    {
        let cp = &cp;
        tokio::task::block_in_place(|| cp.restart(fault, Duration::from_secs(2)));
    }
    let back = std::time::Instant::now();
    let left_at_back = count("withdrawn").await;
    let (resumed, _) = wait_count("deleting again", &|n| n < left_at_back).await;
    let (took, _) = wait_count("withdrawal complete", &|n| n == 0).await;
    let text = metrics(&pruner);
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_withdrawal_survives_an_api_server_restart() {
    withdrawal_survives("kube-apiserver").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mass_withdrawal_survives_an_etcd_restart() {
    withdrawal_survives("etcd").await;
}

/// The pruner in a network namespace whose only way to the API server is one veth link, and the
/// link dropped: it deletes nothing while cut off (not even once the record is emptied behind its
/// back), says so on /readyz, and resumes on its own soon after the link heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruner_cut_off_from_the_api_server() {
    if !runs_as_root("a network namespace") {
        return;
    }
    let _serial = ONE_AT_A_TIME.lock().await;
    let cp = ControlPlane::own();
    let client = cp.client().await;
    install_crd(&client).await;
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
    let kubeconfig = kubeconfig_through_link(&cp, "netns.kubeconfig").await;

    let port = free_port();
    let log = cp.dir.join("pruner-netns.log");
    let pruner_args = [
        "netns".to_owned(),
        "exec".to_owned(),
        netns.name.clone(),
        binary("edgegate-pruner").display().to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--listen=127.0.0.1:{port}"),
        format!("--copy-selector={COPY_LABEL}=true,edgegate-e2e=netns"),
        "--no-leader-election".to_owned(),
        "--resync=60s".to_owned(),
        "--grace=0".to_owned(),
    ];
    let pruner = Process { child: spawn_guarded(Path::new("ip"), &pruner_args, &log), port, log };
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let ready = async |want: u16| netns.http_status(&readyz) == want;
    eventually(Duration::from_secs(60), "pruner ready in the namespace", async || ready(200).await).await;
    let count = async |ns: &str| copies_in(&client, ns).await;

    netns.link(false);
    let cut = Instant::now();
    // Emptied while the pruner cannot see it: it must not act on what it last saw, nor on this.
    set_record(&client, "cut", &[]).await;
    let noticed = eventually(Duration::from_secs(40), "readiness reflects the cut", async || ready(503).await).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count("cut").await, 20, "nothing deleted while cut off");
    let deleted_while_cut = counter(
        &netns.curl(&[&format!("http://127.0.0.1:{port}/metrics")]),
        "edgegate_prune_deletions_total{result=\"deleted\"}",
    );
    assert_eq!(deleted_while_cut, 0, "no deletion counted while cut off");

    let down = cut.elapsed();
    netns.link(true);
    let healed = Instant::now();
    let resumed =
        eventually(Duration::from_secs(60), "deleting again after the link heals", async || count("cut").await < 20)
            .await;
    eventually(Duration::from_secs(30), "withdrawal complete", async || count("cut").await == 0).await;
    let done = healed.elapsed();
    let ready_again = eventually(Duration::from_secs(30), "ready again", async || ready(200).await).await;
    eprintln!(
        "cut off {down:?}: not ready {noticed:?} after the cut; after the link healed, deleting again after {resumed:?}, \
         all 20 gone after {done:?}; ready again {ready_again:?} after that"
    );
    assert_eq!(count("bystander").await, 20, "no copy outside the namespace is deleted");
    assert!(resumed <= Duration::from_secs(5), "resumed {resumed:?} after the link healed\n{}", pruner.log());
}
