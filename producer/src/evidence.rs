//! The evidence `edgegate-producer --prune` gives its own pruner, per project and from memory: a
//! copy in hub namespace N is deleted only on the word of N's project. A project that cannot be
//! read holds its own copies and nobody else's.
//!
//! N belongs to the project its `meta.datumapis.com/upstream-cluster-name` label names (other
//! controllers set it when they create N), or, unlabelled, to the engaged project with a
//! namespace whose UID N is named after. The copy may go when, besides its record having named
//! none of its addresses for the grace (the pruner's own rule):
//! - that project is engaged and has been whole (every watch listed, none failed since) for at
//!   least `--withdraw-after` + `--grace`, and the hub view is synced: anything that served in
//!   the grace was seen, written (or kept as unwritten, below), and held in the record for
//!   `--withdraw-after`;
//! - N's last write did not fail and its answer was not too large to write (the record would
//!   then lack what serves);
//! - nothing in that project namespace fails to decode;
//! - no answer of the project's seen within `--withdraw-after` + `--grace` named any of the
//!   copy's addresses, nor does its answer now (whatever the record says: a record may not have
//!   named an address that served, after a hand edit, a failed write, a replica not leading);
//!   the answers seen are the writes' and, after every watch event, the project index's own
//!   ([`ProjectIndex::remembering`]): the writes coalesce, so a state that lasted less than one
//!   recompute is seen only there.
//!
//! - and, before the DELETE, the project has answered a read within [`ANSWERED_WITHIN`]
//!   ([`Gate::confirm`]): a project cut off silently looks whole in memory until its watches time
//!   out. The read is made at most once at a time per project, and waited for only
//!   [`CONFIRM_WAIT`]: a project that does not answer holds its own copies (for
//!   [`UNANSWERED_FOR`] after a read failed), never the pruner's passes over other projects'.
//!
//! Otherwise the copy waits, and N is looked at again every [`RECHECK`] (every
//! [`RECHECK_UNWATCHED`] while nobody watches its project). A copy whose project is not engaged,
//! or whose labelled project has no namespace of that UID (a project named otherwise, or one
//! not engaged), waits for as long as that lasts, counted by reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engaged::Engaged;
use edgegate::core::plan::Deletion;
use edgegate::core::record::Record;
use edgegate::core::verdict::{self, Doubt, Owner, Watched};
use edgegate::index::clock;
use edgegate::index::hub::HubView;
use edgegate::index::project::ProjectIndex;
use edgegate::runtime::prune::gate::Gate;
use edgegate::runtime::queue::WorkQueue;
use edgegate::runtime::shard::Ownership;
use parking_lot::Mutex;

use crate::memory::Memory;
use crate::projects::{Projects, find_by_uid, labelled_project};
use edgegate::core::project::NamespaceMeta;

/// The engaged projects' clients, by name.
pub type Clients = Arc<parking_lot::RwLock<HashMap<String, kube::Client>>>;

/// How often a namespace whose deletions wait is looked at again.
pub const RECHECK: Duration = Duration::from_secs(2);

/// How often, while no engaged project owns the namespace (that changes with an engagement,
/// rarely).
pub const RECHECK_UNWATCHED: Duration = Duration::from_secs(30);

/// How long a live look at the project may take before it counts as failed.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

/// How long a pass waits for a live look before keeping the copy (the look goes on, and the
/// namespace is looked at again in [`RECHECK`]).
pub const CONFIRM_WAIT: Duration = Duration::from_millis(500);

/// How recent an answer of the project's vouches for it.
pub const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

/// How long after a failed look the project's copies are kept without looking again.
pub const UNANSWERED_FOR: Duration = Duration::from_secs(30);

/// Each project's last live look: when it last answered, when a look last failed, whether one
/// is under way.
#[derive(Default)]
struct Liveness {
    answered: Option<Instant>,
    failed: Option<Instant>,
    looking: bool,
}

/// A namespace not asked about for this long waits no more (its copies went, or were named).
const FORGOTTEN: Duration = Duration::from_secs(75);

struct Waiting {
    since: Instant,
    last: Instant,
    why: Doubt,
    /// Not yet said in the log.
    fresh: bool,
}

/// `namespace`'s copies wait: `why` (`detail`, said in the log when the reason changes), since
/// when it began (or now).
fn wait_for_evidence(
    waiting: &Mutex<HashMap<String, Waiting>>,
    namespace: &str,
    why: Doubt,
    detail: &str,
    now: Instant,
) {
    let mut waiting = waiting.lock();
    let before = waiting.get(namespace).map(|w| (w.since, w.why));
    let fresh = before.is_none_or(|(_, was)| was != why);
    if fresh && why == Doubt::Unwatched {
        tracing::warn!(hub_namespace = %namespace, "no engaged project owns this hub namespace; its copies are kept");
    } else if fresh && why == Doubt::Elsewhere {
        tracing::debug!(hub_namespace = %namespace, "another replica's project; its copies are that one's to judge");
    } else if fresh {
        tracing::info!(hub_namespace = %namespace, reason = why.label(), detail, "due copies kept meanwhile");
    }
    let since = before.map_or(now, |(since, _)| since);
    waiting.insert(namespace.to_owned(), Waiting { since, last: now, why, fresh });
}

/// The producer's evidence, read by its in-process pruner ([`Gate`]).
pub struct Evidence {
    pub view: Arc<HubView>,
    pub projects: Projects,
    pub clients: Clients,
    pub memory: Memory,
    /// `--withdraw-after` + `--grace`: how long a project must have been whole.
    pub whole_for: Duration,
    /// Where the pruner is asked to pass a namespace over again.
    pub queue: WorkQueue<String>,
    waiting: Arc<Mutex<HashMap<String, Waiting>>>,
    liveness: Arc<Mutex<HashMap<String, Liveness>>>,
    /// Sharing: only the copies of the projects whose buckets this replica holds are its to
    /// delete; every project discovered (offered to this replica, watched here or not).
    owner: Option<(Ownership, Engaged)>,
    /// When `waiting` and `liveness` were last rid of what was forgotten.
    forgotten: Mutex<Option<Instant>>,
}

impl Evidence {
    pub fn new(
        view: Arc<HubView>,
        projects: Projects,
        clients: Clients,
        memory: Memory,
        whole_for: Duration,
        queue: WorkQueue<String>,
    ) -> Self {
        Evidence {
            view,
            projects,
            clients,
            memory,
            whole_for,
            queue,
            waiting: Arc::default(),
            liveness: Arc::default(),
            forgotten: Mutex::default(),
            owner: None,
        }
    }

    /// Sharing: judge only the copies of projects whose buckets `owner` holds, of those
    /// `engaged` discovers.
    pub fn sharing(mut self, owner: Option<Ownership>, engaged: &Engaged) -> Self {
        self.owner = owner.map(|o| (o, engaged.clone()));
        self
    }

    fn holds(&self, project: &str) -> bool {
        self.owner.as_ref().is_none_or(|(o, _)| o.holds(project))
    }

    /// Sharing, a hub namespace no project watched here owns: is it another replica's
    /// ([`another_replicas`])?
    fn elsewhere(&self, hub_ns: &str) -> bool {
        let Some((owner, engaged)) = &self.owner else { return false };
        let label = self.view.upstream_cluster(hub_ns);
        another_replicas(label.as_deref(), |p| owner.holds(p), |p| engaged.is_engaged(p))
    }

    /// Forget namespaces not asked about for [`FORGOTTEN`] (their copies went, or were named) and
    /// projects not looked at for as long (looked at afresh next time), at most once in that
    /// time: the judging path calls it, so neither map grows without a scrape.
    fn forget(&self, now: Instant) {
        {
            let mut last = self.forgotten.lock();
            if last.is_some_and(|at| now.saturating_duration_since(at) < FORGOTTEN) {
                return;
            }
            *last = Some(now);
        }
        self.waiting.lock().retain(|_, w| now.saturating_duration_since(w.last) < FORGOTTEN);
        let recent = |t: Option<Instant>| t.is_some_and(|t| now.saturating_duration_since(t) < FORGOTTEN);
        self.liveness.lock().retain(|_, l| l.looking || recent(l.answered) || recent(l.failed));
    }

    /// Why the copy must be kept now, if it must.
    pub fn judge(&self, deletion: &Deletion, now: Instant) -> Option<Doubt> {
        self.judge_why(deletion, now).map(|(held, _)| held)
    }

    /// [`judge`](Self::judge), and in a few words why (for the log): the facts gathered here,
    /// the verdict the core's.
    fn judge_why(&self, deletion: &Deletion, now: Instant) -> Option<(Doubt, &'static str)> {
        verdict::doubt(&self.facts(deletion, now))
    }

    /// What this replica knows of the project that owns the copy's hub namespace.
    fn facts(&self, deletion: &Deletion, now: Instant) -> Owner {
        let hub_ns = deletion.namespace.as_str();
        let Some((project, index, namespace)) = self.owner(hub_ns) else {
            // Its labelled project, engaged but not listed whole, may just not know it yet.
            let listing = labelled_project(&self.view, &self.projects, hub_ns)
                .and_then(|name| self.projects.read().get(&name).map(|index| !index.synced()))
                .unwrap_or(false);
            return if listing {
                Owner::Listing
            } else if self.elsewhere(hub_ns) {
                Owner::Elsewhere
            } else {
                Owner::Unwatched
            };
        };
        let mut serving = self.memory.unwritten.lock().recent(hub_ns, now);
        serving.extend(self.memory.served.lock().recent(hub_ns, now));
        serving.extend(index.recently_served(&namespace, now));
        serving.extend(index.reachable(&namespace).addresses);
        let serving = Record::from_entries(serving.iter().map(String::as_str));
        Owner::Watched(Watched {
            ours: self.holds(&project),
            hub_synced: self.view.synced(),
            whole_long_enough: index.whole_for(now).is_some_and(|f| f >= self.whole_for),
            answering: !self.unanswered(&project, now),
            decodable: !index.undecodable_in(&namespace),
            unwritten: self.memory.failing.lock().contains_key(hub_ns),
            served: deletion.addresses.iter().any(|a| serving.names(a)),
        })
    }

    /// The project that owns `hub_ns` (its name and index) and its namespace there. `None` when
    /// no engaged project has a namespace of that UID, or the hub namespace's label names another
    /// project than the one that has: what serves there nobody can tell.
    fn owner(&self, hub_ns: &str) -> Option<(String, Arc<ProjectIndex>, String)> {
        let uid = hub_ns.strip_prefix("ns-")?;
        if self.view.upstream_cluster(hub_ns).is_none() {
            return find_by_uid(&self.projects, uid, None);
        }
        // Labelled: that project's word, and only while it is engaged and has the namespace.
        let name = labelled_project(&self.view, &self.projects, hub_ns)?;
        let (found, index, namespace) = find_by_uid(&self.projects, uid, Some(&name))?;
        if found != name {
            // Said once, and counted, where the producer writes (`check_label`); here on every look.
            tracing::debug!(
                hub_namespace = hub_ns,
                project = name,
                other = found,
                "the hub namespace's project label names another project than the one with its namespace; its copies are kept"
            );
            return None;
        }
        Some((found, index, namespace))
    }

    /// Whether `project`'s last live look failed less than [`UNANSWERED_FOR`] ago.
    fn unanswered(&self, project: &str, now: Instant) -> bool {
        let liveness = self.liveness.lock();
        liveness.get(project).and_then(|l| l.failed).is_some_and(|f| now.saturating_duration_since(f) < UNANSWERED_FOR)
    }

    /// Hub namespaces whose deletions wait now, by why.
    pub fn doubts(&self) -> HashMap<Doubt, usize> {
        let now = clock::now();
        let mut counts = HashMap::new();
        for waiting in self.waiting.lock().values().filter(|w| now.saturating_duration_since(w.last) < FORGOTTEN) {
            *counts.entry(waiting.why).or_default() += 1;
        }
        counts
    }
}

impl Gate for Evidence {
    fn doubt(&self, deletion: &Deletion, _due: Instant, now: Instant) -> Option<Doubt> {
        self.forget(now);
        match self.judge_why(deletion, now) {
            None => {
                self.waiting.lock().remove(&deletion.namespace);
                None
            }
            Some((why, detail)) => {
                wait_for_evidence(&self.waiting, &deletion.namespace, why, detail, now);
                Some(why)
            }
        }
    }

    fn wait(&self, namespace: &str) -> bool {
        let now = clock::now();
        let mut waiting = self.waiting.lock();
        let entry = waiting.get_mut(namespace);
        let unwatched = entry.as_ref().is_some_and(|w| matches!(w.why, Doubt::Unwatched | Doubt::Elsewhere));
        let first = entry.is_some_and(|w| std::mem::take(&mut w.fresh));
        drop(waiting);
        let recheck = if unwatched { RECHECK_UNWATCHED } else { RECHECK };
        self.queue.add_at(namespace.to_owned(), now + recheck);
        first
    }

    fn waited_for(&self) -> Duration {
        let now = clock::now();
        self.forget(now);
        let waiting = self.waiting.lock();
        let current = waiting.values().filter(|w| now.saturating_duration_since(w.last) < FORGOTTEN);
        current.map(|w| now.saturating_duration_since(w.since)).max().unwrap_or_default()
    }

    fn still_ours(&self, deletion: &Deletion) -> bool {
        let Some((ownership, _)) = &self.owner else { return true };
        self.owner(&deletion.namespace).is_some_and(|(project, _, _)| ownership.deletes(&project))
    }

    fn confirm(&self, deletion: &Deletion) -> futures::future::BoxFuture<'static, bool> {
        let now = clock::now();
        let owner = self.owner(&deletion.namespace).map(|(name, _, _)| name);
        let client = owner.as_ref().and_then(|name| self.clients.read().get(name).cloned());
        let (Some(project), Some(client)) = (owner, client) else {
            wait_for_evidence(&self.waiting, &deletion.namespace, Doubt::Incomplete, "its project is not engaged", now);
            return Box::pin(std::future::ready(false));
        };
        let look = {
            let mut liveness = self.liveness.lock();
            let state = liveness.entry(project.clone()).or_default();
            if state.answered.is_some_and(|a| now.saturating_duration_since(a) < ANSWERED_WITHIN) {
                return Box::pin(std::future::ready(self.holds(&project)));
            }
            if state.looking {
                None
            } else {
                state.looking = true;
                let look = tokio::spawn(look(project.clone(), client, Arc::clone(&self.liveness)));
                // A project whose last read failed is looked at again without waiting: with
                // many such projects, even 0.5 s each would add up in the passes.
                state.failed.is_none().then_some(look)
            }
        };
        // Unanswered yet, held meanwhile (counted as incomplete): the namespace is looked at
        // again in RECHECK.
        let awaited = "a live read of its project is awaited";
        let Some(look) = look else {
            wait_for_evidence(&self.waiting, &deletion.namespace, Doubt::Incomplete, awaited, now);
            return Box::pin(std::future::ready(false));
        };
        let (waiting, namespace) = (Arc::clone(&self.waiting), deletion.namespace.clone());
        let owner = self.owner.as_ref().map(|(o, _)| o.clone());
        Box::pin(async move {
            let answered = matches!(tokio::time::timeout(CONFIRM_WAIT, look).await, Ok(Ok(true)));
            if !answered {
                wait_for_evidence(&waiting, &namespace, Doubt::Incomplete, awaited, clock::now());
            }
            // Sharing: the bucket may have moved while the read ran.
            answered && owner.is_none_or(|o| o.holds(&project))
        })
    }
}

/// One live look at `project` (a read of one namespace's metadata): its outcome noted in
/// `liveness`, a failure logged once until it answers again.
async fn look(project: String, client: kube::Client, liveness: Arc<Mutex<HashMap<String, Liveness>>>) -> bool {
    /// Whatever ends the look (an answer, a failure, the task aborted), it is no longer under
    /// way: otherwise that project's copies would wait for good.
    struct Done<'a>(&'a str, &'a Mutex<HashMap<String, Liveness>>);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            if let Some(state) = self.1.lock().get_mut(self.0) {
                state.looking = false;
            }
        }
    }
    let _done = Done(&project, &liveness);
    let namespaces: kube::Api<NamespaceMeta> = kube::Api::all(client);
    let params = kube::api::ListParams::default().limit(1);
    let outcome = match tokio::time::timeout(CONFIRM_WITHIN, namespaces.list_metadata(&params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {CONFIRM_WITHIN:?}")),
    };
    let now = clock::now();
    let mut liveness = liveness.lock();
    let state = liveness.entry(project.clone()).or_default();
    match outcome {
        Ok(()) => {
            state.answered = Some(now);
            state.failed = None;
            true
        }
        Err(error) => {
            if state.failed.is_none() {
                tracing::warn!(project, %error, "the project did not answer a read; its copies are kept");
            }
            state.failed = Some(now);
            false
        }
    }
}

/// Sharing, a hub namespace no project watched here owns: another replica's when its label names
/// a project discovered (every replica discovers every project) whose bucket this one does not
/// hold, or when it has no label (whichever replica watches the project with a namespace of that
/// UID judges it). A label naming a project nobody discovered makes it nobody's: unwatched, on
/// every replica, so it is counted and alerted on as it is without sharing.
fn another_replicas(label: Option<&str>, holds: impl Fn(&str) -> bool, discovered: impl Fn(&str) -> bool) -> bool {
    match label {
        Some(label) => label.strip_prefix("cluster-").is_some_and(|p| discovered(p) && !holds(p)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failed on the old rule (every labelled namespace not held here was "elsewhere", so one
    /// whose project no replica discovered was counted unwatched on none).
    #[test]
    fn a_project_nobody_discovered_is_nobodys() {
        let (mine, theirs) = (|p: &str| p == "mine", |p: &str| p == "mine" || p == "theirs");
        assert!(another_replicas(Some("cluster-theirs"), mine, theirs), "discovered, another's bucket");
        assert!(!another_replicas(Some("cluster-mine"), mine, theirs), "held here");
        assert!(!another_replicas(Some("cluster-gone"), mine, theirs), "discovered by nobody: unwatched");
        assert!(!another_replicas(Some("acme"), mine, theirs), "a label of another form: unwatched");
        assert!(another_replicas(None, mine, theirs), "no label: whoever has the namespace's UID");
    }

    fn evidence() -> Evidence {
        let memory = Memory::new(Duration::ZERO, Duration::ZERO);
        let view = Arc::new(HubView::new("default"));
        Evidence::new(view, Arc::default(), Arc::default(), memory, Duration::ZERO, WorkQueue::new())
    }

    fn copy(namespace: String) -> Deletion {
        Deletion { namespace, name: "web".into(), uid: None, resource_version: None, addresses: vec!["fd20::9".into()] }
    }

    /// Namespaces held once and never asked about again are forgotten by the judging itself, with
    /// nothing scraping the metrics (failed on the old code: only a scrape forgot them, so a
    /// producer nobody scraped kept every namespace it ever held).
    #[tokio::test]
    async fn held_namespaces_are_forgotten_without_a_scrape() {
        let evidence = evidence();
        let start = clock::now();
        for n in 0..100 {
            assert!(evidence.doubt(&copy(format!("ns-{n}")), start, start).is_some(), "nobody's: kept");
        }
        assert_eq!(evidence.waiting.lock().len(), 100);
        let later = start + FORGOTTEN + Duration::from_secs(1);
        assert!(evidence.doubt(&copy("ns-new".into()), later, later).is_some());
        assert_eq!(evidence.waiting.lock().len(), 1, "only the namespace just held");
    }
}
