//! Faults, injected in a seeded order: each binary killed (-9) and started again (the producer's
//! lease holder, which writes and deletes, and its follower), the lease holder stopped (SIGSTOP)
//! and resumed, the hub's etcd and kube-apiserver restarted, the
//! project API server frozen past the producer's timeouts, both webhook replicas frozen (fail
//! closed: the cell's writes fail and are retried), every proxy deleted at once (a burst of
//! emptied records), and a record emptied by hand. Each is a window on the timeline; after it,
//! the time until every binary is ready again is measured.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{Patch, PatchParams};

use super::churn::{Churn, Rng};
use super::world::World;

pub const KINDS: [&str; 9] = [
    "webhook-kill",
    "producer-leader-kill",
    "producer-follower-kill",
    "producer-leader-stop",
    "hub-restart",
    "project-unreachable",
    "webhook-unreachable",
    "burst",
    "record-hand-edit",
];

/// How long after a fault ends its effects may still show (the binaries' backoffs, a relist).
pub const RECOVERY: Duration = Duration::from_secs(15);

/// The faults that can delay a collection (invariant 2): those that stop the producer leading or
/// seeing (its project's evidence is whole again only `--withdraw-after` + `--grace` after). A
/// webhook fault, a follower killed, a burst or a hand edit delays no deletion.
pub const DELAY_COLLECTION: [&str; 4] =
    ["producer-leader-kill", "producer-leader-stop", "hub-restart", "project-unreachable"];

/// The faults that can explain refusing an address long served (invariant 1's refusal half): a
/// record emptied by hand (until the producer puts it right), and anything that restarts the
/// webhook's or the producer's view.
pub const EXCUSE_REFUSAL: [&str; 6] = [
    "record-hand-edit",
    "hub-restart",
    "webhook-kill",
    "webhook-unreachable",
    "producer-leader-kill",
    "producer-leader-stop",
];

/// A fault's kind, when it began and (once over) when it ended.
type Window = (&'static str, Instant, Option<Instant>);

/// The faults' windows, shared with the checker.
#[derive(Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<Window>>>);

impl Timeline {
    fn open(&self, kind: &'static str) -> usize {
        let mut windows = self.0.lock().expect("timeline");
        windows.push((kind, Instant::now(), None));
        windows.len() - 1
    }
    fn close(&self, i: usize) {
        self.0.lock().expect("timeline")[i].2 = Some(Instant::now());
    }
    /// When the fault of `kind` in progress at `at` began.
    pub fn since(&self, kind: &str, at: Instant) -> Option<Instant> {
        let windows = self.0.lock().expect("timeline");
        windows.iter().find(|(k, s, e)| *k == kind && *s <= at && e.is_none_or(|e| at <= e)).map(|(_, s, _)| *s)
    }
    /// Until when, as seen at `at`, a fault of one of `kinds` excuses a delay: the latest end of
    /// one begun by then, plus [`RECOVERY`] (one still in progress counts as ending at `at`).
    /// `None` when none has begun. A delay is judged from there, not from when it began.
    pub fn excused_until(&self, at: Instant, kinds: &[&str]) -> Option<Instant> {
        let windows = self.0.lock().expect("timeline");
        windows
            .iter()
            .filter(|(k, s, _)| kinds.contains(k) && *s <= at)
            .map(|(_, _, e)| e.unwrap_or(at).min(at) + RECOVERY)
            .max()
    }
    pub fn count(&self) -> Vec<(&'static str, usize)> {
        let windows = self.0.lock().expect("timeline");
        KINDS.iter().map(|k| (*k, windows.iter().filter(|(w, _, _)| w == k).count())).collect()
    }
}

/// Inject `kind`; returns when it is over (not yet recovered).
pub async fn inject(kind: &'static str, world: &mut World, churn: &tokio::sync::Mutex<Churn>, timeline: &Timeline) {
    let window = timeline.open(kind);
    eprintln!("soak: fault {kind}");
    match kind {
        "webhook-kill" => {
            world.kill_webhook(0).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            world.start_webhook(0).await;
        }
        "producer-leader-kill" | "producer-follower-kill" => {
            let leader = world.producer_leader().unwrap_or(0);
            let i = if kind == "producer-leader-kill" { leader } else { 1 - leader };
            if let Some(p) = world.producers[i].take() {
                crate::helpers::signal(crate::helpers::pid_of(&p.process), "KILL");
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            world.start_producer(i).await;
        }
        "producer-leader-stop" => {
            // Past its Lease (4 s): the other takes over, and the woken one must write and delete
            // nothing on its stale view.
            let i = world.producer_leader().unwrap_or(0);
            let pid = world.producers[i].as_ref().map(|p| crate::helpers::pid_of(&p.process));
            if let Some(pid) = pid {
                crate::helpers::signal(pid, "STOP");
                tokio::time::sleep(Duration::from_secs(8)).await;
                crate::helpers::signal(pid, "CONT");
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
            // The producer's watches of the project stall (or fail, past its read timeout): it must keep
            // every record as it is.
            let pid = world.project_cp.pid("kube-apiserver");
            crate::helpers::signal(pid, "STOP");
            tokio::time::sleep(Duration::from_secs(20)).await;
            crate::helpers::signal(pid, "CONT");
        }
        "webhook-unreachable" => {
            let pids: Vec<u32> = world.webhooks.iter().flatten().map(|r| r.pid()).collect();
            pids.iter().for_each(|p| crate::helpers::signal(*p, "STOP"));
            tokio::time::sleep(Duration::from_secs(6)).await;
            pids.iter().for_each(|p| crate::helpers::signal(*p, "CONT"));
        }
        "burst" => churn.lock().await.burst(Duration::from_secs(8)).await,
        "record-hand-edit" => hand_edit(world).await,
        _ => unreachable!("a known fault"),
    }
    timeline.close(window);
}

/// Empty the largest record by hand, as a person with `kubectl edit` would.
async fn hand_edit(world: &World) {
    let api: Api<edgegate::EdgeReachability> = Api::all(world.hub.clone());
    let records = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
    let Some(record) = records.iter().max_by_key(|r| r.entries().len()) else { return };
    let ns = record.metadata.namespace.clone().unwrap_or_default();
    let emptied = serde_json::json!({"spec": {"addresses": []}});
    let namespaced: Api<edgegate::EdgeReachability> = Api::namespaced(world.hub.clone(), &ns);
    let _ = namespaced.patch("default", &PatchParams::default(), &Patch::Merge(&emptied)).await;
    eprintln!("soak: emptied the record of {ns} ({} addresses) by hand", record.entries().len());
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
