//! Faults, injected in a seeded order: a webhook replica killed (-9) and started again; on the
//! producer's shared replicas (each target the replica holding the most of the soak's projects):
//! one killed and made again under its name, one stopped (SIGSTOP) past its member Lease and
//! resumed, a fourth added and removed (3 → 4 → 3: buckets move to it and back), and a rolling
//! restart; the hub's etcd and kube-apiserver restarted; the project API server frozen past the
//! producer's timeouts (Milo answers nothing), and one Milo project silent while the others
//! answer; both webhook replicas frozen (fail closed: the cell's writes fail and are retried);
//! every proxy deleted at once (a burst of emptied records); and a record emptied by hand. Each is
//! a window on the timeline, asserted to have reached its target; after it, the time until every
//! binary is ready again is measured.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{Patch, PatchParams};

use super::churn::{Churn, Rng};
use super::world::{PROJECTS, REPLICAS, World};
use crate::helpers::{eventually, exited, signal};

pub const KINDS: [&str; 11] = [
    "webhook-kill",
    "producer-kill",
    "producer-stop",
    "producer-scale",
    "producer-rolling",
    "hub-restart",
    "project-unreachable",
    "milo-project-fault",
    "webhook-unreachable",
    "burst",
    "record-hand-edit",
];

/// How long after a fault ends its effects may still show (the binaries' backoffs, a relist).
pub const RECOVERY: Duration = Duration::from_secs(15);

/// The faults that can delay a collection (invariant 2): those that stop a project's owner
/// writing or seeing it (its project's evidence is whole again only `--withdraw-after` +
/// `--grace` after), each only for the projects it reaches: a replica killed or stopped, its own;
/// a Milo project silent, that one. A webhook fault, a burst or a hand edit delays no deletion.
pub const DELAY_COLLECTION: [&str; 7] = [
    "producer-kill",
    "producer-stop",
    "producer-scale",
    "producer-rolling",
    "hub-restart",
    "project-unreachable",
    "milo-project-fault",
];

/// The faults that can explain refusing an address long served (invariant 1's refusal half): a
/// record emptied by hand (until the producer puts it right), anything that restarts the
/// webhook's view, a project's owner gone or moving (an address served since is recorded once its
/// new owner has listed the project), and a project cut off (an address served meanwhile is
/// recorded once it answers again), each only for the projects it reaches. A refusal delays a
/// copy; it withdraws nothing.
pub const EXCUSE_REFUSAL: [&str; 10] = [
    "record-hand-edit",
    "hub-restart",
    "webhook-kill",
    "webhook-unreachable",
    "producer-kill",
    "producer-stop",
    "producer-scale",
    "producer-rolling",
    "project-unreachable",
    "milo-project-fault",
];

/// A fault: its kind, when it began and (once over) when it ended, and the projects it reaches
/// (`None`: all of them).
struct Window {
    kind: &'static str,
    began: Instant,
    ended: Option<Instant>,
    only: Option<BTreeSet<String>>,
}

impl Window {
    fn reaches(&self, project: Option<&str>) -> bool {
        self.only.as_ref().is_none_or(|only| project.is_some_and(|p| only.contains(p)))
    }
}

/// The faults' windows, shared with the checker.
#[derive(Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<Window>>>);

impl Timeline {
    fn open(&self, kind: &'static str) -> usize {
        let mut windows = self.0.lock().expect("timeline");
        windows.push(Window { kind, began: Instant::now(), ended: None, only: None });
        windows.len() - 1
    }
    /// The fault in window `i` begins now (after its target was chosen, which may have waited).
    fn begins_now(&self, i: usize) {
        self.0.lock().expect("timeline")[i].began = Instant::now();
    }
    /// The fault in window `i` reaches only `projects`.
    fn only(&self, i: usize, projects: impl IntoIterator<Item = String>) {
        self.0.lock().expect("timeline")[i].only = Some(projects.into_iter().collect());
    }
    fn close(&self, i: usize) {
        self.0.lock().expect("timeline")[i].ended = Some(Instant::now());
    }
    /// When the project's control plane was cut off (a fault of `kinds` in progress at `at`
    /// reaching `project`) began.
    pub fn cut_since(&self, kinds: &[&str], project: Option<&str>, at: Instant) -> Option<Instant> {
        let windows = self.0.lock().expect("timeline");
        windows
            .iter()
            .filter(|w| kinds.contains(&w.kind) && w.reaches(project))
            .find(|w| w.began <= at && w.ended.is_none_or(|e| at <= e))
            .map(|w| w.began)
    }
    /// Until when, as seen at `at`, a fault of one of `kinds` reaching `project` excuses a delay:
    /// the latest end of one begun by then, plus [`RECOVERY`] (one still in progress counts as
    /// ending at `at`). `None` when none has begun. A delay is judged from there, not from when it
    /// began.
    pub fn excused_until(&self, at: Instant, kinds: &[&str], project: Option<&str>) -> Option<Instant> {
        let windows = self.0.lock().expect("timeline");
        windows
            .iter()
            .filter(|w| kinds.contains(&w.kind) && w.began <= at && w.reaches(project))
            .map(|w| w.ended.unwrap_or(at).min(at) + RECOVERY)
            .max()
    }
    pub fn count(&self) -> Vec<(&'static str, usize)> {
        let windows = self.0.lock().expect("timeline");
        KINDS.iter().map(|k| (*k, windows.iter().filter(|w| w.kind == *k).count())).collect()
    }
}

/// The faults that cut a project's control plane off (invariant 3).
pub const CUT: [&str; 2] = ["project-unreachable", "milo-project-fault"];

/// Inject `kind`; returns when it is over (not yet recovered). Each asserts it reached its
/// target: a fault that silently did not happen would pass for one survived.
pub async fn inject(kind: &'static str, world: &mut World, churn: &tokio::sync::Mutex<Churn>, timeline: &Timeline) {
    let window = timeline.open(kind);
    eprintln!("soak: fault {kind}");
    match kind {
        "webhook-kill" => {
            world.kill_webhook(0).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            world.start_webhook(0).await;
        }
        "producer-kill" => {
            // Killed, its Pod made again under its name at once: it takes its buckets back once
            // its old member Lease has gone unrenewed for its duration (or the others take them).
            // Chosen once the buckets are where the replicas rank them (they may still be moving
            // after the fault before), so that the projects it reaches are the ones it holds.
            until_ranked(world, "the buckets settled before a kill").await;
            let i = world.busiest_producer().await;
            timeline.only(window, held_projects(world, i).await);
            timeline.begins_now(window);
            let pid = world.producers[i].as_ref().map(|p| p.pid()).expect("the target runs");
            signal(pid, "KILL");
            eventually(Duration::from_secs(5), "the killed replica gone", async || exited(pid)).await;
            drop(world.producers[i].take());
            tokio::time::sleep(Duration::from_secs(2)).await;
            world.start_producer(i).await;
            until_ranked(world, "the killed replica's buckets taken back").await;
        }
        "producer-stop" => {
            // Past its member Lease (16 s): the others take its buckets, and the woken one must
            // write and delete nothing on its stale view until it has taken them back.
            until_ranked(world, "the buckets settled before a stop").await;
            let i = world.busiest_producer().await;
            timeline.only(window, held_projects(world, i).await);
            timeline.begins_now(window);
            let (pid, name) = world.producers[i].as_ref().map(|p| (p.pid(), p.name.clone())).expect("the target runs");
            signal(pid, "STOP");
            let took = eventually(Duration::from_secs(45), "the stopped replica's buckets taken", async || {
                crate::fences::held_by(&crate::fences::holders(&world.hub).await, &name) == 0
            })
            .await;
            eprintln!("soak: {name} stopped: its buckets taken by the others {took:.1?} after");
            signal(pid, "CONT");
            until_ranked(world, "the woken replica's buckets back").await;
        }
        "producer-scale" => {
            // 3 → 4: the new replica takes its buckets from the others (soak-p2 and soak-p10
            // among them); 4 → 3 by SIGTERM: it hands them back.
            // It reaches the projects that move to the fourth replica and back, and only those:
            // rendezvous hashing moves nothing between the others.
            let fourth: Vec<String> = (0..=REPLICAS).map(|i| format!("edgegate-producer-{i}")).collect();
            timeline.only(window, PROJECTS.iter().filter(|p| moves_to(p, &fourth)).map(|p| (*p).to_owned()));
            world.start_producer(REPLICAS).await;
            until_ranked(world, "a fourth replica's buckets taken").await;
            let held = world.projects_held().await;
            assert!(
                held.get(&REPLICAS).is_some_and(|p| !p.is_empty()),
                "the fourth replica took no soak project: {held:?}"
            );
            let took = world.stop_producer(REPLICAS).await;
            world.producers.truncate(REPLICAS);
            until_ranked(world, "the fourth replica's buckets handed back").await;
            eprintln!(
                "soak: 3 → 4 → 3 replicas: the fourth held {} projects, exited {took:.1?} after SIGTERM",
                held[&REPLICAS].len()
            );
        }
        "producer-rolling" => {
            // As a StatefulSet rolls its Pods: the last first, each stopped, made again, and its
            // buckets back before the next.
            for i in (0..REPLICAS).rev() {
                world.stop_producer(i).await;
                world.start_producer(i).await;
                until_ranked(world, "a restarted replica's buckets back").await;
            }
        }
        "hub-restart" => {
            let began = std::time::SystemTime::now();
            let hub = Arc::clone(&world.hub_cp);
            tokio::task::spawn_blocking(move || {
                hub.restart("etcd", Duration::from_secs(1));
                hub.restart("kube-apiserver", Duration::from_secs(1));
            })
            .await
            .expect("restart");
            world.hub_restarts.push((began, std::time::SystemTime::now()));
        }
        "project-unreachable" => {
            // Every project's watches stall (or fail, past the producer's read timeout): it must
            // keep every record as it is.
            let pid = world.project_cp.pid("kube-apiserver");
            signal(pid, "STOP");
            tokio::time::sleep(Duration::from_secs(20)).await;
            signal(pid, "CONT");
        }
        "milo-project-fault" => {
            // One project answers nothing (its watches cut, every request held open) while the
            // others answer: its records stay as they are, and the others' work goes on.
            let project = churn.lock().await.busiest_project().expect("a project with namespaces");
            timeline.only(window, [project.to_owned()]);
            timeline.begins_now(window);
            let asked = || world.milo.requests().get(project).copied().unwrap_or_default();
            let before = asked();
            world.milo.set_fault(project, Some(crate::milo::Fault::Silent));
            tokio::time::sleep(Duration::from_secs(20)).await;
            world.milo.set_fault(project, None);
            let during = asked() - before;
            assert!(during > 0, "nobody asked {project} anything while it was silent");
            eprintln!("soak: {project} silent for 20 s: {during} requests held");
        }
        "webhook-unreachable" => {
            let pids: Vec<u32> = world.webhooks.iter().flatten().map(|r| r.pid()).collect();
            assert_eq!(pids.len(), 2, "both webhook replicas run");
            pids.iter().for_each(|p| signal(*p, "STOP"));
            tokio::time::sleep(Duration::from_secs(6)).await;
            pids.iter().for_each(|p| signal(*p, "CONT"));
        }
        "burst" => churn.lock().await.burst(Duration::from_secs(8)).await,
        "record-hand-edit" => hand_edit(world).await,
        _ => unreachable!("a known fault"),
    }
    timeline.close(window);
}

/// The soak's projects whose buckets replica `i` holds.
async fn held_projects(world: &World, i: usize) -> Vec<String> {
    world.projects_held().await.remove(&i).unwrap_or_default()
}

/// Whether rendezvous hashing gives project `p`'s bucket to the last of `members`.
fn moves_to(p: &str, members: &[String]) -> bool {
    let bucket = edgegate::core::shard::bucket(p);
    let ranked = edgegate::core::shard::rank(bucket, members.iter().map(String::as_str));
    ranked.first() == members.last().map(String::as_str).as_ref()
}

/// Wait until every bucket is held as the running replicas rank it (60 s: a member Lease's
/// duration and a look, twice).
async fn until_ranked(world: &World, what: &str) {
    let took = eventually(Duration::from_secs(60), what, async || world.as_ranked().await).await;
    eprintln!("soak: {what} in {took:.1?}");
}

/// Empty the largest record by hand, as a person with `kubectl edit` would: chosen and edited
/// again until an edit is answered (a list failing just after a hub restart, a record empty
/// after a burst, a namespace deleted meanwhile are each tried again), within 30 s.
async fn hand_edit(world: &World) {
    let api: Api<edgegate::EdgeReachability> = Api::all(world.hub.clone());
    let emptied = serde_json::json!({"spec": {"addresses": []}});
    let mut edited = None;
    eventually(Duration::from_secs(30), "a record emptied by hand", async || {
        let records = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let Some(record) = records.iter().filter(|r| !r.entries().is_empty()).max_by_key(|r| r.entries().len()) else {
            return false;
        };
        let ns = record.metadata.namespace.clone().unwrap_or_default();
        let namespaced: Api<edgegate::EdgeReachability> = Api::namespaced(world.hub.clone(), &ns);
        let done = namespaced.patch("default", &PatchParams::default(), &Patch::Merge(&emptied)).await.is_ok();
        edited = done.then(|| (ns, record.entries().len()));
        done
    })
    .await;
    let (ns, n) = edited.unwrap_or_default();
    eprintln!("soak: emptied the record of {ns} ({n} addresses) by hand");
}

/// The faults in a seeded order: each kind once per cycle.
pub fn schedule(seed: u64) -> Vec<&'static str> {
    let mut rng = Rng::new(seed ^ 0xFA17);
    let mut kinds = KINDS.to_vec();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i + 1));
    }
    kinds
}
