//! The writer: for one project namespace, the core's answer compared with the hub's record, and
//! a server-side apply only when they differ and nothing forbids it (not leading, a partial view,
//! no hub namespace, an answer too large, another field manager). Addresses the answer lacks
//! leave the record only once it has lacked them for `--withdraw-after`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegate::core::crd::MAX_RECORD_ADDRESSES;
use edgegate::core::hold::Hold;
use edgegate::core::plan::Scope;
use edgegate::core::write;
use edgegate::index::Change;
use edgegate::index::clock;
use edgegate::index::dirty::Dirty;
use edgegate::index::hub::{HubRecord, HubView, KEPT_ANNOTATION};
use edgegate::index::project::ProjectIndex;
use edgegate::runtime::lease::Leadership;
use edgegate::runtime::prune::parts::Parts;
use edgegate::runtime::queue::{self, Outcome, RETRY_FIRST, WorkQueue};
use edgegate::runtime::shard::Ownership;
use edgegate::runtime::wakeups::{Wakeup, Wakeups};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::memory::Memory;
use crate::metrics::Metrics;
use crate::outcome::{Refusal, Written};
use crate::projects::{Projects, find_by_uid, labelled_project};

/// A restore of served addresses after a field manager's conflict: whose, and on what.
struct Restore<'a> {
    project: &'a str,
    hub_ns: &'a str,
    /// The resourceVersion of the record the answer was compared with.
    based_on: Option<&'a str>,
    /// What the answer serves.
    serves: &'a [String],
    /// The producer's own withdrawals under way (held since an earlier look): its addresses,
    /// not the other writer's.
    withdrawing: &'a [String],
}

/// Addresses the answer lacks, held until lacked for `--withdraw-after`.
#[derive(Default)]
struct Withdrawing {
    /// Still held (in the record until due).
    held: Vec<String>,
    /// Those of them held since before this look.
    before: Vec<String>,
}

/// How a restore ended.
enum Restored {
    /// The record names every address the answer serves: the conflict is the other writer's.
    NotNeeded,
    /// Written, with this many addresses, this many of them kept for the other writer.
    Written {
        after: usize,
        kept: usize,
    },
    Failed,
}

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "edgegate-producer";

/// What made a recompute necessary.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Trigger {
    /// Something in one project changed (a namespace, or everything after a re-list).
    Project(String, Change),
    /// A hub namespace appeared or its record was deleted, or the hub was re-listed.
    Hub(Change),
}

/// An address a record names and the answer lacks: (hub namespace, address).
type Withdrawal = (String, String);

pub struct Producer {
    pub hub: Client,
    pub view: Arc<HubView>,
    pub projects: Projects,
    pub force_ownership: bool,
    /// Addresses the answer lacks, held in the record until lacked for `--withdraw-after`.
    pub withdrawals: Mutex<Hold<Withdrawal>>,
    /// What the writes remember beyond the record, shared with the in-process pruner's evidence.
    pub memory: Memory,
    /// The hub namespaces to write, now or at a later instant (a held address falls due), each
    /// by one worker at a time; a failed write comes back after its own backoff.
    pub queue: WorkQueue<String>,
    /// Whether this replica may write now.
    pub leader: Leadership,
    /// Sharing (`--shard`): which projects' records this replica may write, besides `leader`
    /// (then its member Lease's deadline).
    pub owner: Option<Ownership>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Hub namespaces whose project label names another project than the one writing them.
    pub mismatched: Mutex<std::collections::BTreeSet<String>>,
    /// Paces record writes, `--max-writes-per-second`.
    pub pacer: Option<edgegate::index::pace::Pacer>,
}

impl Producer {
    fn projects(&self) -> Vec<(String, Arc<ProjectIndex>)> {
        let projects = self.projects.read();
        projects.iter().map(|(n, p)| (n.clone(), Arc::clone(p))).collect()
    }

    /// Derive one project namespace and write its record if, and only if, that is safe and needed.
    #[tracing::instrument(name = "record", skip(self, index))]
    pub async fn write(&self, project: &str, index: &ProjectIndex, namespace: &str) -> Written {
        let Some(uid) = index.uid(namespace) else { return Written::Skipped };
        let hub_ns = format!("ns-{uid}");
        if !self.may_write(project) || !index.synced() || !self.view.synced() {
            // Nothing observed now: a withdrawal's run must not span the gap (the answer may
            // have named the address again meanwhile, unseen); it starts again at the next look.
            self.withdrawals.lock().end(&hub_ns, |_| true);
            if index.synced() {
                // The project is seen, only nothing can be written: what serves meanwhile is
                // named by the first write after, even if it has stopped serving by then.
                let answer = index.reachable(namespace).addresses;
                self.memory.unwritten.lock().observe(&hub_ns, &answer, clock::now());
                self.memory.served.lock().observe(&hub_ns, &answer, clock::now());
            }
            return Written::Skipped;
        }
        if index.undecodable_in(namespace) || self.view.undecodable(&hub_ns) {
            // An object there, or the record on the hub, cannot be decoded: what the answer or
            // the record holds is unknown, so the record stays as it is (and withdraws nothing)
            // until it is deleted or decodes. What serves meanwhile is named by the first write
            // after, as when nothing can be written.
            self.withdrawals.lock().end(&hub_ns, |_| true);
            let answer = index.reachable(namespace).addresses;
            self.memory.unwritten.lock().observe(&hub_ns, &answer, clock::now());
            self.memory.served.lock().observe(&hub_ns, &answer, clock::now());
            tracing::debug!(
                project,
                namespace,
                hub_namespace = hub_ns,
                "an object or the record cannot be decoded; record left as it is"
            );
            return Written::Skipped;
        }
        if !self.view.has_namespace(&hub_ns) {
            tracing::debug!(project, namespace, hub_namespace = hub_ns, "no hub namespace yet; nothing written");
            return Written::NoHubNamespace;
        }
        self.check_label(project, namespace, &hub_ns);
        let started = Instant::now();
        let recent = self.memory.unwritten.lock().recent(&hub_ns, clock::now());
        // The record as read now: the answer is compared with it, and the write is based on its
        // version, whatever the watch brings meanwhile.
        let read = self.view.record(&hub_ns);
        let current = read.as_ref().map(|r| r.addresses.as_slice());
        // With --force-ownership the producer owns the whole list: nothing is kept for others.
        let kept = read.as_ref().filter(|_| !self.force_ownership).map(HubRecord::still_kept).unwrap_or_default();
        let changed = index.changed_answer(namespace, current);
        self.metrics.recompute(started.elapsed());
        let answer = match changed {
            Some(answer) => answer,
            None if recent.is_empty() => {
                // The answer is the record's addresses.
                self.memory.served.lock().observe(&hub_ns, current.unwrap_or_default(), clock::now());
                self.hold_withdrawals(&hub_ns, Vec::new());
                return Written::Unchanged;
            }
            None => index.reachable(namespace),
        };
        self.memory.served.lock().observe(&hub_ns, &answer.addresses, clock::now());
        for (service, why) in &answer.bad_selectors {
            tracing::warn!(
                project,
                namespace,
                service,
                why,
                "NetworkService selector cannot be evaluated; it contributes nothing"
            );
        }
        let serves = answer.addresses;
        let withdrawing = self.hold_withdrawals(&hub_ns, write::lacking(current, &recent, &serves, &kept));
        let addresses = match write::plan(&serves, current, &kept, &withdrawing.held) {
            write::Write::Addresses(addresses) => addresses,
            write::Write::Unchanged => {
                self.memory.unwritten.lock().written(&hub_ns);
                return Written::Unchanged; // what changed is only held withdrawals
            }
            write::Write::Oversized(count) => {
                let message = format!(
                    "{project}/{namespace} serves {count} addresses, more than the {MAX_RECORD_ADDRESSES} a record holds; the record is left as it is",
                );
                tracing::error!(project, namespace, hub_namespace = hub_ns, count, "answer too large; not written");
                self.warn(&hub_ns, "RecordOversized", message).await;
                return Written::Oversized;
            }
        };
        let withdrawing = withdrawing.before;
        // Writes are paced for the whole process (a catch-up after a hub restart, a thousand
        // projects engaged at once); the turn may be a wait.
        if let Some(pacer) = &self.pacer {
            pacer.turn().await;
        }
        let based_on = read.as_ref().and_then(|r| r.version.clone());
        let record = HubRecord { addresses, version: None, kept };
        if self.view.version(&hub_ns) != based_on {
            // Changed while the write waited its turn: compared again with what is there now.
            self.memory.unwritten.lock().observe(&hub_ns, &record.addresses, clock::now());
            self.queue.add(hub_ns.clone());
            return Written::Skipped;
        }
        // Right before the write: leadership is a deadline that passes on its own.
        let Some(applied) =
            self.apply_as_writer(project, &hub_ns, based_on.as_deref(), &record, self.force_ownership).await
        else {
            return Written::Skipped;
        };
        let refused = match applied {
            Ok(version) => {
                let before = current.map_or_else(|| "none".to_owned(), |b| b.len().to_string());
                tracing::info!(
                    project,
                    namespace,
                    hub_namespace = hub_ns,
                    before,
                    after = record.addresses.len(),
                    "record written"
                );
                self.metrics.addresses(record.addresses.len());
                self.view.wrote(&hub_ns, based_on.as_deref(), HubRecord { version, ..record });
                self.memory.unwritten.lock().written(&hub_ns);
                return Written::Applied;
            }
            Err(kube::Error::Api(status)) => status,
            Err(error) => {
                tracing::warn!(project, namespace, hub_namespace = hub_ns, %error, "writing the record failed; the next recompute retries");
                return Written::Error;
            }
        };
        match Refusal::of(&refused) {
            Refusal::Stale => {
                // The record changed since it was seen: its watch event brings the namespace
                // round again, and what serves meanwhile is named by the write after it.
                tracing::debug!(
                    project,
                    namespace,
                    hub_namespace = hub_ns,
                    "the record changed since it was read; not overwritten"
                );
                self.memory.unwritten.lock().observe(&hub_ns, &record.addresses, clock::now());
                // The watch brings the newer record, but a change of its metadata alone asks for
                // no recompute: looked at again shortly either way.
                self.queue.add_at(hub_ns.clone(), clock::now() + RETRY_FIRST);
                Written::Skipped
            }
            Refusal::FieldManagers => {
                let restore = Restore {
                    project,
                    hub_ns: &hub_ns,
                    based_on: based_on.as_deref(),
                    serves: &serves,
                    withdrawing: &withdrawing,
                };
                match self.restore_served(&restore, read.unwrap_or_default(), &record).await {
                    Restored::NotNeeded => {}
                    // The record still lacks served addresses: that is no current record.
                    Restored::Failed => return Written::Error,
                    Restored::Written { after, kept } => {
                        tracing::warn!(
                            project,
                            namespace,
                            hub_namespace = hub_ns,
                            message = refused.message,
                            after,
                            kept,
                            "another field manager removed served addresses from the record; put back, and what it alone added is kept beside them until it or an operator removes it"
                        );
                        let message = format!(
                            "edgegate-producer put back the addresses {project}/{namespace} serves that another writer removed; the {kept} addresses only that writer named stay in the record (annotation {KEPT_ANNOTATION}) until it or an operator removes them: {}",
                            refused.message
                        );
                        self.warn(&hub_ns, "RecordRestored", message).await;
                        return Written::Applied;
                    }
                }
                tracing::warn!(
                    project,
                    namespace,
                    hub_namespace = hub_ns,
                    message = refused.message,
                    "another field manager owns the record's addresses; left alone (--force-ownership takes them over)"
                );
                let message =
                    format!("edgegate-producer did not write {project}/{namespace}'s answer: {}", refused.message);
                self.warn(&hub_ns, "RecordConflict", message).await;
                Written::Conflict
            }
            Refusal::Other => {
                tracing::warn!(
                    project,
                    namespace,
                    hub_namespace = hub_ns,
                    code = refused.code,
                    reason = refused.reason,
                    message = refused.message,
                    "the hub refused the record; tried again after a backoff"
                );
                Written::Error
            }
        }
    }

    /// Does the hub namespace's project label name this project? The evidence for its copies
    /// goes by the label: one that names another project (a kubeconfig file named otherwise than
    /// the project) keeps them for ever. Said once per hub namespace, and counted.
    fn check_label(&self, project: &str, namespace: &str, hub_ns: &str) {
        let Some(label) = self.view.upstream_cluster(hub_ns) else { return };
        let agrees = label == edgegate::core::project::cluster_label(project);
        let mut mismatched = self.mismatched.lock();
        if agrees {
            mismatched.remove(hub_ns);
        } else if mismatched.insert(hub_ns.to_owned()) {
            tracing::warn!(
                project,
                namespace,
                hub_namespace = hub_ns,
                label,
                "the hub namespace's project label names another project: name the project as the label does (its kubeconfig file, or Milo's Project), or its copies are never deleted"
            );
        }
        self.metrics.set_mismatched(mismatched.len());
    }

    /// [`apply`](Self::apply), if this replica may write `project`'s records now (`None` if
    /// not). Sharing, the bucket is not handed over while the write is under way, and the write
    /// ends by the member Lease's deadline.
    async fn apply_as_writer(
        &self,
        project: &str,
        hub_ns: &str,
        based_on: Option<&str>,
        record: &HubRecord,
        force: bool,
    ) -> Option<Result<Option<String>, kube::Error>> {
        if !self.may_write(project) {
            return None;
        }
        let apply = self.apply(hub_ns, based_on, record, force);
        let Some(owner) = &self.owner else { return Some(apply.await) };
        let (_writing, left) = owner.writing(project)?;
        let ended = tokio::time::timeout(left, apply).await;
        Some(ended.unwrap_or_else(|_| Err(kube::Error::Service("the write outlasted this replica's lease".into()))))
    }

    /// Server-side apply of the record's addresses (and what it keeps for another writer).
    /// With the resourceVersion of the record the answer was compared with, where there is one:
    /// a record changed since (another writer, another replica that took the project over) is
    /// not overwritten, the write is refused (409) and made again once the watch shows the
    /// change. Returns the resourceVersion the write made.
    async fn apply(
        &self,
        hub_ns: &str,
        based_on: Option<&str>,
        record: &HubRecord,
        force: bool,
    ) -> Result<Option<String>, kube::Error> {
        let mut metadata = json!({"name": self.view.record_name(), "namespace": hub_ns});
        // Broken on purpose (`--test-only-break-the-fence`): writes carry no resourceVersion either.
        let unfenced = self.owner.as_ref().is_some_and(Ownership::unfenced);
        if let Some(version) = based_on.filter(|_| !unfenced) {
            metadata["resourceVersion"] = json!(version);
        }
        if !record.kept.is_empty() {
            metadata["annotations"] = json!({KEPT_ANNOTATION: record.kept.join(",")});
        }
        let body = json!({
            "apiVersion": "networking.datumapis.com/v1alpha",
            "kind": "EdgeReachability",
            "metadata": metadata,
            "spec": {"addresses": record.addresses},
        });
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = force;
        let api: Api<edgegate::EdgeReachability> = Api::namespaced(self.hub.clone(), hub_ns);
        api.patch(self.view.record_name(), &params, &Patch::Apply(&body))
            .await
            .map(|r| kube::ResourceExt::resource_version(&r))
    }

    /// After a field manager's conflict: if the record lacks addresses the answer serves
    /// (someone else removed them, by hand or by tool), take the field over and write what it
    /// holds plus those. A record that names too few addresses withdraws pods that serve, once
    /// the pruner's grace has passed; one that names too many costs a table entry, so nothing it
    /// holds is dropped. Without `--force-ownership`, what only the other writer named is kept
    /// (annotated, and written beside the answer from then on): edgegate cannot know it is not
    /// served (that writer may read a backend edgegate does not), so taking it away later would
    /// be a withdrawal on no evidence.
    async fn restore_served(&self, restore: &Restore<'_>, read: HubRecord, wanted: &HubRecord) -> Restored {
        if restore.serves.iter().all(|a| read.addresses.contains(a)) {
            return Restored::NotNeeded;
        }
        let mut kept: BTreeSet<String> = wanted.kept.iter().cloned().collect();
        if !self.force_ownership {
            let theirs = |a: &&String| !restore.serves.contains(a) && !restore.withdrawing.contains(a);
            kept.extend(read.addresses.iter().filter(theirs).cloned());
        }
        let mut union: Vec<String> = read
            .addresses
            .into_iter()
            .chain(wanted.addresses.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if union.len() > MAX_RECORD_ADDRESSES {
            // What the answer serves, then what is kept and held, come first; the rest would not
            // fit.
            union.clone_from(&wanted.addresses);
            kept.retain(|a| union.contains(a));
        }
        let record = HubRecord { addresses: union, version: None, kept: kept.into_iter().collect() };
        let Some(applied) =
            self.apply_as_writer(restore.project, restore.hub_ns, restore.based_on, &record, true).await
        else {
            return Restored::Failed;
        };
        let version = match applied {
            Ok(version) => version,
            Err(error) => {
                tracing::warn!(hub_namespace = restore.hub_ns, %error, "putting served addresses back failed; the next recompute retries");
                return Restored::Failed;
            }
        };
        let (after, kept) = (record.addresses.len(), record.kept.len());
        self.metrics.addresses(after);
        self.view.wrote(restore.hub_ns, restore.based_on, HubRecord { version, ..record });
        Restored::Written { after, kept }
    }

    /// Observe which of the record's addresses the answer lacks now; returns those still held,
    /// and which of them were held before this look.
    /// The namespace comes round again when the first address held falls due.
    fn hold_withdrawals(&self, hub_ns: &str, lacking: Vec<String>) -> Withdrawing {
        let (observed, next_due) = {
            let mut hold = self.withdrawals.lock();
            if lacking.is_empty() && hold.is_empty() {
                return Withdrawing::default();
            }
            let scope = Scope::Namespace(hub_ns.to_owned());
            let observed = hold.observe(clock::now(), &scope, lacking.into_iter().map(|a| (hub_ns.to_owned(), a)));
            let next_due = observed.held.iter().filter_map(|key| hold.due_at(key)).min();
            (observed, next_due)
        };
        if !observed.started.is_empty() {
            tracing::info!(
                hub_namespace = hub_ns,
                addresses = observed.started.len(),
                "answer lacks addresses; they leave the record once --withdraw-after has passed"
            );
        }
        // The namespace comes round again when its first held address falls due; that pass asks
        // again for the next (one queued instant per namespace: the earliest).
        if let Some(due_at) = next_due {
            self.queue.add_at(hub_ns.to_owned(), due_at);
        }
        let started: BTreeSet<&String> = observed.started.iter().map(|((_, a), _)| a).collect();
        let before = observed.held.iter().map(|(_, a)| a).filter(|a| !started.contains(a)).cloned().collect();
        Withdrawing { held: observed.held.into_iter().map(|(_, a)| a).collect(), before }
    }

    /// A Warning Event on the namespace's record.
    async fn warn(&self, hub_ns: &str, reason: &str, note: String) {
        let record = edgegate::EdgeReachability::reference(hub_ns, self.view.record_name());
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Write".into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &record).await {
            tracing::warn!(%error, namespace = hub_ns, "could not record the event");
        }
    }

    /// Every (project, namespace) a trigger asks to recompute.
    fn targets(&self, trigger: &Trigger) -> Vec<(String, Arc<ProjectIndex>, String)> {
        let projects = self.projects();
        let all = |(name, index): &(String, Arc<ProjectIndex>)| {
            index.namespaces().into_iter().map(|(ns, _)| (name.clone(), Arc::clone(index), ns)).collect::<Vec<_>>()
        };
        match trigger {
            Trigger::Project(project, Change::Namespace(ns)) => projects
                .iter()
                .filter(|(name, _)| name == project)
                .map(|(name, index)| (name.clone(), Arc::clone(index), ns.clone()))
                .collect(),
            Trigger::Project(project, Change::All) => {
                projects.iter().filter(|(n, _)| n == project).flat_map(all).collect()
            }
            Trigger::Hub(Change::Namespace(hub_ns)) => {
                let Some(uid) = hub_ns.strip_prefix("ns-") else { return Vec::new() };
                let hint = labelled_project(&self.view, &self.projects, hub_ns);
                find_by_uid(&self.projects, uid, hint.as_deref()).into_iter().collect()
            }
            Trigger::Hub(Change::All) => projects.iter().flat_map(all).collect(),
        }
    }

    /// The hub namespaces `trigger` asks to write: the keys of the work queue.
    fn keys(&self, trigger: &Trigger) -> Vec<String> {
        if let Trigger::Hub(Change::Namespace(hub_ns)) = trigger {
            return vec![hub_ns.clone()];
        }
        let targets = self.targets(trigger).into_iter();
        targets.filter_map(|(_, index, ns)| index.uid(&ns).map(|uid| format!("ns-{uid}"))).collect()
    }

    /// Withdrawals and notes held for hub namespaces no engaged project has any more (a project
    /// namespace deleted, a project disengaged) are over: nothing will look at them again.
    fn forget_gone(&self) {
        let live: BTreeSet<String> = self
            .projects()
            .iter()
            .flat_map(|(_, index)| index.namespaces().into_iter().map(|(_, uid)| format!("ns-{uid}")))
            .collect();
        self.withdrawals.lock().end_namespaces(|ns| !live.contains(ns));
        self.memory.retain(|ns| live.contains(ns));
        self.mismatched.lock().retain(|ns| live.contains(ns));
    }

    /// Write one hub namespace's record, from the engaged project namespace it is of (found now,
    /// by its UID): `None` if no engaged project has it.
    pub async fn write_namespace(&self, hub_ns: &str) -> Option<Written> {
        let uid = hub_ns.strip_prefix("ns-")?;
        let hint = labelled_project(&self.view, &self.projects, hub_ns);
        let (project, index, ns) = find_by_uid(&self.projects, uid, hint.as_deref())?;
        let written = self.write(&project, &index, &ns).await;
        self.note_failure(&index, &ns, written);
        if written != Written::Skipped {
            self.metrics.write(written.label());
        }
        Some(written)
    }

    /// Write what `triggers` ask for, each namespace once, one after another: what the workers
    /// do, in the order asked (the mock suites state each write's outcome so).
    pub async fn pass(&self, triggers: &[Trigger]) -> Vec<Written> {
        self.set_state();
        if triggers.contains(&Trigger::Hub(Change::All)) {
            self.forget_gone();
        }
        let mut seen = BTreeSet::new();
        let mut outcomes = Vec::new();
        for key in triggers.iter().flat_map(|t| self.keys(t)) {
            if seen.insert(key.clone()) {
                outcomes.extend(self.write_namespace(&key).await);
            }
        }
        outcomes
    }

    /// After a write of `namespace`'s record: one that failed, or an answer too large to write,
    /// leaves its hub namespace failing (and what the answer names now is named by the next write,
    /// as when nothing could be written); a record written or already right clears it.
    fn note_failure(&self, index: &ProjectIndex, namespace: &str, written: Written) {
        let Some(uid) = index.uid(namespace) else { return };
        let hub_ns = format!("ns-{uid}");
        match written {
            Written::Error | Written::Oversized => {
                {
                    let mut failing = self.memory.failing.lock();
                    let failures = failing.entry(hub_ns.clone()).or_default();
                    *failures = failures.saturating_add(1);
                }
                let answer = index.reachable(namespace).addresses;
                self.memory.unwritten.lock().observe(&hub_ns, &answer, clock::now());
                // An oversized answer is written again when it changes (its events); a failed
                // write is retried, this namespace alone, after its backoff (the work queue's).
            }
            Written::Applied | Written::Unchanged => {
                self.memory.failing.lock().remove(&hub_ns);
            }
            // Not written, and not a failure of the write: the record stays as it was, and so does
            // whether its last write failed.
            Written::NoHubNamespace | Written::Conflict | Written::Skipped => {}
        }
    }

    /// May this replica write `project`'s records now? Asked right before each write: a lease
    /// deadline passes on its own.
    fn may_write(&self, project: &str) -> bool {
        self.leader.is_leader() && self.owner.as_ref().is_none_or(|o| o.holds(project))
    }

    pub fn set_state(&self) {
        let projects: Vec<(String, bool)> = self.projects().into_iter().map(|(n, p)| (n, p.synced())).collect();
        self.metrics.set_state(self.leader.is_leader(), &projects);
    }

    /// Until `shutdown`: each trigger's hub namespaces queued (every one on each resync tick and
    /// whenever this replica becomes leader), and written by `workers` workers, a namespace by
    /// one at a time. With `pruning`, each namespace's copies are passed over right after its
    /// write, under the same key (never at once with it), and its own changes queue it too. At
    /// shutdown no deletion starts any more, and the writes and deletions sent complete (for 2 s
    /// at most) before the Lease is handed over.
    pub async fn run(
        self,
        triggers: Dirty<Trigger>,
        pruning: Option<Parts>,
        resync: Duration,
        workers: u16,
        shutdown: CancellationToken,
    ) {
        // Sharing, a bucket taken is what leading is otherwise: its projects are written at once.
        let became = self.owner.as_ref().map_or_else(|| self.leader.changes(), Ownership::taken);
        let mut wakeups = Wakeups::new(triggers, resync, became);
        let (pruner, prune_changes) = match pruning {
            Some(Parts { pruner, changes }) => (Some(pruner), Some(changes)),
            None => (None, None),
        };
        let feed = async {
            while let Some(wakeup) = wakeups.next(&shutdown).await {
                let (triggers, resyncing) = match wakeup {
                    Wakeup::Changes(triggers) => (triggers, false),
                    Wakeup::Everything => (vec![Trigger::Hub(Change::All)], false),
                    Wakeup::Resync => (vec![Trigger::Hub(Change::All)], true),
                };
                if triggers.contains(&Trigger::Hub(Change::All)) {
                    self.set_state();
                    self.forget_gone();
                }
                // The pruner reads the records from the same view: what changed there (a
                // namespace's record, or every one after a re-list) is its to pass over too.
                let hub = triggers.iter().filter_map(|t| if let Trigger::Hub(c) = t { Some(c.clone()) } else { None });
                let pruned =
                    pruner.as_ref().map(|p| hub.flat_map(|c| p.keys(c)).collect::<Vec<_>>()).unwrap_or_default();
                let keys: std::collections::BTreeSet<String> =
                    triggers.iter().flat_map(|t| self.keys(t)).chain(pruned).collect();
                if resyncing {
                    self.queue.spread(keys, resync);
                } else {
                    for key in keys {
                        self.queue.add(key);
                    }
                }
            }
        };
        let prune_feed = async {
            if let (Some(pruner), Some(changes)) = (&pruner, prune_changes) {
                pruner.feed(changes, resync, &shutdown).await;
            }
        };
        let (this, pruner) = (&self, pruner.as_ref());
        let work = move |hub_ns: String| async move {
            let written = match this.write_namespace(&hub_ns).await {
                Some(Written::Error) => Outcome::Retry,
                // Nothing could be done now (not leading, a view not whole, a stale refusal): a
                // failure after it waits on from where the last one left off.
                Some(Written::Skipped) => Outcome::NotWorked,
                _ => Outcome::Done,
            };
            let pruned = match pruner {
                Some(pruner) => pruner.prune(hub_ns).await,
                None => Outcome::Done,
            };
            if pruned == Outcome::Retry { pruned } else { written }
        };
        let work = queue::work(self.queue.clone(), usize::from(workers), shutdown.clone(), work);
        let stopped = async {
            shutdown.cancelled().await;
            if let Some(pruner) = pruner {
                pruner.pacer.close();
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        tokio::select! {
            _ = async { tokio::join!(feed, prune_feed, work) } => {}
            () = stopped => {}
        }
    }
}
