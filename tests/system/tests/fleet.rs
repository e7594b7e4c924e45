//! The producer at fleet scale, as installed with components/producer and components/producer-milo
//! (the rendered Deployment run by the pod runner), against the Milo stand-in: one real
//! kube-apiserver serving every project by path over TLS. `FLEET_PROJECTS` projects (default
//! 1,000), each one namespace, one in five serving one address through a proxy, a service and an
//! interface (the others idle: a namespace and nothing else). Measured: the producer's RSS and
//! open sockets as projects are engaged in steps (so the cost per project is a slope), the
//! requests per project per second Milo serves at rest, and how long a cold start takes to engage
//! every project and write every record. `scripts/fleet.sh` runs it with release binaries.

use std::time::Instant;

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::milo::{Milo, world};
use edgegate_system_tests::pod::{Rewrite, RunningPod, run};
use edgegate_system_tests::shipped;
use futures::StreamExt;

/// Project `p{i}`: its Project (not Ready yet), its namespace and, one in five, what serves an
/// address; its hub namespace labelled for it.
async fn make_project(backing: &Client, hub: &Client, i: usize) {
    let name = format!("p{i:05}");
    world::project(backing, &name, None).await;
    let address = i.is_multiple_of(5).then(|| format!("fd20:{:x}::1", i + 1));
    world::project_namespace(backing, hub, &name, &format!("{name}-web"), address.as_deref()).await;
}

/// Projects `range` turned Ready (`True`) or not (`False`: Milo's control plane for them not
/// serving).
async fn set_ready(backing: &Client, range: std::ops::Range<usize>, ready: &str) {
    futures::stream::iter(range)
        .for_each_concurrent(16, |i| async move { world::project(backing, &format!("p{i:05}"), Some(ready)).await })
        .await;
}

fn gauge(scrape: &str, name: &str) -> u64 {
    scrape.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok()).unwrap_or(0.0) as u64
}

fn sockets(pod: &RunningPod) -> usize {
    let pid = pid_of(&pod.process);
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .count()
        })
        .unwrap_or(0)
}

/// Until `n` projects are engaged and whole; how long it took.
async fn all_whole(pod: &RunningPod, n: u64, within: Duration) -> Duration {
    let started = Instant::now();
    eventually(within, &format!("{n} projects whole"), async || {
        gauge(&metrics(&pod.process), "edgegate_producer_projects{state=\"synced\"} ") == n
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes: scripts/fleet.sh"]
async fn fleet() {
    let total: usize = std::env::var("FLEET_PROJECTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let steps: Vec<usize> = [total / 10, total * 3 / 10, total].into_iter().filter(|s| *s > 0).collect();
    let hub_cp = ControlPlane::own();
    let backing_cp = ControlPlane::own();
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    install_crd(&hub).await;
    world::install_crds(&backing_cp);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let milo = Milo::start(&backing_cp).await;
    let render = shipped::install_with_milo("fleet", &hub_cp, &backing_cp, &milo).await;

    let made = Instant::now();
    futures::stream::iter(0..total)
        .for_each_concurrent(16, |i| {
            let (backing, hub) = (backing.clone(), hub.clone());
            async move { make_project(&backing, &hub, i).await }
        })
        .await;
    eprintln!("fleet: {total} projects made in {:?}", made.elapsed());

    let pod = run(&hub_cp, &render, "edgegate-producer", 0, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    until_ready("producer ready", &pod.process, None).await;
    let mut engaged = 0;
    let mut samples = Vec::new();
    for step in &steps {
        let started = Instant::now();
        set_ready(&backing, engaged..*step, "True").await;
        let took = all_whole(&pod, *step as u64, Duration::from_secs(600)).await;
        let whole_after = started.elapsed();
        engaged = *step;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (rss, socks) = (rss_mib(&pod.process), sockets(&pod));
        eprintln!(
            "fleet: {step} projects whole {whole_after:?} after they began turning Ready ({took:?} after the last): RSS {rss} MiB, {socks} sockets"
        );
        samples.push((*step, rss, socks));
    }
    // At rest: what Milo serves per project per second, nothing changing.
    let before: u64 = milo.requests().values().sum();
    let rest = Duration::from_secs(60);
    tokio::time::sleep(rest).await;
    let requests = milo.requests().values().sum::<u64>() - before;
    let per_project = requests as f64 / rest.as_secs_f64() / total as f64;
    eprintln!("fleet: at rest, {requests} requests in {rest:?}: {per_project:.4} per project per second");
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let slope_kib = (last.1.saturating_sub(first.1) * 1024) as f64 / (last.0 - first.0).max(1) as f64;
        let sockets_per = (last.2.saturating_sub(first.2)) as f64 / (last.0 - first.0).max(1) as f64;
        eprintln!("fleet: per project ({} → {}): {slope_kib:.0} KiB of RSS, {sockets_per:.2} sockets", first.0, last.0);
    }

    let scrape = metrics(&pod.process);
    let series = scrape.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).count();
    eprintln!("fleet: metric series at {total} projects: {series}");

    // Engaged and let go again and again: half the projects not Ready, then Ready, ten times; the
    // memory after the tenth against after the first.
    let half = total / 2;
    let mut after = Vec::new();
    for cycle in 1..=10 {
        set_ready(&backing, 0..half, "False").await;
        all_whole(&pod, (total - half) as u64, Duration::from_secs(600)).await;
        set_ready(&backing, 0..half, "True").await;
        all_whole(&pod, total as u64, Duration::from_secs(600)).await;
        if cycle == 1 || cycle == 10 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            after.push(rss_mib(&pod.process));
        }
    }
    eprintln!(
        "fleet: {half} projects let go and engaged again ×10: RSS after the 1st {} MiB, after the 10th {} MiB",
        after[0], after[1]
    );

    // Cold: a new Pod engaging every project at once.
    drop(pod);
    let started = Instant::now();
    let pod = run(&hub_cp, &render, "edgegate-producer", 1, &[Rewrite::ListenAddress, Rewrite::MountPath]).await;
    let took = all_whole(&pod, total as u64, Duration::from_secs(900)).await;
    eprintln!("fleet: cold start, {total} projects whole after {:?} ({took:?} after the Pod ran)", started.elapsed());
    let requests = milo.requests().values().sum::<u64>();
    eprintln!("fleet: Milo served {requests} requests in all");
}
