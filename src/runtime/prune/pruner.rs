//! The controller: each namespace whose record or copies changed is a key of a work queue, and
//! every namespace with copies is on each resync; a worker's pass over one namespace plans with
//! the core, holds each planned deletion until its copy has been unnamed for the grace, and
//! deletes what is due, paced for the whole process, with preconditions, and only while this
//! replica leads and both caches are whole. A namespace is passed over by one worker at a time;
//! one whose DELETEs hang holds up no other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::hold::Hold;
use crate::core::plan::{Deletion, Scope, deletion};
use crate::core::record::{Record, RecordState};
use crate::core::verdict::{Facts, Keep, Verdict, verdict};
use crate::index::Change;
use crate::index::clock;
use crate::index::copies::CopyIndex;
use crate::index::dirty::Dirty;
use crate::index::pace::{Pacer, Turn};
use crate::index::prune::plan;
use crate::runtime::lease::Leadership;
use crate::runtime::queue::{self, WorkQueue};
use crate::runtime::wakeups::{Wakeup, Wakeups};
use crate::{CopySelector, EdgeReachability, RecordSource, Slice};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::runtime::prune::gate::Gate;
use crate::runtime::prune::metrics::Metrics;

/// Deletions (each a DELETE and its Event) a pass has in flight at once.
const IN_FLIGHT: usize = 8;

/// The longest a pass waits for its deletions' pacer turns, from its start; a turn further off
/// brings the namespace round again then. So a large withdrawal holds its worker for about a
/// second at a time, not for as long as the pace takes to get through it (the producer's record
/// writes wait for the same workers), and every due copy is judged in every pass.
const TURN_WAIT: Duration = Duration::from_secs(1);

/// A held deletion: the copy by namespace, name and uid (a copy re-created is a new one).
pub type CopyKey = (String, String, Option<String>);

/// The grace's runs, shared by the passes and the record watch.
pub type Grace = Arc<Mutex<Hold<CopyKey>>>;

/// What the record watch tells the grace: a record that names one of a held copy's addresses,
/// even for a moment between two passes, ends that copy's run; so does a record that could not
/// be decoded (what it named then is unknown), for every copy in its namespace.
pub fn named_again(grace: Grace, copies: Arc<CopyIndex>) -> crate::index::source::kubernetes::RecordObserver {
    Box::new(move |namespace, record| {
        let mut grace = grace.lock();
        if grace.is_empty() {
            return;
        }
        grace.end(namespace, |(ns, name, _)| {
            record.is_none_or(|record| copies.get(ns, name).is_some_and(|c| c.addresses().any(|a| record.names(a))))
        });
    })
}

/// The instant each namespace's first held copy falls due.
fn first_due_by_namespace(grace: &Hold<CopyKey>, held: &[CopyKey]) -> std::collections::HashMap<String, Instant> {
    let mut first = std::collections::HashMap::<String, Instant>::new();
    for key in held {
        if let Some(due_at) = grace.due_at(key) {
            first.entry(key.0.clone()).and_modify(|at| *at = (*at).min(due_at)).or_insert(due_at);
        }
    }
    first
}

/// Everything a pass needs.
pub struct Pruner {
    pub client: Client,
    /// The records: its own watch's, or the producer's view of the hub when it prunes.
    pub records: Arc<dyn RecordSource>,
    pub copies: Arc<CopyIndex>,
    pub selector: CopySelector,
    pub dry_run: bool,
    /// Paces deletions, `--max-deletes-per-second`.
    pub pacer: Pacer,
    /// How long a copy must have been unnamed, without a break, before it is deleted (`--grace`).
    pub grace: Grace,
    /// The namespaces to pass over, now or at a later instant (a held copy falls due), each by
    /// one worker at a time; one whose deletions failed comes back after its own backoff.
    pub queue: WorkQueue<String>,
    /// Evidence a due copy's record is a withdrawal ([`crate::gate`]): the producer's own view
    /// of the copy's project, when it prunes (`edgegate-producer --prune`).
    pub gate: Option<Arc<dyn Gate>>,
    /// Whether this replica may delete now.
    pub leader: Leadership,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
}

/// How one deletion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Deleted,
    /// 404: already gone.
    Gone,
    /// 409: changed or re-created since it was judged; the next pass judges it afresh.
    Changed,
    DryRun,
    /// Not attempted: the lease was lost, a cache went unsynced, or the record changed since.
    Skipped,
    Error,
    /// Its pacer turn comes more than [`TURN_WAIT`] after its pass began: its namespace is passed
    /// over again then.
    /// Not a result (not counted): it is judged again in that pass.
    Deferred,
}

impl Outcome {
    /// Every outcome of a DELETE the pruner decided on.
    pub const ALL: [Outcome; 6] =
        [Outcome::Deleted, Outcome::Gone, Outcome::Changed, Outcome::DryRun, Outcome::Skipped, Outcome::Error];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Deleted => "deleted",
            Outcome::Gone => "gone",
            Outcome::Changed => "changed",
            Outcome::DryRun => "dry_run",
            Outcome::Skipped => "skipped",
            Outcome::Error => "error",
            Outcome::Deferred => "deferred",
        }
    }
}

impl Pruner {
    /// May this replica delete now? Asked again right before each DELETE: leadership is a
    /// deadline that passes on its own when renewals stop.
    fn may_delete(&self) -> bool {
        self.leader.is_leader() && self.records.synced() && self.copies.synced()
    }

    /// One pass over `scope`. Returns how each deletion that was due ended, in plan order; a
    /// planned deletion still inside its grace is held (not in the result) and its namespace is
    /// passed over again when the grace ends.
    ///
    /// Deletions start at the pace (`--max-deletes-per-second`) and up to [`IN_FLIGHT`] run at
    /// once, so the rate a pass reaches is the pace, not one API round trip (delete and event)
    /// after another.
    #[tracing::instrument(skip(self))]
    pub async fn pass(&self, scope: &Scope) -> Vec<Outcome> {
        use futures::StreamExt;
        let started = Instant::now();
        // The state gauges are brought up to date at each scrape (parts::Admin::refresh): a
        // pass is one namespace now, and counting every copy in every pass would make a resync
        // over N namespaces cost N².
        if !self.may_delete() {
            // Nothing observed now: runs must not span the gap (the record may name a copy again
            // meanwhile, unseen), so each starts again once this replica looks again.
            self.grace.lock().end_namespaces(|_| true);
            tracing::debug!(?scope, "pass skipped: not leading, or caches not whole");
            return Vec::new();
        }
        let planned = plan(self.records.as_ref(), &self.copies, &self.selector, scope);
        self.metrics.deletions_by(crate::runtime::prune::metrics::TERMINATING, planned.terminating as u64);
        let due = self.due(scope, planned.deletions);
        let turns_by = clock::now() + TURN_WAIT;
        let outcomes = futures::stream::iter(due)
            .map(|planned| async move {
                let outcome = self.carry_out(&planned, turns_by).await;
                if outcome != Outcome::Deferred {
                    self.metrics.deletion(outcome.label());
                }
                outcome
            })
            .buffered(IN_FLIGHT)
            .collect()
            .await;
        self.metrics.pass(started.elapsed());
        outcomes
    }

    /// The planned deletions whose copies have been unnamed for the whole grace. Copies in scope
    /// that are not planned any more (named again, gone, record deleted) end their runs; each
    /// namespace with a held copy is passed over again when the first of them falls due.
    fn due(&self, scope: &Scope, planned: Vec<Deletion>) -> Vec<Deletion> {
        let key = |d: &Deletion| (d.namespace.clone(), d.name.clone(), d.uid.clone());
        let (observed, next_due) = {
            let mut grace = self.grace.lock();
            let observed = grace.observe(clock::now(), scope, planned.iter().map(key));
            let next_due = first_due_by_namespace(&grace, &observed.held);
            (observed, next_due)
        };
        if !observed.held.is_empty() {
            tracing::debug!(held = observed.held.len(), "copies unnamed, inside their grace");
        }
        for ((ns, name, _), _) in &observed.started {
            tracing::info!(namespace = %ns, name = %name, "record names none of the copy's addresses; deleting it once the grace ends");
        }
        // Each namespace is passed over again when its first held copy falls due; that pass asks
        // again for the next (one queued instant per namespace: the earliest).
        for (ns, due_at) in next_due {
            self.queue.add_at(ns, due_at);
        }
        let due: std::collections::HashSet<CopyKey> = observed.due.into_iter().collect();
        planned.into_iter().filter(|d| due.contains(&key(d))).collect()
    }

    /// The planned deletion as it stands now, if it still stands: the lease, the caches and the
    /// record may all have changed since the pass was planned, and only the copy as it is now,
    /// under the record as it is now, may be deleted. The facts are gathered here; the verdict
    /// is the core's.
    fn judge_again(&self, planned: &Deletion) -> Option<Deletion> {
        let (ns, name) = (&planned.namespace, &planned.name);
        // The record may have named the copy again, and dropped it again, while this deletion
        // waited its turn: the watch then ended its run.
        let key = (ns.clone(), name.clone(), planned.uid.clone());
        let (due, due_at) = {
            let grace = self.grace.lock();
            (grace.is_due(&key, clock::now()), grace.due_at(&key))
        };
        let current = self.copies.get(ns, name);
        let now = current.as_ref().and_then(|c| deletion(&self.records.lookup(ns), c, &self.selector));
        let facts = Facts { may_delete: self.may_delete(), due, present: current.is_some(), unnamed: now.is_some() };
        // The evidence judges the copy as it is now (its addresses may have changed since it was
        // planned), the one the DELETE's preconditions name.
        // With a zero grace nothing is held, so nothing has a due instant: due now. Never skip the
        // gate for want of one.
        let doubt = || {
            let (gate, now) = (self.gate.as_ref()?, now.as_ref()?);
            gate.doubt(now, due_at.unwrap_or_else(clock::now), clock::now())
        };
        match verdict(&facts, doubt) {
            Verdict::Delete => return now,
            Verdict::Keep(Keep::NotDue) => {
                tracing::info!(namespace = %ns, name = %name, "record named the copy again meanwhile; kept");
            }
            Verdict::Keep(Keep::Named) => tracing::info!(namespace = %ns, name = %name, "copy is served again; kept"),
            Verdict::Keep(Keep::Doubt(_)) => {
                if self.gate.as_ref().is_some_and(|gate| gate.wait(ns)) {
                    tracing::info!(namespace = %ns, name = %name, "due; waiting for evidence that its record is current");
                }
            }
            Verdict::Keep(Keep::NotNow | Keep::Gone) => {}
        }
        None
    }

    /// Judge the copy again as it is now, wait for its turn, judge once more, then delete it
    /// with preconditions.
    #[tracing::instrument(name = "copy", skip_all, fields(namespace = %planned.namespace, name = %planned.name))]
    async fn carry_out(&self, planned: &Deletion, turns_by: Instant) -> Outcome {
        let Some(now) = self.judge_again(planned) else { return Outcome::Skipped };
        if self.dry_run {
            let (ns, name, addresses) = (&now.namespace, &now.name, &now.addresses);
            tracing::info!(namespace = %ns, name = %name, ?addresses, "dry run: would delete copy the record no longer names");
            return Outcome::DryRun;
        }
        match self.pacer.turn_within(turns_by.saturating_duration_since(clock::now())).await {
            Turn::Taken => {}
            Turn::Closed => return Outcome::Skipped, // shutting down
            Turn::At(at) => {
                self.queue.add_at(now.namespace.clone(), at);
                return Outcome::Deferred;
            }
        }
        // The evidence confirmed live (a project cut off silently still looks whole in memory),
        // before the record's read and the last judgement: nothing but the DELETE comes after.
        if let Some(gate) = &self.gate
            && !gate.confirm(&now).await
        {
            gate.wait(&now.namespace);
            return Outcome::Skipped;
        }
        match self.unnamed_as_read(&now).await {
            Ok(true) => {}
            Ok(false) => return Outcome::Skipped,
            Err(()) => return Outcome::Error,
        }
        // The turn and the read may have been long waits (a hub restarting holds the read for
        // seconds, while the project may serve the address again): judged last, in memory.
        let Some(now) = self.judge_again(&now) else { return Outcome::Skipped };
        // Leadership again, and the gate's word that the copy is still this replica's to delete
        // (a shared producer's bucket may have moved): the read may have taken a while.
        if !self.may_delete() || self.gate.as_ref().is_some_and(|g| !g.still_ours(&now)) {
            return Outcome::Skipped;
        }
        let (ns, name, addresses) = (&now.namespace, &now.name, &now.addresses);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: now.uid.clone(), resource_version: now.resource_version.clone() }),
            ..DeleteParams::default()
        };
        let api: Api<Slice> = Api::namespaced(self.client.clone(), ns);
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::info!(namespace = %ns, name = %name, ?addresses, "deleted copy: its record names none of its addresses");
                // Gone from the index now, not when the watch says so: a pass planned before
                // then must not delete it again. A finalizer keeps it; the watch brings it back
                // as terminating.
                self.copies.forget(ns, name, now.resource_version.as_deref());
                self.grace.lock().forget(&(ns.clone(), name.clone(), now.uid.clone()));
                self.record_event(&now).await;
                Outcome::Deleted
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Outcome::Gone,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!(namespace = %ns, name = %name, "copy changed since judged; left for the next pass");
                Outcome::Changed
            }
            Err(error) => {
                tracing::warn!(namespace = %ns, name = %name, %error, "deleting copy failed; the next pass retries");
                Outcome::Error
            }
        }
    }

    /// Does the record, read now, still name none of the copy's addresses? The last look before
    /// every DELETE: the watch may trail the hub. A failed read keeps the copy and is
    /// an error (`Err`): a read that is always refused (RBAC) must raise the deletions-failing
    /// alert, not pass for a copy judged again.
    async fn unnamed_as_read(&self, planned: &Deletion) -> Result<bool, ()> {
        let api: Api<EdgeReachability> = Api::namespaced(self.client.clone(), &planned.namespace);
        let state = match api.get_opt(self.records.record_name()).await {
            Ok(Some(record)) => {
                RecordState::Present(Arc::new(Record::from_entries(record.entries().iter().map(String::as_str))))
            }
            Ok(None) => RecordState::Absent,
            Err(error) => {
                tracing::warn!(namespace = %planned.namespace, name = %planned.name, %error, "reading the record before deleting failed; kept");
                return Err(());
            }
        };
        let Some(copy) = self.copies.get(&planned.namespace, &planned.name) else { return Ok(false) };
        let unnamed = deletion(&state, &copy, &self.selector).is_some();
        if !unnamed {
            tracing::info!(namespace = %planned.namespace, name = %planned.name, "the record names the copy again (read before deleting); kept");
        }
        Ok(unnamed)
    }

    /// A Kubernetes Event on the record, naming the copy deleted.
    async fn record_event(&self, deleted: &Deletion) {
        let record = EdgeReachability::reference(&deleted.namespace, self.records.record_name());
        let copy = ObjectReference {
            api_version: Some("discovery.k8s.io/v1".into()),
            kind: Some("EndpointSlice".into()),
            namespace: Some(deleted.namespace.clone()),
            name: Some(deleted.name.clone()),
            uid: deleted.uid.clone(),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Normal,
            reason: "CopyDeleted".into(),
            note: Some(format!(
                "deleted EndpointSlice {}: the record names none of its addresses ({})",
                deleted.name,
                deleted.addresses.join(", ")
            )),
            action: "Delete".into(),
            secondary: Some(copy),
        };
        if let Err(error) = self.recorder.publish(&event, &record).await {
            tracing::warn!(%error, namespace = %deleted.namespace, "could not record the deletion event");
        }
    }

    /// The namespaces a change asks to pass over: its own, or (everything re-listed) every one
    /// with copies or with copies held in the grace.
    pub fn keys(&self, change: Change) -> Vec<String> {
        match change {
            Change::Namespace(ns) => vec![ns],
            Change::All => {
                let mut all: std::collections::BTreeSet<String> = self.copies.namespaces().into_iter().collect();
                all.extend(self.grace.lock().namespaces());
                all.into_iter().collect()
            }
        }
    }

    /// One pass over `namespace`, as the queue's worker: a deletion that failed brings it back
    /// after its backoff.
    pub async fn prune(&self, namespace: String) -> queue::Outcome {
        let outcomes = self.pass(&Scope::Namespace(namespace)).await;
        if outcomes.contains(&Outcome::Error) { queue::Outcome::Retry } else { queue::Outcome::Done }
    }

    /// Queue the keys each wakeup asks for: each marked change's, every namespace's on each
    /// resync tick and whenever this replica becomes leader. Until `shutdown`.
    pub async fn feed(&self, changes: Dirty<Change>, resync: Duration, shutdown: &CancellationToken) {
        let mut wakeups = Wakeups::new(changes, resync, self.leader.changes());
        while let Some(wakeup) = wakeups.next(shutdown).await {
            match wakeup {
                Wakeup::Changes(changes) => {
                    for key in changes.into_iter().flat_map(|c| self.keys(c)) {
                        self.queue.add(key);
                    }
                }
                Wakeup::Everything => {
                    for key in self.keys(Change::All) {
                        self.queue.add(key);
                    }
                }
                Wakeup::Resync => self.queue.spread(self.keys(Change::All), resync),
            }
        }
    }

    /// Until `shutdown`: the namespaces the changes and ticks ask for, passed over by `workers`
    /// workers, a namespace by one at a time. At shutdown no deletion starts any more, and those
    /// sent may finish for up to [`DRAIN`] while this replica still holds the Lease; only then is
    /// it released.
    pub async fn run(self, changes: Dirty<Change>, resync: Duration, workers: u16, shutdown: CancellationToken) {
        let this = &self;
        let work = queue::work(self.queue.clone(), usize::from(workers), shutdown.clone(), move |ns| this.prune(ns));
        let stopped = async {
            shutdown.cancelled().await;
            self.pacer.close();
            tokio::time::sleep(DRAIN).await;
        };
        tokio::select! {
            _ = async { tokio::join!(self.feed(changes, resync, &shutdown), work) } => {}
            () = stopped => {}
        }
    }
}

/// How long the pass at hand may go on after SIGTERM: the DELETEs it has sent complete before the
/// Lease is handed over.
pub const DRAIN: Duration = Duration::from_secs(2);
