//! Leader election on one `coordination.k8s.io/v1` Lease, so of the replicas of a writer (the
//! pruner, the producer) only one acts at a time.
//!
//! Leadership is a local, monotonic deadline: the moment the last successful renewal was *sent*,
//! plus the lease duration, less a margin. Whoever writes asks [`Leadership::is_leader`] right
//! before each write, so a replica that cannot renew (stopped, partitioned, its API calls
//! failing) stops writing before another replica may take the Lease: the others count the
//! duration from when they *saw* the renewal, which is later. A clean stop releases the Lease, and
//! followers look every second, so a rolling update hands over within about a second.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// On every write of a Lease, which process wrote it (random, new in each process). A Lease that
/// names this replica but another process wrote is not this one's to renew: a predecessor of
/// the same name (a StatefulSet's Pod made again, a restarted container) may have written it
/// moments ago, or a successor while this one was paused. It is taken, like anyone else's, once
/// released or unchanged for its duration.
pub const INSTANCE_ANNOTATION: &str = "edgegate.datumapis.com/instance";

/// Which Lease, and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    /// No election: this replica always leads (run exactly one).
    pub disabled: bool,
    /// Renewals per duration: 5 for the election; 4 for a member Lease of the shared producer
    /// (four replicas then renew at one write a second together).
    pub renewals: u32,
    /// Annotations written with each renewal (a member's ready buckets), as they are then.
    pub annotations: Option<watch::Receiver<BTreeMap<String, String>>>,
}

impl LeaseConfig {
    /// How often the holder renews.
    pub fn renew_every(&self) -> Duration {
        self.duration / self.renewals.max(2)
    }

    /// How often a follower looks: often enough to see a released Lease within a second.
    fn look_every(&self) -> Duration {
        self.renew_every().min(Duration::from_secs(1))
    }

    /// Taken off the deadline for clocks that run at slightly different rates.
    fn margin(&self) -> Duration {
        self.duration / 5
    }
}

/// Whether this replica may write now, and a channel told when that changes.
#[derive(Clone, Debug)]
pub struct Leadership {
    tenure: Arc<Mutex<Tenure>>,
    always: bool,
    changes: watch::Receiver<bool>,
}

/// The deadline, and which unbroken run of renewals it belongs to.
#[derive(Clone, Debug, Default)]
struct Tenure {
    deadline: Option<Instant>,
    /// Counts the times leading began: what was taken in an earlier tenure is not held now.
    epoch: u64,
    /// The resourceVersion the last successful write of the Lease made, and when it was sent: a
    /// view of the namespace's Leases that shows it is at least that fresh.
    renewed: Option<(String, Instant)>,
}

impl Leadership {
    /// A replica that always leads (no election).
    pub fn always() -> Self {
        let (_, changes) = watch::channel(true);
        Leadership { tenure: Arc::default(), always: true, changes }
    }

    /// True until the deadline the last renewal set.
    pub fn is_leader(&self) -> bool {
        self.leading(&self.tenure.lock())
    }

    /// Whether `tenure` (locked by the caller) is within its deadline now.
    fn leading(&self, tenure: &Tenure) -> bool {
        self.always || tenure.deadline.is_some_and(|d| crate::index::clock::now() < d)
    }

    /// Told `true` when this replica takes the Lease and `false` when it steps down.
    pub fn changes(&self) -> watch::Receiver<bool> {
        self.changes.clone()
    }

    /// While leading, which tenure: it changes each time leading begins again, so whatever was
    /// taken before a lapse (a paused process, a cut from the hub) is known not to hold now.
    pub fn tenure(&self) -> Option<u64> {
        let tenure = self.tenure.lock();
        self.leading(&tenure).then_some(tenure.epoch)
    }

    /// How long until the deadline, while leading (a replica that always leads: an hour).
    pub fn time_left(&self) -> Option<Duration> {
        if self.always {
            return Some(Duration::from_secs(3600));
        }
        let deadline = self.deadline()?;
        let now = crate::index::clock::now();
        (now < deadline).then(|| deadline - now)
    }

    /// The resourceVersion of the last successful write of the Lease, and when it was sent.
    pub fn renewed(&self) -> Option<(String, Instant)> {
        self.tenure.lock().renewed.clone()
    }

    fn deadline(&self) -> Option<Instant> {
        self.tenure.lock().deadline
    }
}

/// The other end of a [`Leadership`]: what sets its deadline (the elector, or a test).
#[derive(Debug)]
pub struct Grant {
    leadership: Leadership,
    tx: watch::Sender<bool>,
}

impl Grant {
    /// A replica that does not lead until granted.
    pub fn new() -> (Leadership, Grant) {
        let (tx, changes) = watch::channel(false);
        let leadership = Leadership { tenure: Arc::default(), always: false, changes };
        (leadership.clone(), Grant { leadership, tx })
    }

    /// Lead until `deadline`; `None`: follow from now. Leading that begins (again) begins a
    /// new tenure.
    pub fn until(&self, deadline: Option<Instant>) {
        let leading = self.leadership.is_leader();
        let mut tenure = self.leadership.tenure.lock();
        if !leading && deadline.is_some() {
            tenure.epoch += 1;
        }
        tenure.deadline = deadline;
        drop(tenure);
        self.tell();
    }

    /// Tell the channel if leading changed (a deadline passes by itself); true if it did.
    pub fn tell(&self) -> bool {
        let leading = self.leadership.is_leader();
        self.tx.send_if_modified(|was| std::mem::replace(was, leading) != leading)
    }

    fn leadership(&self) -> &Leadership {
        &self.leadership
    }
}

/// Start electing. Returns at once; the election runs until `shutdown`, and then releases the
/// Lease if this replica holds it. The task ends when it has released it.
pub fn elect(
    client: &kube::Client,
    config: &LeaseConfig,
    shutdown: CancellationToken,
) -> (Leadership, tokio::task::JoinHandle<()>) {
    if config.disabled {
        tracing::warn!("leader election is off: run exactly one replica");
        return (Leadership::always(), tokio::spawn(async {}));
    }
    let (leadership, grant) = Grant::new();
    let elector = Elector {
        api: Api::namespaced(client.clone(), &config.namespace),
        config: config.clone(),
        grant,
        observed: crate::core::sighting::Sightings::default(),
        instance: format!("{:016x}", fastrand::u64(..)),
    };
    let run = elector.run(shutdown.clone());
    (leadership, super::supervise::essential("lease election", &shutdown, run))
}

struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    grant: Grant,
    /// The other holder's Lease as last seen, and when this replica first saw it so: another
    /// holder's Lease has expired when it has not changed for its duration by *this* clock.
    observed: crate::core::sighting::Sightings,
    /// This process, in [`INSTANCE_ANNOTATION`].
    instance: String,
}

impl Elector {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let sent = crate::index::clock::now();
            let was = *self.grant.tx.borrow();
            let outcome = self.try_acquire_or_renew(sent).await;
            self.grant.tell(); // a deadline that passed while the request ran
            let leading = self.grant.leadership().is_leader();
            if leading != was {
                tracing::info!(lease = %self.config.name, identity = %self.config.identity, leading, "leadership changed");
            }
            if let Err(error) = outcome {
                tracing::warn!(lease = %self.config.name, %error, "lease request failed");
            }
            let wait = if leading { self.config.renew_every() } else { self.config.look_every() };
            // While leading, also wake at the deadline, so the channel says when it passed.
            let deadline = self.grant.leadership().deadline().filter(|_| leading);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = sleep_until(deadline) => {}
                // What the Lease says changed (a member ready for buckets, or leaving): at once.
                () = changed(self.config.annotations.as_mut()), if leading => {}
            }
        }
        self.release().await;
    }

    /// One round: create the Lease, renew it, take it over once released or expired, or follow.
    async fn try_acquire_or_renew(&mut self, sent: Instant) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta { name: Some(self.config.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.spec(now(), 0)),
            };
            self.annotate(&mut lease.metadata);
            return self.write(sent, self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if self.ours(&lease) {
            let mut renewed = spec;
            renewed.renew_time = Some(now());
            renewed.lease_duration_seconds = Some(self.duration_seconds());
            lease.spec = Some(renewed);
            self.annotate(&mut lease.metadata);
            return self.write(sent, self.api.replace(&self.config.name, &PostParams::default(), &lease).await);
        }
        // A Lease naming this replica that another process wrote: its predecessor's, just killed,
        // say. Two looks longer than anyone else's, so that the other replicas, who saw its last
        // renewal first, count it gone first (a sharing producer's buckets are then taken over
        // by them, not left to wait for this one to settle).
        let own_name = holder.as_deref() == Some(self.config.identity.as_str());
        let longer = if own_name { 2 * self.config.look_every() } else { Duration::ZERO };
        if holder.is_some() && !self.expired(&lease, &spec, longer) {
            if own_name && self.grant.leadership().is_leader() {
                tracing::warn!(lease = %self.config.name, "another process of this name wrote the lease; not leading");
            }
            self.grant.until(None);
            return Ok(());
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + 1;
        lease.spec = Some(self.spec(now(), transitions));
        self.annotate(&mut lease.metadata);
        tracing::info!(lease = %self.config.name, previous = ?holder, "taking over the lease");
        self.write(sent, self.api.replace(&self.config.name, &PostParams::default(), &lease).await)
    }

    /// Does the Lease name this replica, written by this process?
    fn ours(&self, lease: &Lease) -> bool {
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
        holder == Some(self.config.identity.as_str())
            && lease.metadata.annotations.as_ref().and_then(|a| a.get(INSTANCE_ANNOTATION)) == Some(&self.instance)
    }

    /// Has the other holder's Lease gone unrenewed for its duration (and `longer`), by this
    /// replica's clock?
    fn expired(&mut self, lease: &Lease, spec: &LeaseSpec, longer: Duration) -> bool {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let sighting = self.observed.look(&self.config.name, &version, crate::index::clock::now());
        let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
        sighting.unchanged > duration + longer
    }

    /// A create or replace answered: on success this replica leads until `sent` + duration −
    /// margin; a conflict means another replica wrote first, so this one follows.
    fn write(&mut self, sent: Instant, result: Result<Lease, kube::Error>) -> Result<(), kube::Error> {
        match result {
            Ok(lease) => {
                self.grant.until(Some(sent + self.config.duration - self.config.margin()));
                self.grant.leadership.tenure.lock().renewed = lease.metadata.resource_version.map(|v| (v, sent));
                self.observed = crate::core::sighting::Sightings::default();
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.grant.until(None);
                Ok(())
            }
            // Anything else: the deadline stands, and runs out unless a later renewal succeeds.
            Err(error) => Err(error),
        }
    }

    /// Hand the Lease back on a clean stop, so a follower takes over at its next look, not after
    /// the whole duration.
    async fn release(&mut self) {
        let was_leader = self.grant.leadership().is_leader();
        self.grant.until(None);
        if !was_leader {
            return;
        }
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else { return };
        if !self.ours(&lease) {
            return;
        }
        let mut spec = lease.spec.clone().unwrap_or_default();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(lease = %self.config.name, "released the lease"),
            Err(error) => tracing::warn!(lease = %self.config.name, %error, "could not release the lease; it expires"),
        }
    }

    /// The configured annotations as they are now, over what the Lease had.
    fn annotate(&mut self, meta: &mut ObjectMeta) {
        let written = meta.annotations.get_or_insert_default();
        if let Some(annotations) = &mut self.config.annotations {
            written.extend(annotations.borrow_and_update().clone());
        }
        written.insert(INSTANCE_ANNOTATION.to_owned(), self.instance.clone());
    }

    fn spec(&self, at: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.duration_seconds()),
            acquire_time: Some(at.clone()),
            renew_time: Some(at),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// Once `annotations` change; never without them.
async fn changed(annotations: Option<&mut watch::Receiver<BTreeMap<String, String>>>) {
    let Some(annotations) = annotations else { return std::future::pending().await };
    if annotations.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline passes by itself: no renewal, no leading, whatever the elector is doing (a
    /// paused process, a renewal stuck on a dead connection). On a paused clock: no sleeping.
    #[tokio::test(start_paused = true)]
    async fn leading_ends_at_the_deadline_without_a_renewal() {
        let (leader, grant) = Grant::new();
        assert!(!leader.is_leader(), "not before a grant");
        grant.until(Some(crate::index::clock::now() + std::time::Duration::from_secs(10)));
        assert!(leader.is_leader() && *leader.changes().borrow());
        tokio::time::sleep(std::time::Duration::from_millis(9_999)).await;
        assert!(leader.is_leader(), "still inside the deadline");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        assert!(!leader.is_leader(), "past it");
        assert!(grant.tell(), "and the channel is told when asked");
        assert!(!*leader.changes().borrow());
    }

    /// Whatever was taken before a lapse is known not to hold after it: leading again is a new
    /// tenure; a renewal inside the deadline is the same one.
    #[tokio::test(start_paused = true)]
    async fn leading_again_after_a_lapse_is_a_new_tenure() {
        let (leader, grant) = Grant::new();
        assert_eq!(leader.tenure(), None);
        let later = |s| crate::index::clock::now() + Duration::from_secs(s);
        grant.until(Some(later(10)));
        let first = leader.tenure().expect("leading");
        grant.until(Some(later(10)));
        assert_eq!(leader.tenure(), Some(first), "renewed in time: the same tenure");
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(leader.tenure(), None, "lapsed");
        grant.until(Some(later(10)));
        assert!(leader.tenure().is_some_and(|t| t != first), "a new tenure after the lapse");
    }
}
