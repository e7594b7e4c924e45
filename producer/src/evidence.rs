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
//!   named an address that served, after a hand edit, a failed write, a replica not leading).
//!
//! - and, right before the DELETE, the project answers a read now ([`Gate::confirm`]): a project
//!   cut off silently looks whole in memory until its watches time out.
//!
//! Otherwise the copy waits, and N is looked at again every [`RECHECK`] (every
//! [`RECHECK_UNWATCHED`] while nobody watches its project). A copy whose project is not engaged,
//! or whose labelled project has no namespace of that UID (a project named otherwise, or one
//! not engaged), waits for as long as that lasts, counted by reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegate::core::plan::Deletion;
use edgegate::core::record::Record;
use edgegate::core::unwritten::Unwritten;
use edgegate::index::Change;
use edgegate::index::hub::HubView;
use edgegate::index::project::ProjectIndex;
use edgegate::runtime::clock;
use edgegate::runtime::wakeups::Later;
use edgegate_pruner::gate::Gate;
use parking_lot::Mutex;

use crate::producer::{Projects, find_by_uid, labelled_project};
use edgegate::core::project::NamespaceMeta;

/// The engaged projects' clients, by name.
pub type Clients = Arc<parking_lot::RwLock<HashMap<String, kube::Client>>>;

/// How often a namespace whose deletions wait is looked at again.
pub const RECHECK: Duration = Duration::from_secs(2);

/// How often, while no engaged project owns the namespace (that changes with an engagement,
/// rarely).
pub const RECHECK_UNWATCHED: Duration = Duration::from_secs(30);

/// How long a live look at the project may take before the copy is kept.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

/// A namespace not asked about for this long waits no more (its copies went, or were named).
const FORGOTTEN: Duration = Duration::from_secs(75);

/// Why a due copy is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Held {
    /// No engaged project owns its hub namespace: nobody watches what it serves.
    Unwatched,
    /// Its project (or the hub) has not been whole for long enough, or the namespace holds an
    /// object that cannot be decoded.
    Incomplete,
    /// Its record's last write failed, or its answer was too large to write.
    Unwritten,
    /// The project serves one of its addresses now: the record is about to name it again.
    Served,
}

impl Held {
    pub const ALL: [Held; 4] = [Held::Unwatched, Held::Incomplete, Held::Unwritten, Held::Served];

    pub fn label(self) -> &'static str {
        match self {
            Held::Unwatched => "unwatched",
            Held::Incomplete => "incomplete",
            Held::Unwritten => "unwritten",
            Held::Served => "served",
        }
    }
}

struct Waiting {
    since: Instant,
    last: Instant,
    why: Held,
    /// Not yet said in the log.
    fresh: bool,
}

/// What the producer's writes remember, shared with the evidence (the producer's fields of the
/// same names).
#[derive(Clone)]
pub struct Memory {
    pub unwritten: Arc<Mutex<Unwritten>>,
    /// Every answer seen, for `--withdraw-after` + `--grace` ([`crate::producer::Producer::served`]).
    pub served: Arc<Mutex<Unwritten>>,
    pub failing: Arc<Mutex<HashMap<String, u32>>>,
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
    pub again: Later<Change>,
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Evidence {
    pub fn new(
        view: Arc<HubView>,
        projects: Projects,
        clients: Clients,
        memory: Memory,
        whole_for: Duration,
        again: Later<Change>,
    ) -> Self {
        Evidence { view, projects, clients, memory, whole_for, again, waiting: Mutex::default() }
    }

    /// Why the copy must be kept now, if it must.
    pub fn judge(&self, deletion: &Deletion, now: Instant) -> Option<Held> {
        let hub_ns = deletion.namespace.as_str();
        let Some((_, index, namespace)) = self.owner(hub_ns) else {
            // Its labelled project, engaged but not listed whole, may just not know it yet.
            let listing = labelled_project(&self.view, &self.projects, hub_ns)
                .and_then(|name| self.projects.read().get(&name).map(|index| !index.synced()))
                .unwrap_or(false);
            return Some(if listing { Held::Incomplete } else { Held::Unwatched });
        };
        let whole = |for_: Option<Duration>| for_.is_some_and(|f| f >= self.whole_for);
        if !self.view.synced() || !whole(index.whole_for(now)) {
            return Some(Held::Incomplete);
        }
        if index.undecodable_in(&namespace) {
            return Some(Held::Incomplete);
        }
        if self.memory.failing.lock().contains_key(hub_ns) {
            return Some(Held::Unwritten);
        }
        let mut serving = self.memory.unwritten.lock().recent(hub_ns, now);
        serving.extend(self.memory.served.lock().recent(hub_ns, now));
        serving.extend(index.reachable(&namespace).addresses);
        let serving = Record::from_entries(serving.iter().map(String::as_str));
        if deletion.addresses.iter().any(|a| serving.names(a)) {
            return Some(Held::Served);
        }
        None
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
            tracing::warn!(
                hub_namespace = hub_ns,
                project = name,
                other = found,
                "the hub namespace's project label names another project than the one with its namespace; its copies are kept"
            );
            return None;
        }
        Some((found, index, namespace))
    }

    /// Hub namespaces whose deletions wait now, by why.
    pub fn held(&self) -> HashMap<Held, usize> {
        let now = clock::now();
        let mut counts = HashMap::new();
        for waiting in self.waiting.lock().values().filter(|w| now.saturating_duration_since(w.last) < FORGOTTEN) {
            *counts.entry(waiting.why).or_default() += 1;
        }
        counts
    }
}

impl Gate for Evidence {
    fn allows(&self, deletion: &Deletion, _due: Instant, now: Instant) -> bool {
        let mut waiting = self.waiting.lock();
        match self.judge(deletion, now) {
            None => {
                waiting.remove(&deletion.namespace);
                true
            }
            Some(why) => {
                let before = waiting.get(&deletion.namespace).map(|w| (w.since, w.why));
                if why == Held::Unwatched && before.is_none_or(|(_, was)| was != why) {
                    tracing::warn!(hub_namespace = %deletion.namespace, "no engaged project owns this hub namespace; its copies are kept");
                }
                let since = before.map_or(now, |(since, _)| since);
                let fresh = before.is_none_or(|(_, was)| was != why);
                waiting.insert(deletion.namespace.clone(), Waiting { since, last: now, why, fresh });
                false
            }
        }
    }

    fn wait(&self, namespace: &str) -> bool {
        let now = clock::now();
        let mut waiting = self.waiting.lock();
        let entry = waiting.get_mut(namespace);
        let unwatched = entry.as_ref().is_some_and(|w| w.why == Held::Unwatched);
        let first = entry.is_some_and(|w| std::mem::take(&mut w.fresh));
        drop(waiting);
        let recheck = if unwatched { RECHECK_UNWATCHED } else { RECHECK };
        self.again.at(Change::Namespace(namespace.to_owned()), now + recheck);
        first
    }

    fn held_for(&self) -> Duration {
        let now = clock::now();
        let mut waiting = self.waiting.lock();
        // Namespaces not asked about for a while wait no more (their copies went, or were named).
        waiting.retain(|_, w| now.saturating_duration_since(w.last) < FORGOTTEN);
        waiting.values().map(|w| now.saturating_duration_since(w.since)).max().unwrap_or_default()
    }

    fn confirm(&self, deletion: &Deletion) -> futures::future::BoxFuture<'static, bool> {
        let client = self.owner(&deletion.namespace).and_then(|(name, _, _)| self.clients.read().get(&name).cloned());
        let hub_ns = deletion.namespace.clone();
        Box::pin(async move {
            let Some(client) = client else { return false };
            let namespaces: kube::Api<NamespaceMeta> = kube::Api::all(client);
            let params = kube::api::ListParams::default().limit(1);
            match tokio::time::timeout(CONFIRM_WITHIN, namespaces.list_metadata(&params)).await {
                Ok(Ok(_)) => true,
                Ok(Err(error)) => {
                    tracing::warn!(hub_namespace = %hub_ns, %error, "the copy's project did not answer a read; kept");
                    false
                }
                Err(_) => {
                    tracing::warn!(hub_namespace = %hub_ns, "the copy's project did not answer a read within 5 s; kept");
                    false
                }
            }
        })
    }
}
