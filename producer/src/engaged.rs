//! The engaged projects: a client and two to five watches each, started when a project is
//! discovered (sharing: once its bucket is this replica's) and stopped when it goes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use edgegate::Slice;
use edgegate::core::project::{HttpProxy, NamespaceMeta, NetworkInterface, NetworkService};
use edgegate::core::shard::{self, Bucket};
use edgegate::index::Change;
use edgegate::index::dirty::Dirty;
use edgegate::index::project::{KindWriter, ProjectIndex};
use edgegate::index::source::budget::ListBudget;
use edgegate::index::source::follow::{Whole, project_watch_timeout};
use edgegate::runtime::supervise::essential;
use kube::{Api, Client};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::producer::Trigger;
use crate::projects::Projects;
use crate::watches::spawn_follow;

/// The engaged projects: their indexes (what the producer reads) and their watch tasks, which run
/// until the project is disengaged (aborted) or the process shuts down.
#[derive(Clone)]
pub struct Engaged {
    pub projects: Projects,
    /// Each engaged project's client, for a live look before a deletion ([`crate::evidence`]).
    pub clients: Arc<parking_lot::RwLock<HashMap<String, Client>>>,
    tasks: Arc<Mutex<HashMap<String, Vec<JoinHandle<()>>>>>,
    triggers: Dirty<Trigger>,
    /// Every project's lists, within one budget.
    budget: Arc<ListBudget>,
    shutdown: CancellationToken,
    /// Sharing (`--shard`): the projects offered, of which only the buckets' told are watched.
    shard: Option<Arc<Offered>>,
    /// With `--prune`: each project's index remembers every answer its events make, for this
    /// long (`--withdraw-after` + `--grace`), for the evidence.
    remember: Option<Duration>,
}

/// Every project discovered, with its client (and which offer of it), and the buckets whose
/// projects this replica watches.
struct Offered {
    clients: Mutex<BTreeMap<String, (Client, u64)>>,
    buckets: tokio::sync::watch::Receiver<BTreeSet<Bucket>>,
    /// Told when `clients` changes.
    nudge: Notify,
    /// Discovery has listed every project once.
    discovered: std::sync::atomic::AtomicBool,
}

impl Engaged {
    pub fn new(projects: Projects, triggers: Dirty<Trigger>, shutdown: &CancellationToken) -> Self {
        Engaged {
            projects,
            clients: Arc::default(),
            tasks: Arc::default(),
            triggers,
            budget: ListBudget::new(usize::MAX >> 4, 0.0),
            shutdown: shutdown.clone(),
            shard: None,
            remember: None,
        }
    }

    /// Each project's index remembers every answer its events make for `window`
    /// ([`ProjectIndex::remembering`]).
    pub fn remembering(mut self, window: Duration) -> Self {
        self.remember = Some(window);
        self
    }

    /// Watch only the projects of `buckets`, as they change: a project offered is started once
    /// its bucket is told, and stopped (its memory returned) once it is no longer. One task
    /// starts and stops them all, so an offer and a withdrawal never race a change of buckets.
    pub fn sharing(mut self, buckets: tokio::sync::watch::Receiver<BTreeSet<Bucket>>) -> Self {
        let offered = Arc::new(Offered {
            clients: Mutex::default(),
            buckets,
            nudge: Notify::new(),
            discovered: Default::default(),
        });
        self.shard = Some(Arc::clone(&offered));
        let engaged = self.clone();
        let mut told = offered.buckets.clone();
        essential("shard engagements", &self.shutdown, async move {
            // Each project watched, with the offer it was started from.
            let mut running: HashMap<String, u64> = HashMap::new();
            loop {
                let nudged = offered.nudge.notified();
                let buckets = told.borrow_and_update().clone();
                let now = offered.clients.lock().clone();
                for (name, offer) in &now {
                    let wanted = buckets.contains(&shard::bucket(name));
                    if wanted && running.get(name) != Some(&offer.1) {
                        engaged.start(name, offer.0.clone());
                        running.insert(name.clone(), offer.1);
                    } else if !wanted && running.remove(name).is_some() {
                        engaged.stop(name);
                    }
                }
                for name in running.keys().filter(|n| !now.contains_key(*n)).cloned().collect::<Vec<_>>() {
                    running.remove(&name);
                    engaged.stop(&name);
                }
                tokio::select! {
                    changed = told.changed() => if changed.is_err() { return },
                    () = nudged => {}
                }
            }
        });
        self
    }

    /// Discovery has listed every project once: until then no bucket is warm (one whose
    /// projects are not known yet would look so).
    pub fn discovered(&self) {
        if let Some(offered) = &self.shard {
            offered.discovered.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Of `buckets`, those whose every offered project is watched and listed.
    pub fn warm(&self, buckets: &BTreeSet<Bucket>) -> BTreeSet<Bucket> {
        let Some(offered) = &self.shard else { return buckets.clone() };
        if !offered.discovered.load(std::sync::atomic::Ordering::Acquire) {
            return BTreeSet::new();
        }
        let mut warm = buckets.clone();
        let names: Vec<String> = offered.clients.lock().keys().cloned().collect();
        let projects = self.projects.read();
        for name in names {
            if !projects.get(&name).is_some_and(|p| p.synced()) {
                warm.remove(&shard::bucket(&name));
            }
        }
        warm
    }

    /// A project discovered: watched now, or (sharing) once its bucket is this replica's.
    pub fn engage(&self, name: &str, client: Client) {
        match &self.shard {
            Some(offered) => {
                let mut clients = offered.clients.lock();
                let generation = clients.get(name).map_or(0, |(_, g)| g + 1);
                clients.insert(name.to_owned(), (client, generation));
                drop(clients);
                offered.nudge.notify_one();
            }
            None => self.start(name, client),
        }
    }

    /// A project gone: its watches stopped; its records stay as they are.
    pub fn disengage(&self, name: &str) {
        match &self.shard {
            Some(offered) => {
                offered.clients.lock().remove(name);
                offered.nudge.notify_one();
            }
            None => self.stop(name),
        }
    }

    /// The projects engaged: discovered (sharing), or watched.
    pub fn names(&self) -> Vec<String> {
        match &self.shard {
            Some(offered) => offered.clients.lock().keys().cloned().collect(),
            None => self.projects.read().keys().cloned().collect(),
        }
    }

    pub fn is_engaged(&self, name: &str) -> bool {
        match &self.shard {
            Some(offered) => offered.clients.lock().contains_key(name),
            None => self.is_watched(name),
        }
    }

    fn is_watched(&self, name: &str) -> bool {
        self.projects.read().contains_key(name)
    }

    /// With every project's lists within `budget`.
    pub fn within(mut self, budget: Arc<ListBudget>) -> Self {
        self.budget = budget;
        self
    }

    /// Start a project's watches (HTTPProxy and Namespace; the kinds its proxies read as they
    /// come to: [`ProjectWatches`]); its namespaces are written once all have listed.
    fn start(&self, name: &str, client: Client) {
        let index = Arc::new(self.remember.map_or_else(ProjectIndex::default, ProjectIndex::remembering));
        // What the project's watches mark changed; its task moves them on.
        let tx = Dirty::default();
        self.clients.write().insert(name.to_owned(), client.clone());
        let mut watches = ProjectWatches {
            always: Vec::new(),
            services: None,
            slices: None,
            decided: false,
            client,
            index: Arc::clone(&index),
            tx,
            of: format!("project {name}"),
            budget: Arc::clone(&self.budget),
            shutdown: self.shutdown.clone(),
        };
        watches.start_always();
        let (project, to) = (name.to_owned(), self.triggers.clone());
        // Each change first starts or stops the watches the proxies now need, then goes on: the
        // task (and with it every watch of the project) runs until the project is disengaged.
        let task = tokio::spawn(async move {
            let changed = watches.tx.clone();
            loop {
                let changes = changed.next().await;
                watches.reconcile().await;
                changes.into_iter().for_each(|c| to.mark(Trigger::Project(project.clone(), c)));
            }
        });
        tracing::info!(project = name, "project engaged");
        self.projects.write().insert(name.to_owned(), index);
        if let Some(old) = self.tasks.lock().insert(name.to_owned(), vec![task]) {
            old.iter().for_each(JoinHandle::abort);
        }
    }

    /// Stop a project's watches; its records stay as they are.
    fn stop(&self, name: &str) {
        self.projects.write().remove(name);
        self.clients.write().remove(name);
        if let Some(tasks) = self.tasks.lock().remove(name) {
            tasks.iter().for_each(JoinHandle::abort);
        }
        tracing::info!(project = name, "project disengaged; its records are left as they are");
    }
}

/// One project's watches: HTTPProxy and Namespace always; NetworkService and NetworkInterface
/// while a proxy has a `networkService` backend, EndpointSlice while one has an `instance` backend
/// (an idle project costs two watches, two sockets). A kind that comes to be needed makes the
/// project not whole until it has listed; one no longer needed is stopped and dropped from the
/// index. Dropped (the project disengaged), every watch stops.
struct ProjectWatches {
    always: Vec<JoinHandle<()>>,
    services: Option<[JoinHandle<()>; 2]>,
    slices: Option<JoinHandle<()>>,
    /// Whether the kinds not needed at the first list have been marked so.
    decided: bool,
    client: Client,
    index: Arc<ProjectIndex>,
    tx: Dirty<Change>,
    of: String,
    budget: Arc<ListBudget>,
    shutdown: CancellationToken,
}

impl ProjectWatches {
    fn watch<K>(&self) -> JoinHandle<()>
    where
        K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
        KindWriter: edgegate::index::source::follow::SnapshotSink<K>,
    {
        let writer = Whole::new(KindWriter::new(Arc::clone(&self.index), self.tx.clone()));
        let budget = Some(Arc::clone(&self.budget));
        spawn_follow::<K, _>(
            &self.of,
            Api::all(self.client.clone()),
            writer,
            project_watch_timeout(),
            budget,
            &self.shutdown,
        )
    }

    fn start_always(&mut self) {
        self.always = vec![self.watch::<HttpProxy>(), self.watch::<NamespaceMeta>()];
    }

    /// Start or stop the kinds the proxies need now (nothing before the proxies have listed). A
    /// watch stopped is awaited before its kind is dropped from the index, so nothing it
    /// delivered comes after; if a proxy needs the kind again meanwhile, it is started again.
    async fn reconcile(&mut self) {
        let Some(needs) = self.index.needs() else { return };
        if needs.services && self.services.is_none() {
            self.start_services();
        } else if !needs.services && (self.services.is_some() || !self.decided) {
            for task in self.services.take().into_iter().flatten() {
                task.abort();
                let _ = task.await;
            }
            let stopped = self.index.stop_watching::<NetworkService>() & self.index.stop_watching::<NetworkInterface>();
            if !stopped {
                self.start_services();
            }
        }
        if needs.slices && self.slices.is_none() {
            self.start_slices();
        } else if !needs.slices && (self.slices.is_some() || !self.decided) {
            if let Some(task) = self.slices.take() {
                task.abort();
                let _ = task.await;
            }
            if !self.index.stop_watching::<Slice>() {
                self.start_slices();
            }
        }
        self.decided = true;
    }

    fn start_services(&mut self) {
        self.index.start_watching::<NetworkService>();
        self.index.start_watching::<NetworkInterface>();
        self.services = Some([self.watch::<NetworkService>(), self.watch::<NetworkInterface>()]);
        tracing::debug!(of = %self.of, "watching NetworkServices and NetworkInterfaces");
    }

    fn start_slices(&mut self) {
        self.index.start_watching::<Slice>();
        self.slices = Some(self.watch::<Slice>());
        tracing::debug!(of = %self.of, "watching EndpointSlices");
    }
}

impl Drop for ProjectWatches {
    fn drop(&mut self) {
        self.always.iter().chain(self.services.iter().flatten()).chain(&self.slices).for_each(JoinHandle::abort);
    }
}
