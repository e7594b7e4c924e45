//! edgegate-producer's replicas sharing the projects, as installed with components/producer,
//! components/producer-milo and components/producer-sharded, against the Milo stand-in: each
//! replica started from the render under its own Pod-bound ServiceAccount token, the only
//! coordination the hub's Leases (docs/sharding.md).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use edgegate::core::shard::{self, BUCKETS, Bucket};
use edgegate_system_tests::helpers::*;
use edgegate_system_tests::milo::{Milo, world};
use edgegate_system_tests::pod::{Render, Rewrite, RunningPod, run};
use edgegate_system_tests::shipped;
use edgegate_system_tests::{fence_audit, fences};
use k8s_openapi::api::coordination::v1::Lease;

const PROJECTS: usize = 12;
const FLAGS: [&str; 2] = ["--withdraw-after=2s", "--grace=2s"];

/// A hub (audited: the auditor orders every record write against the fences) and the Milo
/// stand-in with [`PROJECTS`] Ready projects, one namespace each serving one address.
struct Fleet {
    hub_cp: ControlPlane,
    backing_cp: ControlPlane,
    hub: Client,
    backing: Client,
    milo: Milo,
    /// Each project, its hub namespace and its address.
    namespaces: Vec<(String, String, String)>,
}

async fn fleet() -> Fleet {
    let hub_cp = ControlPlane::own_audited();
    let backing_cp = ControlPlane::own();
    let (hub, backing) = (hub_cp.client().await, backing_cp.client().await);
    let milo = Milo::serving(&hub, &backing_cp, &backing).await;
    let mut namespaces = Vec::new();
    for i in 0..PROJECTS {
        let p = format!("p{i:02}");
        world::project(&backing, &p, Some("True")).await;
        let address = format!("fd20:0:{i:x}::1");
        let ns = world::project_namespace(&backing, &hub, &p, &format!("{p}-web"), Some(&address)).await;
        namespaces.push((p, ns, address));
    }
    Fleet { hub_cp, backing_cp, hub, backing, milo, namespaces }
}

/// Each bucket's holders in turn, from `before`, looked at every 200 ms until the fences are as
/// ranked over `pods` (within 120 s of `since`); and how long that took.
async fn follow_moves(
    hub: &Client,
    before: &BTreeMap<Bucket, Option<String>>,
    pods: &[&RunningPod],
    since: Instant,
) -> (BTreeMap<Bucket, Vec<(Option<String>, Instant)>>, Duration) {
    let mut history: BTreeMap<Bucket, Vec<(Option<String>, Instant)>> =
        before.iter().map(|(b, h)| (*b, vec![(h.clone(), since)])).collect();
    loop {
        let now = fences::holders(hub).await;
        for (b, holder) in &now {
            let seen = history.get_mut(b).expect("every bucket");
            if seen.last().is_some_and(|(h, _)| h != holder) {
                seen.push((holder.clone(), Instant::now()));
            }
        }
        if fences::as_ranked(&now, &names(pods)) {
            return (history, since.elapsed());
        }
        assert!(since.elapsed() < Duration::from_secs(120), "the buckets not as ranked within 120 s: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Of `history`: how many buckets moved (each one's holders in turn as `allowed` says), and the
/// longest any went unheld.
fn moves(
    history: &BTreeMap<Bucket, Vec<(Option<String>, Instant)>>,
    allowed: impl Fn(&[Option<&str>]) -> bool,
) -> (u32, Duration) {
    let (mut moved, mut longest_unheld) = (0, Duration::ZERO);
    for (b, seen) in history {
        let holders: Vec<Option<&str>> = seen.iter().map(|(h, _)| h.as_deref()).collect();
        if holders.len() == 1 {
            continue;
        }
        moved += 1;
        assert!(allowed(&holders), "bucket {b} moved otherwise than it may: {holders:?}");
        for pair in seen.windows(2) {
            if pair[0].0.is_none() {
                longest_unheld = longest_unheld.max(pair[1].1 - pair[0].1);
            }
        }
    }
    (moved, longest_unheld)
}

/// The line a stopping replica logs when its handover has ended (within 30 s).
async fn handover_line(pod: &RunningPod) -> String {
    let line = || pod.log().lines().find(|l| l.contains("handover ended")).map(str::to_owned);
    eventually(Duration::from_secs(30), "the handover's end logged", async || line().is_some()).await;
    line().unwrap_or_default()
}

/// Each bucket's fence Lease's resourceVersion now: what changes when it is taken.
async fn fence_versions(hub: &Client) -> BTreeMap<Bucket, String> {
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "edgegate-system");
    let listed = leases.list(&Default::default()).await.expect("list leases");
    listed
        .into_iter()
        .filter_map(|l| {
            let b = l.metadata.name.as_deref()?.strip_prefix("edgegate-producer-bucket-")?.parse().ok()?;
            Some((b, l.metadata.resource_version?))
        })
        .collect()
}

/// Which process last wrote the member Lease of the replica named `name`.
async fn member_instance(hub: &Client, name: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "edgegate-system");
    let lease = leases.get_opt(&format!("edgegate-producer-member-{name}")).await.expect("get lease")?;
    lease.metadata.annotations?.get(edgegate::runtime::lease::INSTANCE_ANNOTATION).cloned()
}

/// A replica that stopped answering (paused, cut off) at `since`, and a project of its.
struct Away<'a> {
    what: &'static str,
    since: Instant,
    /// The replicas left.
    others: &'a [&'a RunningPod],
    project: &'a str,
}

/// Every bucket of a replica `away` taken over by the `others` within its member Lease's 16 s
/// and a look, and a namespace added to its project meanwhile (`<project>-<suffix>`, serving
/// `address`) written by the project's new owner. Returns that namespace.
async fn taken_over(hub: &Client, backing: &Client, away: Away<'_>, suffix: &str, address: &str) -> String {
    let what = format!("{}'s buckets taken over", away.what);
    eventually(Duration::from_secs(60), &what, async || {
        fences::as_ranked(&fences::holders(hub).await, &names(away.others))
    })
    .await;
    let took = away.since.elapsed();
    eprintln!("sharding: {what} in {took:?} (bound 20 s + a look)");
    assert!(took <= Duration::from_secs(22), "taken over in {took:?}");
    let p = away.project;
    let ns = world::project_namespace(backing, hub, p, &format!("{p}-{suffix}"), Some(address)).await;
    eventually(Duration::from_secs(30), "a change to its project meanwhile written", async || {
        record(hub, &ns).await == Some(vec![address.to_owned()])
    })
    .await;
    ns
}

/// Until every bucket is held as ranked over `pods` (within 90 s).
async fn until_ranked(hub: &Client, pods: &[&RunningPod]) {
    let what = format!("every bucket held as ranked over {} replicas", pods.len());
    eventually(Duration::from_secs(90), &what, async || fences::as_ranked(&fences::holders(hub).await, &names(pods)))
        .await;
}

/// A project whose bucket `pod` holds now (12 projects over three replicas: there is one).
async fn a_project_of(hub: &Client, namespaces: &[(String, String, String)], pod: &RunningPod) -> String {
    let fenced = fences::holders(hub).await;
    let holds = |p: &str| fenced.get(&shard::bucket(p)).is_some_and(|h| h.as_deref() == Some(pod.name.as_str()));
    namespaces.iter().map(|(p, _, _)| p).find(|p| holds(p)).cloned().expect("a project of the replica")
}

/// deploy/ with components/producer-sharded, the test's shorter timings.
async fn sharded(name: &str, hub_cp: &ControlPlane, backing_cp: &ControlPlane, milo: &Milo) -> Render {
    shipped::install_with_milo_and(name, hub_cp, backing_cp, milo, &["components/producer-sharded"], &FLAGS).await
}

/// The auditor over the hub's audit log: at least `writes` record writes and `deletes` copy
/// DELETEs (their revisions from `deleted`), none outside its writer's fence. `added`: hub
/// namespaces made since, with their projects.
fn audited(
    hub_cp: &ControlPlane,
    namespaces: &[(String, String, String)],
    added: &[(String, String)],
    (deleted, deletes): (&fence_audit::Deletions, usize),
    writes: usize,
) {
    let mut project_of: BTreeMap<String, String> =
        namespaces.iter().map(|(p, ns, _)| (ns.clone(), p.clone())).collect();
    project_of.extend(added.iter().cloned());
    let log = std::fs::read_to_string(hub_cp.dir.join("audit.log")).expect("the hub's audit log");
    let audit = fence_audit::audit(&log, &project_of, deleted);
    eprintln!(
        "sharding: auditor: {} record writes and {} copy DELETEs against {} fence changes, {} outside the writer's fence",
        audit.writes,
        audit.deletes,
        audit.fence_changes,
        audit.overlaps.len()
    );
    // docs/sharding.md's Lease writes: a renewal every 4 s (a quarter of the duration) for each
    // member, and a write more per member while buckets move.
    let rate = audit.busiest_member;
    eprintln!(
        "sharding: member Lease renewals: {} by {} members, the busiest {rate:.3}/s over its own life; {} writes \
         changing a member's ready buckets or leaving",
        audit.member_writes, audit.members, audit.member_changes
    );
    assert!(rate <= 0.4, "a member renewed its Lease {rate:.3} times a second, over 0.4 (every 4 s: 0.25)");
    assert!(audit.writes >= writes, "the auditor saw {} record writes", audit.writes);
    assert!(audit.deletes >= deletes, "the auditor saw {} copy DELETEs", audit.deletes);
    assert!(audit.overlaps.is_empty(), "record writes outside their writer's fence: {:#?}", audit.overlaps);
}

/// The Pods' names, as the members are named.
fn names<'a>(pods: &[&'a RunningPod]) -> Vec<&'a str> {
    pods.iter().map(|p| p.name.as_str()).collect()
}

async fn replica(hub_cp: &ControlPlane, render: &Render, i: usize) -> RunningPod {
    run(hub_cp, render, "edgegate-producer", i, &[Rewrite::ListenAddress, Rewrite::MountPath]).await
}

/// A rollout from one writer: the shared replicas take nothing while it leads, and every bucket
/// once it has stopped (one of them with its wall clock 10 minutes ahead throughout). Three replicas share the 256 buckets as rendezvous hashing ranks them; a
/// fourth takes about a quarter, every bucket that moves going to it and none between the
/// others, each unheld only briefly; one of the first three stopped (SIGTERM) hands its buckets
/// over warm before it exits; killed (SIGKILL), the fourth's buckets are taken back within the
/// member Lease's duration and a look, and a project that moved is written by its new owner; a
/// rolling restart of the rest hands every bucket over warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_buckets_and_take_over_a_killed_one() {
    let Fleet { hub_cp, backing_cp, hub, backing, milo, namespaces } = fleet().await;
    // First installed without sharing: one replica writes for every project.
    let single = shipped::install_with_milo("sharding-single", &hub_cp, &backing_cp, &milo, &FLAGS).await;

    let solo = replica(&hub_cp, &single, 9).await;
    let written = async || {
        for (_, ns, address) in &namespaces {
            if record(&hub, ns).await != Some(vec![address.clone()]) {
                return false;
            }
        }
        true
    };
    eventually(Duration::from_secs(60), "every project's record written by the one writer", written).await;

    // The rollout to shared replicas: while the one writer holds the producer's Lease, they
    // take no bucket; once it has stopped (and let the Lease go), they take them all.
    let render = sharded("sharding", &hub_cp, &backing_cp, &milo).await;
    let started = Instant::now();
    let mut pods = Vec::new();
    for i in 0..2 {
        pods.push(replica(&hub_cp, &render, i).await);
    }
    // One replica's wall clock 10 minutes ahead (its node's clock wrong): nothing here compares
    // wall clocks, so nothing changes (the Leases' times it writes are 10 minutes off).
    let both = [Rewrite::ListenAddress, Rewrite::MountPath, Rewrite::WallClock(600)];
    pods.push(run(&hub_cp, &render, "edgegate-producer", 2, &both).await);
    // The state that would take buckets: each replica a member, renewing, for longer than the
    // 5 s they settle before taking anything (by its own clock: its Lease's acquire and renew
    // times); then a few looks more.
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "edgegate-system");
    eventually(Duration::from_secs(60), "the three replicas members past their settle", async || {
        for pod in &pods {
            let Ok(Some(lease)) = leases.get_opt(&format!("edgegate-producer-member-{}", pod.name)).await else {
                return false;
            };
            let spec = lease.spec.unwrap_or_default();
            let (Some(acquired), Some(renewed)) = (spec.acquire_time, spec.renew_time) else { return false };
            if renewed.0.as_second() - acquired.0.as_second() < 6 {
                return false;
            }
        }
        true
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let taken = fences::holders(&hub).await.values().filter(|h| h.is_some()).count();
    assert_eq!(taken, 0, "shared replicas took {taken} buckets while the one writer led");
    let handed = Instant::now();
    drop(solo);
    let three: Vec<&RunningPod> = pods.iter().collect();
    until_ranked(&hub, &three).await;
    // The replica whose clock is ahead writes its Lease's times 10 minutes ahead: it does run so.
    let ahead = leases.get(&format!("edgegate-producer-member-{}", pods[2].name)).await.expect("its member Lease");
    let renewed = ahead.spec.and_then(|s| s.renew_time).expect("renewTime").0;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let offset = renewed.as_second() - i64::try_from(now).expect("seconds");
    eprintln!("sharding: the replica with its wall clock ahead wrote a renewTime {offset} s ahead");
    assert!((560..=640).contains(&offset), "renewTime {offset} s off, not about 600");
    let before = fences::holders(&hub).await;
    eprintln!(
        "sharding: the one writer stopped → three replicas hold every bucket {:?} later ({:?} after the first started); each holds {:?} of {BUCKETS}",
        handed.elapsed(),
        started.elapsed(),
        three.iter().map(|p| fences::held_by(&before, &p.name)).collect::<Vec<_>>()
    );
    eventually(Duration::from_secs(60), "every project's record as it was", written).await;

    // A fourth replica: every bucket that moves goes to it, and only those rendezvous hashing
    // gives it.
    let joined = Instant::now();
    pods.push(replica(&hub_cp, &render, 3).await);
    let four: Vec<&RunningPod> = pods.iter().collect();
    let newcomer = pods[3].name.clone();
    let (history, settled) = follow_moves(&hub, &before, &four, joined).await;
    let (moved, longest_unheld) = moves(&history, |holders| {
        holders.last() == Some(&Some(newcomer.as_str()))
            && holders[1..].iter().all(|h| h.is_none() || *h == Some(newcomer.as_str()))
    });
    let expected = (0..BUCKETS).filter(|b| {
        let names: Vec<&str> = four.iter().map(|p| p.name.as_str()).collect();
        shard::rank(*b, names).first() == Some(&newcomer.as_str())
    });
    eprintln!(
        "sharding: 3 → 4 replicas: {moved} of {BUCKETS} buckets moved ({:.0} %), all to the new one, in {settled:?}; \
         longest a moving bucket went unheld: {longest_unheld:?} (bound 5 s)",
        f64::from(moved) * 100.0 / f64::from(BUCKETS)
    );
    assert_eq!(moved as usize, expected.count(), "the buckets rendezvous hashing gives the new replica, and no others");
    assert!(longest_unheld <= Duration::from_secs(5), "a moving bucket unheld for {longest_unheld:?}");

    // A copy nobody serves in each project: each deleted by its project's owner, whichever that
    // is while the buckets move below (the auditor checks each DELETE against the fences).
    let deleted = fences::watch_deletions(&hub);
    tokio::time::sleep(Duration::from_secs(1)).await; // the watch listed
    for (i, (_, ns, _)) in namespaces.iter().enumerate() {
        let address = format!("fd20:dead::{:x}", i + 1);
        create(&hub, ns, &slice("sharding", "unserved", true, &[&address]), false).await.expect("an unserved copy");
    }

    // Scaled in (4 → 3): the StatefulSet stops its last Pod (SIGTERM), which hands its buckets to
    // their owners, each once that one has listed its projects, and exits.
    let leaving = pods.pop().expect("the fourth");
    let leaver = leaving.name.clone();
    let before = fences::holders(&hub).await;
    let held = fences::held_by(&before, &leaving.name);
    let stopping = Instant::now();
    let pid = leaving.pid();
    signal(pid, "TERM");
    let remaining: Vec<&RunningPod> = pods.iter().collect();
    let (history, settled) = follow_moves(&hub, &before, &remaining, stopping).await;
    until_exited(pid, Duration::from_secs(30)).await;
    let gone = stopping.elapsed();
    let (moved, longest_unheld) = moves(&history, |holders| {
        holders[0] == Some(leaver.as_str()) && holders[1..].iter().all(|h| *h != Some(leaver.as_str()))
    });
    let handover = handover_line(&leaving).await;
    eprintln!(
        "sharding: 4 → 3 by SIGTERM: {moved} buckets (of {held} it held) handed over in {settled:?}, the process gone \
         {:?} after the signal; longest a bucket went unheld: {longest_unheld:?} (bound 5 s); its log: {handover}",
        gone
    );
    assert_eq!(moved as usize, held, "every bucket it held handed over");
    assert!(longest_unheld <= Duration::from_secs(5), "a bucket unheld for {longest_unheld:?}");
    assert!(handover.contains("\"cold\":0"), "some buckets went over cold: {handover}");
    drop(leaving);

    // Killed (SIGKILL), and its Pod made again at once under the same name (as its kubelet
    // restarts the container, or the StatefulSet the Pod): the new process does not renew its
    // predecessor's member Lease, so the others take its buckets once that Lease has gone
    // unrenewed for its duration, and it takes them back after.
    let killed = pods.remove(1);
    let (name, fenced) = (killed.name.clone(), fences::holders(&hub).await);
    let versions = fence_versions(&hub).await;
    let its: Vec<Bucket> =
        fenced.iter().filter(|(_, h)| h.as_deref() == Some(name.as_str())).map(|(b, _)| *b).collect();
    let instance = member_instance(&hub, &name).await;
    let pid = killed.pid();
    signal(pid, "KILL");
    let kill = Instant::now();
    until_exited(pid, Duration::from_secs(30)).await;
    drop(killed);
    pods.insert(1, replica(&hub_cp, &render, 1).await);
    let (mut taken, mut renewed) = (None, None);
    let mut by_others: BTreeSet<Bucket> = BTreeSet::new();
    eventually(Duration::from_secs(90), "the killed replica's buckets taken over", async || {
        if renewed.is_none() && member_instance(&hub, &name).await != instance {
            renewed = Some(kill.elapsed());
        }
        let (now, holders) = (fence_versions(&hub).await, fences::holders(&hub).await);
        // Taken by another replica: its successor of the same name waits out the old member
        // Lease two looks longer than the others, who take its buckets first.
        by_others
            .extend(its.iter().filter(|b| holders.get(b).is_some_and(|h| h.is_some() && *h != Some(name.clone()))));
        if taken.is_none() && its.iter().all(|b| now.get(b) != versions.get(b)) {
            taken = Some(kill.elapsed());
        }
        taken.is_some() && renewed.is_some()
    })
    .await;
    let (taken, renewed) = (taken.unwrap_or_default(), renewed.unwrap_or_default());
    let three: Vec<&RunningPod> = pods.iter().collect();
    until_ranked(&hub, &three).await;
    let back = kill.elapsed();
    eprintln!(
        "sharding: SIGKILL of a replica holding {} buckets, its Pod made again at once: all taken over in {taken:?} \
         (bound 20 s + a look); its member Lease written by the new process {renewed:?} after the kill (not before \
         the old one's 16 s, less a renewal); every bucket back as ranked over three {back:?} after",
        its.len()
    );
    assert!(taken <= Duration::from_secs(22), "taken over in {taken:?}");
    assert!(renewed >= Duration::from_secs(12), "the new process renewed its predecessor's Lease after {renewed:?}");
    assert_eq!(by_others.len(), its.len(), "each of its buckets was taken over by another replica first");

    // A project whose bucket moved twice is written by its owner now.
    let (p, _, _) = namespaces
        .iter()
        .find(|(p, _, _)| {
            before.get(&shard::bucket(p)).is_some_and(|h| h.as_deref() != Some(newcomer.as_str()))
                && history.get(&shard::bucket(p)).is_some_and(|h| h.len() > 1)
        })
        .or_else(|| namespaces.first())
        .cloned()
        .expect("a project");
    let added = Instant::now();
    let ns = world::project_namespace(&backing, &hub, &p, &format!("{p}-added"), Some("fd20:0:ad::1")).await;
    eventually(Duration::from_secs(30), "the added namespace's record", async || {
        record(&hub, &ns).await == Some(vec!["fd20:0:ad::1".to_owned()])
    })
    .await;
    eprintln!("sharding: a namespace added to {p} after the moves written in {:?}", added.elapsed());

    // A rolling restart, as a StatefulSet rolls its Pods: the last first, each stopped (SIGTERM,
    // its buckets handed over) and made again under its name (taking them back), the next one
    // stopped once it is Ready and has stayed so for the render's minReadySeconds.
    let min_ready = render.workload("edgegate-producer")["spec"]["minReadySeconds"].as_u64().expect("minReadySeconds");
    let rolling = Instant::now();
    let mut longest_unheld = Duration::ZERO;
    for k in (0..pods.len()).rev() {
        let old = pods.remove(k);
        let pid = old.pid();
        signal(pid, "TERM");
        let others: Vec<&RunningPod> = pods.iter().collect();
        let (history, _) = follow_moves(&hub, &fences::holders(&hub).await, &others, Instant::now()).await;
        let (_, unheld) = moves(&history, |holders| holders[1..].iter().all(|h| *h != Some(old.name.as_str())));
        longest_unheld = longest_unheld.max(unheld);
        let handover = handover_line(&old).await;
        assert!(handover.contains("\"cold\":0"), "some buckets went over cold in the rollout: {handover}");
        until_exited(pid, Duration::from_secs(30)).await;
        drop(old);
        pods.insert(k, replica(&hub_cp, &render, k).await);
        until_ready("the replica made again", &pods[k].process, None).await;
        let ready = Instant::now();
        let again: Vec<&RunningPod> = pods.iter().collect();
        let (history, _) = follow_moves(&hub, &fences::holders(&hub).await, &again, Instant::now()).await;
        longest_unheld = longest_unheld.max(moves(&history, |_| true).1);
        // What minReadySeconds is for: its buckets back before the next Pod is stopped.
        let back = ready.elapsed();
        assert!(back <= Duration::from_secs(min_ready), "its buckets back {back:?} after Ready");
        tokio::time::sleep(Duration::from_secs(min_ready).saturating_sub(back)).await;
    }
    let after = fences::holders(&hub).await;
    eprintln!(
        "sharding: rolling restart of {} replicas in {:?}; longest a bucket went unheld: {longest_unheld:?} (bound 5 s); \
         each holds {:?} of {BUCKETS}, as before it",
        pods.len(),
        rolling.elapsed(),
        pods.iter().map(|p| fences::held_by(&after, &p.name)).collect::<Vec<_>>()
    );
    assert!(longest_unheld <= Duration::from_secs(5), "a bucket unheld for {longest_unheld:?} in the rollout");
    hub_cp.assert_nothing_refused();

    let collected = eventually(Duration::from_secs(120), "every unserved copy deleted", async || {
        deleted.lock().expect("deletions").len() >= PROJECTS
    })
    .await;
    eprintln!("sharding: all {PROJECTS} unserved copies deleted ({collected:?} more after the rollout)");
    let deleted = deleted.lock().expect("deletions").clone();
    audited(&hub_cp, &namespaces, &[(ns, p)], (&deleted, PROJECTS), PROJECTS + 1);

    // Every replica stopped at once (the emergency off, the StatefulSet deleted): none has anyone
    // to hand its buckets to, so each exits at once, and none deletes a copy after its signal (an
    // unserved copy made as they stop, due 4 s later, is kept).
    let (_, last_ns, _) = namespaces.last().expect("a project");
    create(&hub, last_ns, &slice("sharding", "unserved-at-the-end", true, &["fd20:dead::ff"]), false)
        .await
        .expect("an unserved copy");
    let pids: Vec<u32> = pods.iter().map(RunningPod::pid).collect();
    let stopping = Instant::now();
    for pid in &pids {
        signal(*pid, "TERM");
    }
    for pid in &pids {
        until_exited(*pid, Duration::from_secs(30)).await;
    }
    let stopped = stopping.elapsed();
    let handovers: Vec<String> =
        pods.iter().map(|p| p.log().lines().filter(|l| l.contains("handover ended")).collect()).collect();
    eprintln!(
        "sharding: every replica stopped at once: all exited {stopped:?} after the signals (bound 5 s); {handovers:?}"
    );
    // Past when it would have been deleted (withdraw-after + grace, and a pass).
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(stopping.elapsed())).await;
    let copies: Api<EndpointSlice> = Api::namespaced(hub.clone(), last_ns);
    assert!(copies.get_opt("unserved-at-the-end").await.expect("get").is_some(), "a copy deleted after the signal");
    assert!(stopped <= Duration::from_secs(5), "the replicas took {stopped:?} to stop");
    // It was a copy to delete: a replica started again deletes it, so its staying above was the
    // stop's doing.
    drop(pods);
    let back = replica(&hub_cp, &render, 0).await;
    let took = eventually(Duration::from_secs(60), "the copy deleted by a replica started again", async || {
        copies.get_opt("unserved-at-the-end").await.expect("get").is_none()
    })
    .await;
    eprintln!("sharding: a replica started again deleted the copy kept through the stop {took:?} after its start");
    drop(back);
}

/// A replica paused (SIGSTOP) for 40 s: the others take its buckets once its member Lease has
/// gone unrenewed for its duration, and write what changed meanwhile; woken (SIGCONT), it writes
/// nothing before it has renewed and taken its fences again (the auditor: no record write
/// outside its writer's fence), and gets its buckets back as ranked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_writes_nothing_before_it_takes_its_fences_again() {
    paused(false).await;
}

/// The auditor can fail on real replicas: the same pause with the fence broken on purpose (each
/// replica watches and writes for every bucket it ever took, ignoring its deadline, its fences
/// and the record's resourceVersion), and a change once the paused one has its buckets back:
/// the replica that held them meanwhile writes too, and the auditor counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_fence_is_caught_by_the_auditor() {
    paused(true).await;
}

async fn paused(broken: bool) {
    let Fleet { hub_cp, backing_cp, hub, backing, milo, namespaces } = fleet().await;
    let render = if broken {
        let flags = [FLAGS[0], FLAGS[1], "--test-only-break-the-fence"];
        let components = ["components/producer-sharded"];
        shipped::install_with_milo_and("sharding-broken", &hub_cp, &backing_cp, &milo, &components, &flags).await
    } else {
        sharded("sharding-pause", &hub_cp, &backing_cp, &milo).await
    };
    let mut pods = Vec::new();
    for i in 0..3 {
        pods.push(replica(&hub_cp, &render, i).await);
    }
    let three: Vec<&RunningPod> = pods.iter().collect();
    until_ranked(&hub, &three).await;
    // A project of the replica to be paused, whose change comes while it sleeps.
    let paused = &pods[0];
    let p = a_project_of(&hub, &namespaces, paused).await;
    signal(paused.pid(), "STOP");
    let stopped = Instant::now();
    let others: Vec<&RunningPod> = pods[1..].iter().collect();
    let away = Away { what: "SIGSTOP: the paused replica", since: stopped, others: &others, project: &p };
    let ns = taken_over(&hub, &backing, away, "paused", "fd20:0:5::1").await;
    tokio::time::sleep(Duration::from_secs(40).saturating_sub(stopped.elapsed())).await;
    signal(paused.pid(), "CONT");
    let woke = Instant::now();
    let mut added = vec![(ns, p.clone())];
    if broken {
        // Once its buckets are back with it, the replica that held them meanwhile still writes
        // for them (broken on purpose), beside it.
        eventually(Duration::from_secs(90), "its buckets back as ranked over three replicas", async || {
            fences::as_ranked(&fences::holders(&hub).await, &names(&three))
        })
        .await;
        let ns = world::project_namespace(&backing, &hub, &p, &format!("{p}-woken"), Some("fd20:0:6::1")).await;
        added.push((ns, p.clone()));
        let log = hub_cp.dir.join("audit.log");
        let project_of: BTreeMap<String, String> =
            namespaces.iter().map(|(p, ns, _)| (ns.clone(), p.clone())).chain(added.iter().cloned()).collect();
        let took = eventually(Duration::from_secs(30), "the auditor counts the broken fence", async || {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            !fence_audit::audit(&log, &project_of, &Default::default()).overlaps.is_empty()
        })
        .await;
        let audit =
            fence_audit::audit(&std::fs::read_to_string(&log).expect("audit log"), &project_of, &Default::default());
        eprintln!(
            "sharding: the fence broken on purpose: the auditor counts {} of {} record writes outside their writer's fence ({took:?} after the change): {:?}",
            audit.overlaps.len(),
            audit.writes,
            audit.overlaps.first()
        );
        return;
    }
    eventually(Duration::from_secs(90), "its buckets back as ranked over three replicas", async || {
        fences::as_ranked(&fences::holders(&hub).await, &names(&three))
    })
    .await;
    eprintln!(
        "sharding: SIGCONT after {:?}: its buckets back in {:?}",
        stopped.elapsed() - woke.elapsed(),
        woke.elapsed()
    );
    let again = world::project_namespace(&backing, &hub, &p, &format!("{p}-woken"), Some("fd20:0:6::1")).await;
    eventually(Duration::from_secs(30), "a change after it woke written", async || {
        record(&hub, &again).await == Some(vec!["fd20:0:6::1".to_owned()])
    })
    .await;
    added.push((again, p));
    hub_cp.assert_nothing_refused();
    audited(&hub_cp, &namespaces, &added, (&fence_audit::Deletions::new(), 0), PROJECTS + 2);
}

/// One replica cut off from the hub and from Milo (its Pod in a network namespace whose one link
/// is dropped: no reset reaches either side) for 40 s: the others take its buckets once its
/// member Lease has gone unrenewed for its duration and write what changes meanwhile; healed, it
/// takes its fences again before it writes (the auditor: nothing outside a writer's fence), and
/// gets its buckets back as ranked. Root (`ip netns`), as CI has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_hub_writes_nothing_until_it_is_back() {
    if !runs_as_root("a producer replica in a network namespace") {
        return;
    }
    use edgegate_system_tests::netns::{NetNs, forward};
    use k8s_openapi::api::core::v1::Secret;
    let Fleet { hub_cp, backing_cp, hub, backing, milo, namespaces } = fleet().await;
    let render = sharded("sharding-cut", &hub_cp, &backing_cp, &milo).await;
    // Milo through a relay on the link's host end, where every replica reaches it (the one in
    // the namespace only while its link is up): Milo's kubeconfig in the Secret says so.
    let netns = NetNs::create();
    let listener = tokio::net::TcpListener::bind((netns.host_address.as_str(), 0)).await.expect("bind on the link");
    let relay = listener.local_addr().expect("relay address");
    tokio::spawn(forward(listener, milo.server.trim_start_matches("https://").parse().expect("Milo's address")));
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), "edgegate-system");
    let mut secret = secrets.get("edgegate-producer-milo").await.expect("Milo's kubeconfig Secret");
    let data = secret.data.get_or_insert_default();
    let kubeconfig = String::from_utf8(data["kubeconfig"].0.clone()).expect("utf-8");
    let relayed = kubeconfig.replace(&milo.server, &format!("https://{relay}"));
    assert_ne!(relayed, kubeconfig, "Milo's server named in its kubeconfig");
    data.insert("kubeconfig".into(), k8s_openapi::ByteString(relayed.into_bytes()));
    secrets.replace("edgegate-producer-milo", &Default::default(), &secret).await.expect("the Secret relayed");

    let mut pods = Vec::new();
    for i in 0..2 {
        pods.push(replica(&hub_cp, &render, i).await);
    }
    let allowed = [Rewrite::ListenAddress, Rewrite::MountPath];
    pods.push(edgegate_system_tests::pod::run_in(&hub_cp, &render, "edgegate-producer", 2, &allowed, &netns).await);
    let three: Vec<&RunningPod> = pods.iter().collect();
    until_ranked(&hub, &three).await;
    let cut_off = &pods[2];
    let p = a_project_of(&hub, &namespaces, cut_off).await;

    netns.link(false);
    let cut = Instant::now();
    let others: Vec<&RunningPod> = pods[..2].iter().collect();
    let away = Away { what: "a replica cut off: the cut-off replica", since: cut, others: &others, project: &p };
    let ns = taken_over(&hub, &backing, away, "cut", "fd20:0:7::1").await;
    tokio::time::sleep(Duration::from_secs(40).saturating_sub(cut.elapsed())).await;
    netns.link(true);
    let healed = Instant::now();
    eventually(Duration::from_secs(120), "its buckets back as ranked over three replicas", async || {
        fences::as_ranked(&fences::holders(&hub).await, &names(&three))
    })
    .await;
    eprintln!("sharding: healed after {:?}: its buckets back in {:?}", healed.duration_since(cut), healed.elapsed());
    let again = world::project_namespace(&backing, &hub, &p, &format!("{p}-healed"), Some("fd20:0:8::1")).await;
    eventually(Duration::from_secs(30), "a change after the heal written", async || {
        record(&hub, &again).await == Some(vec!["fd20:0:8::1".to_owned()])
    })
    .await;
    hub_cp.assert_nothing_refused();
    let added = [(ns, p.clone()), (again, p)];
    audited(&hub_cp, &namespaces, &added, (&fence_audit::Deletions::new(), 0), PROJECTS + 2);
}
