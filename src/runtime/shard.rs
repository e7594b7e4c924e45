//! Sharing projects across producer replicas on the hub's Leases ([`crate::core::shard`] decides,
//! this module reads and writes): each replica renews a member Lease of its own (the election
//! of [`super::lease`] on a Lease nobody else holds, its ready buckets as an annotation), watches
//! every Lease of the namespace, and once a second acts on the plan: takes, releases, lets go.
//!
//! A replica may write for a bucket while its member Lease is within its deadline *and* it wrote
//! itself into the bucket's fence in that same tenure ([`Ownership::holds`]): a fence taken in an
//! earlier tenure (before a pause, a cut from the hub) is written again first, with the
//! resourceVersion seen, so a takeover meanwhile refuses it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::lease::{Leadership, LeaseConfig};
use crate::core::shard::{self, Bucket, Fence, Liveness, Member, Plan, Seen};
use crate::core::sighting::{ABSENT, Sightings};

/// The annotation on a member Lease naming the buckets it is ready to take.
pub const READY_ANNOTATION: &str = "edgegate.datumapis.com/ready-buckets";

/// The annotation on a member Lease saying it is stopping: it takes nothing and hands its
/// buckets over to their owners as they are ready.
pub const LEAVING_ANNOTATION: &str = "edgegate.datumapis.com/leaving";

/// How often a replica looks at the Leases and acts.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Where the Leases are and who this replica is.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub namespace: String,
    pub identity: String,
    /// The member Leases' duration.
    pub duration: Duration,
    /// Lease names: `<prefix>-member-<identity>`, `<prefix>-bucket-<n>`.
    pub prefix: String,
    /// For the auditor's own test only: write and delete for every bucket ever taken, ignoring
    /// the deadline and the fences (a deliberately broken fence, which the auditor must catch).
    pub unfenced: bool,
}

impl ShardConfig {
    /// The member Lease's election: renewed four times a duration, ready buckets annotated.
    pub fn member_lease(&self, annotations: watch::Receiver<BTreeMap<String, String>>) -> LeaseConfig {
        LeaseConfig {
            name: self.member_lease_name(),
            namespace: self.namespace.clone(),
            identity: self.identity.clone(),
            duration: self.duration,
            disabled: false,
            renewals: 4,
            annotations: Some(annotations),
        }
    }

    fn member_lease_name(&self) -> String {
        format!("{}-member-{}", self.prefix, self.identity)
    }

    fn bucket_lease(&self, b: Bucket) -> String {
        format!("{}-bucket-{b}", self.prefix)
    }
}

/// What this replica holds, asked right before each write and deletion.
#[derive(Clone, Debug)]
pub struct Ownership {
    member: Leadership,
    /// Each bucket held, with the tenure of the member Lease it was taken in.
    held: Arc<Mutex<BTreeMap<Bucket, u64>>>,
    /// Record writes under way, by bucket: a bucket is handed over only once its are done.
    writing: Arc<Mutex<BTreeMap<Bucket, usize>>>,
    /// Buckets being handed over, with the tenure each was held in: taken out of `held` (no
    /// write starts), their fences cleared once the writes under way have ended. The sharing
    /// loop goes on meanwhile; the fences still name this replica, so they still count as held
    /// for the plan (released again at the next look, not taken again) and in
    /// [`Ownership::held`].
    releasing: Arc<Mutex<BTreeMap<Bucket, u64>>>,
    /// Told each time a bucket is taken: its projects are written at once.
    taken: watch::Receiver<bool>,
    /// Since when the bucket vacant longest (as this replica sees it) has had nobody who may
    /// write; `None` when every bucket has someone.
    vacant_since: Arc<Mutex<Option<Instant>>>,
    /// Only with [`ShardConfig::unfenced`]: every bucket this replica ever took, which it then
    /// "holds" whatever its deadline and its fences say.
    unfenced: Option<Arc<Mutex<BTreeSet<Bucket>>>>,
    /// Stopping: no copy is deleted any more (records are still written while buckets are handed
    /// over).
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// How many other members are live and not leaving, at the last look: whom buckets can be
    /// handed to.
    successors: Arc<std::sync::atomic::AtomicUsize>,
}

impl Ownership {
    /// May this replica write `project`'s records and delete its copies now?
    pub fn holds(&self, project: &str) -> bool {
        self.holds_bucket(shard::bucket(project))
    }

    pub fn holds_bucket(&self, bucket: Bucket) -> bool {
        let held = self.held.lock();
        self.holds_in(&held, bucket)
    }

    /// Whether `held` (locked by the caller) holds `bucket` in the member Lease's tenure now.
    fn holds_in(&self, held: &BTreeMap<Bucket, u64>, bucket: Bucket) -> bool {
        if let Some(ever) = &self.unfenced {
            return ever.lock().contains(&bucket);
        }
        self.member.tenure().is_some_and(|tenure| held.get(&bucket) == Some(&tenure))
    }

    /// Is the fence broken on purpose ([`ShardConfig::unfenced`])?
    pub fn unfenced(&self) -> bool {
        self.unfenced.is_some()
    }

    /// May this replica delete `project`'s copies now? As [`Ownership::holds`], until it stops.
    pub fn deletes(&self, project: &str) -> bool {
        !self.stopping.load(std::sync::atomic::Ordering::SeqCst) && self.holds(project)
    }

    /// Stopping (SIGTERM): delete nothing more from now on.
    pub fn stop_deleting(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many other members could take a bucket over (live, not leaving), at the last look.
    pub fn successors(&self) -> usize {
        self.successors.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Leave to write `project`'s records now, if its bucket is held: kept until the guard is
    /// dropped, the bucket is not handed over meanwhile. Its deadline: how long the write may
    /// take (the member Lease's deadline; what is sent after it is refused by the next holder's
    /// fence only where the API allows).
    pub fn writing(&self, project: &str) -> Option<(Writing, Duration)> {
        let bucket = shard::bucket(project);
        let left = if self.unfenced.is_some() { Duration::from_secs(15) } else { self.member.time_left()? };
        // Under the lock a release takes the bucket out under first: it cannot come between.
        let held = self.held.lock();
        if !self.holds_in(&held, bucket) {
            return None;
        }
        *self.writing.lock().entry(bucket).or_default() += 1;
        drop(held);
        Some((Writing { bucket, writing: Arc::clone(&self.writing) }, left))
    }

    /// Whether no record write of `bucket` is under way.
    fn idle(&self, bucket: Bucket) -> bool {
        self.writing.lock().get(&bucket).is_none_or(|n| *n == 0)
    }

    /// The buckets held now: those whose fences this replica wrote in this tenure, the ones
    /// being handed over included until their fences are cleared ([`Ownership::holds`] says
    /// which may be written).
    pub fn held(&self) -> BTreeSet<Bucket> {
        let Some(tenure) = self.member.tenure() else { return BTreeSet::new() };
        let held = self.held.lock();
        let releasing = self.releasing.lock();
        held.iter().chain(releasing.iter()).filter(|(_, t)| **t == tenure).map(|(b, _)| *b).collect()
    }

    /// How long the bucket vacant longest has had nobody who may write (zero: none is).
    pub fn longest_vacancy(&self) -> Duration {
        self.vacant_since.lock().map(crate::index::clock::since).unwrap_or_default()
    }

    /// Flips each time a bucket is taken.
    pub fn taken(&self) -> watch::Receiver<bool> {
        self.taken.clone()
    }
}

/// A record write under way ([`Ownership::writing`]).
#[derive(Debug)]
pub struct Writing {
    bucket: Bucket,
    writing: Arc<Mutex<BTreeMap<Bucket, usize>>>,
}

impl Drop for Writing {
    fn drop(&mut self) {
        if let Some(n) = self.writing.lock().get_mut(&self.bucket) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Which of the buckets given are warm here: every project of theirs listed.
pub type Warm = Arc<dyn Fn(&BTreeSet<Bucket>) -> BTreeSet<Bucket> + Send + Sync>;

/// What [`share`] tells and asks the rest of the process.
pub struct Links {
    /// The member Lease's annotations ([`ShardConfig::member_lease`]).
    pub ready: watch::Sender<BTreeMap<String, String>>,
    /// The buckets whose projects this replica should watch.
    pub engage: watch::Sender<BTreeSet<Bucket>>,
    pub warm: Warm,
    /// Told `true` when this replica is stopping (SIGTERM).
    pub leaving: watch::Receiver<bool>,
}

/// Start sharing: the Lease watch and the loop that acts on it, until `shutdown`. `member` is the
/// member Lease's election.
pub fn share(
    client: &kube::Client,
    config: ShardConfig,
    member: Leadership,
    links: Links,
    shutdown: &CancellationToken,
) -> Ownership {
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    let (store, writer) = reflector::store();
    let watch = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects()
        .for_each(|_| async {});
    super::supervise::essential("shard Lease watch", shutdown, watch);
    let (taken_tx, taken) = watch::channel(false);
    let unfenced = config.unfenced.then(|| {
        tracing::error!("the fence is broken on purpose (a test of the auditor): two replicas may write at once");
        Arc::default()
    });
    let ownership = Ownership {
        member,
        held: Arc::default(),
        writing: Arc::default(),
        releasing: Arc::default(),
        taken,
        vacant_since: Arc::default(),
        unfenced,
        stopping: Arc::default(),
        successors: Arc::default(),
    };
    let sharer = Sharer {
        api,
        store,
        config,
        ownership: ownership.clone(),
        ready: links.ready,
        engage: links.engage,
        taken: taken_tx,
        warm: links.warm,
        leaving: links.leaving,
        seen: Sightings::default(),
        vacant: HashMap::new(),
        written: HashMap::new(),
    };
    super::supervise::essential("sharing", shutdown, sharer.run(shutdown.clone()));
    ownership
}

struct Sharer {
    api: Api<Lease>,
    store: Store<Lease>,
    config: ShardConfig,
    ownership: Ownership,
    ready: watch::Sender<BTreeMap<String, String>>,
    engage: watch::Sender<BTreeSet<Bucket>>,
    taken: watch::Sender<bool>,
    warm: Warm,
    leaving: watch::Receiver<bool>,
    /// Each member's Lease resourceVersion as last seen (absent: no Lease), when this replica
    /// first saw it so, and whether it has seen it change: a member is gone once its Lease has
    /// not changed for its duration by *this* clock, and live only once seen renewed.
    seen: Sightings,
    /// Since when, by this clock, each bucket has had nobody who may write.
    vacant: HashMap<Bucket, Instant>,
    /// Fences this replica wrote that the watch has not shown yet: the resourceVersion each
    /// write was based on (none: created), and what was written. A fence is read from here
    /// until the watch shows another version, so a write is never undone by a stale look.
    written: HashMap<String, (Option<String>, Arc<Lease>)>,
}

impl Sharer {
    async fn run(mut self, shutdown: CancellationToken) {
        if self.store.wait_until_ready().await.is_err() {
            return;
        }
        let mut live_since: Option<(u64, Instant)> = None;
        loop {
            // Settle first: members started at the same moment see each other before taking.
            let tenure = self.ownership.member.tenure();
            live_since = tenure.map(|t| live_since.filter(|(s, _)| *s == t).unwrap_or((t, crate::index::clock::now())));
            let settled = live_since
                .is_some_and(|(_, at)| crate::index::clock::since(at) >= self.config.duration / 4 + LOOK_EVERY);
            self.look(settled).await;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(LOOK_EVERY) => {}
            }
        }
        self.ownership.held.lock().clear();
        self.ownership.releasing.lock().clear();
    }

    /// One look at the Leases, and what the plan says.
    async fn look(&mut self, settled: bool) {
        let now = crate::index::clock::now();
        let mut leases: BTreeMap<String, Arc<Lease>> =
            self.store.state().into_iter().map(|l| (l.name_any(), l)).collect();
        self.written.retain(|name, (based_on, lease)| {
            let behind = leases.get(name).map(|l| l.resource_version()) == based_on.as_ref().map(|v| Some(v.clone()));
            if behind {
                leases.insert(name.clone(), Arc::clone(lease));
            }
            behind
        });
        let members = self.members(&leases, now);
        let successors = members.iter().filter(|m| m.liveness == Liveness::Live && !m.leaving).count();
        self.ownership.successors.store(successors, std::sync::atomic::Ordering::SeqCst);
        let fences = self.fences(&leases, &members, now);
        // Fences taken in an earlier tenure are held no more (each is written again first), nor
        // are handovers begun in one: their fences are written again too, then handed over.
        let tenure = self.ownership.member.tenure();
        if let Some(tenure) = tenure {
            self.ownership.held.lock().retain(|_, t| *t == tenure);
        }
        self.ownership.releasing.lock().retain(|_, t| Some(*t) == tenure);
        // Those being handed over count as held: the plan says release them (again), not take.
        let held: BTreeSet<Bucket> = self.ownership.held();
        // A view older than this replica's last renewal could show a live member as gone (its
        // renewals not seen yet): nothing is taken until the view shows that renewal, sent
        // within half a duration, so every member's Lease seen is at most that old.
        let own = leases.get(&self.config.member_lease_name()).and_then(|l| l.resource_version());
        let fresh = self.ownership.member.renewed().is_some_and(|(version, sent)| {
            own.as_ref() == Some(&version) && crate::index::clock::since(sent) <= self.config.duration / 2
        });
        let candidates: BTreeSet<Bucket> = (0..shard::BUCKETS).collect();
        let warm = (self.warm)(&candidates);
        // While a replica not sharing holds the one Lease of the producer (a rollout from one
        // writer to shared ones), it writes for every project: take nothing until it lets go.
        let single = self.single_writer(&leases, now);
        let seen = Seen {
            me: &self.config.identity,
            live: self.ownership.member.is_leader() && settled && !single && fresh,
            leaving: *self.leaving.borrow(),
            members: &members,
            fences: &fences,
            held: &held,
            warm: &warm,
            duration: self.config.duration,
        };
        let plan = shard::plan(&seen);
        *self.ownership.vacant_since.lock() = self.vacant.values().min().copied();
        self.act(&plan, &leases).await;
        let ready = plan.ready.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let leaving = self.leaving.borrow().to_string();
        self.ready.send_if_modified(|a| {
            let changed = a.get(READY_ANNOTATION) != Some(&ready) || a.get(LEAVING_ANNOTATION) != Some(&leaving);
            a.insert(READY_ANNOTATION.to_owned(), ready);
            a.insert(LEAVING_ANNOTATION.to_owned(), leaving);
            changed
        });
        let mut engage = plan.engage.clone();
        if let Some(ever) = &self.ownership.unfenced {
            // Broken on purpose: what it ever took it keeps watching (and writing).
            engage.extend(ever.lock().iter().copied());
        }
        self.engage.send_if_modified(|e| std::mem::replace(e, engage.clone()) != engage);
    }

    /// The other members, as this replica sees them.
    fn members(&mut self, leases: &BTreeMap<String, Arc<Lease>>, now: Instant) -> Vec<Member> {
        let prefix = format!("{}-member-", self.config.prefix);
        let mut members = Vec::new();
        for (name, lease) in leases {
            let Some(identity) = name.strip_prefix(&prefix) else { continue };
            if identity == self.config.identity {
                continue;
            }
            let spec = lease.spec.clone().unwrap_or_default();
            let version = lease.resource_version().unwrap_or_default();
            let sighting = self.seen.look(identity, &version, now);
            let released = spec.holder_identity.as_deref().is_none_or(str::is_empty);
            let liveness = Liveness::of(&sighting, released, self.config.duration);
            let ready = lease
                .annotations()
                .get(READY_ANNOTATION)
                .map(|r| r.split(',').filter_map(|b| b.trim().parse().ok()).collect())
                .unwrap_or_default();
            let leaving = lease.annotations().get(LEAVING_ANNOTATION).is_some_and(|l| l == "true");
            members.push(Member { name: identity.to_owned(), liveness, ready, leaving });
        }
        members
    }

    /// Does a replica that does not share hold the producer's one Lease (`<prefix>`), renewed
    /// within its duration by this clock?
    fn single_writer(&mut self, leases: &BTreeMap<String, Arc<Lease>>, now: Instant) -> bool {
        let Some(lease) = leases.get(&self.config.prefix) else { return false };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
            return false;
        }
        let version = lease.resource_version().unwrap_or_default();
        let key = format!("lease {}", self.config.prefix);
        let unchanged = self.seen.look(&key, &version, now).unchanged;
        let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
        let held = unchanged <= duration;
        if held {
            tracing::debug!(holder = ?spec.holder_identity, "a producer not sharing holds the producer's Lease; taking nothing");
        }
        held
    }

    /// Every bucket's fence. A holder with no member Lease at all is gone once this replica
    /// has looked for a duration without seeing one.
    fn fences(
        &mut self,
        leases: &BTreeMap<String, Arc<Lease>>,
        members: &[Member],
        now: Instant,
    ) -> BTreeMap<Bucket, Fence> {
        let mut fences = BTreeMap::new();
        for b in 0..shard::BUCKETS {
            let holder = leases
                .get(&self.config.bucket_lease(b))
                .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
                .filter(|h| !h.is_empty());
            let may_write = match &holder {
                None => false,
                Some(h) if *h == self.config.identity => true,
                Some(h) => match members.iter().find(|m| m.name == *h) {
                    Some(m) => m.liveness != Liveness::Gone,
                    None => {
                        // No member Lease: gone once none has been seen for a duration (counted
                        // from when it went, if it was seen before).
                        self.seen.look(h, ABSENT, now).unchanged <= self.config.duration
                    }
                },
            };
            let vacant_for = if may_write {
                self.vacant.remove(&b);
                None
            } else {
                Some(now.saturating_duration_since(*self.vacant.entry(b).or_insert(now)))
            };
            fences.insert(b, Fence { holder, vacant_for });
        }
        fences
    }

    async fn act(&mut self, plan: &Plan, leases: &BTreeMap<String, Arc<Lease>>) {
        for b in &plan.lost {
            self.ownership.held.lock().remove(b);
            self.ownership.releasing.lock().remove(b);
            tracing::warn!(bucket = b, "bucket lost: its fence names another replica");
        }
        // A handover the plan no longer says (its owner is not ready any more, or not its owner,
        // or this look may take nothing): abandoned, the bucket held again in its tenure.
        let mut abandoned = Vec::new();
        self.ownership.releasing.lock().retain(|b, t| {
            let keep = plan.release.contains(b);
            if !keep {
                abandoned.push((*b, *t));
            }
            keep
        });
        for (b, tenure) in abandoned {
            self.ownership.held.lock().insert(b, tenure);
            tracing::info!(bucket = b, "handover abandoned (the plan no longer says release): the bucket is kept");
        }
        for b in &plan.release {
            // Stop writing first: no write starts from now on (`Ownership::writing` asks under the
            // same lock). The fence is cleared once the writes under way have ended (each by its
            // deadline), at this look or a later one: the loop does not wait for them.
            let first = {
                let mut held = self.ownership.held.lock();
                let mut releasing = self.ownership.releasing.lock();
                let Some(tenure) = held.remove(b).or_else(|| releasing.get(b).copied()) else { continue };
                releasing.insert(*b, tenure).is_none()
            };
            if !self.ownership.idle(*b) {
                if first {
                    tracing::info!(bucket = b, "record writes under way: the bucket is released once they have ended");
                }
                continue;
            }
            let Some(lease) = leases.get(&self.config.bucket_lease(*b)) else { continue };
            let mut lease = (**lease).clone();
            let spec = lease.spec.get_or_insert_default();
            spec.holder_identity = None;
            match self.api.replace(&lease.name_any(), &PostParams::default(), &lease).await {
                Ok(written) => {
                    self.ownership.releasing.lock().remove(b);
                    self.wrote(&lease, written);
                    tracing::info!(bucket = b, "bucket handed over");
                }
                Err(error) => {
                    // Still being released: the fence names this replica, so the next look says
                    // release again.
                    tracing::warn!(bucket = b, %error, "releasing a bucket failed; tried again at the next look");
                }
            }
        }
        for b in &plan.take {
            // The tenure the write is sent in: a lapse meanwhile leaves the bucket not held.
            let Some(tenure) = self.ownership.member.tenure() else { return };
            let name = self.config.bucket_lease(*b);
            let at = MicroTime(jiff::Timestamp::now());
            let based_on = leases.get(&name).map(|l| (**l).clone());
            let result = match leases.get(&name) {
                Some(lease) => {
                    let mut lease = (**lease).clone();
                    let previous = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
                    let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0);
                    lease.spec = Some(self.fence_spec(at, transitions + 1));
                    tracing::info!(bucket = b, ?previous, "taking a bucket");
                    self.api.replace(&name, &PostParams::default(), &lease).await
                }
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta { name: Some(name.clone()), ..ObjectMeta::default() },
                        spec: Some(self.fence_spec(at, 0)),
                    };
                    self.api.create(&PostParams::default(), &lease).await
                }
            };
            match result {
                Ok(written) => {
                    self.written.insert(name.clone(), (based_on.and_then(|l| l.resource_version()), Arc::new(written)));
                    self.ownership.held.lock().insert(*b, tenure);
                    if let Some(ever) = &self.ownership.unfenced {
                        ever.lock().insert(*b);
                    }
                    self.taken.send_modify(|t| *t = !*t);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(bucket = b, "the fence changed meanwhile; not taken");
                }
                Err(error) => tracing::warn!(bucket = b, %error, "taking a bucket failed"),
            }
        }
    }

    fn wrote(&mut self, based_on: &Lease, written: Lease) {
        self.written.insert(based_on.name_any(), (based_on.resource_version(), Arc::new(written)));
    }

    fn fence_spec(&self, at: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.config.duration.as_secs()).unwrap_or(i32::MAX)),
            acquire_time: Some(at.clone()),
            renew_time: Some(at),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}
