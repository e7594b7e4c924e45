//! Wiring: the hub client and its watches, a client and two to five watches per engaged project,
//! the Lease, the admin listener, signals.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use edgegate::EdgeReachability;
use edgegate::Slice;
use edgegate::core::hold::Hold;
use edgegate::core::project::{HttpProxy, NamespaceMeta, NetworkInterface, NetworkService};
use edgegate::core::shard::{self, Bucket};
use edgegate::index::Change;
use edgegate::index::dirty::Dirty;
use edgegate::index::hub::{HubView, HubWriter};
use edgegate::index::project::{KindWriter, ProjectIndex};
use edgegate::index::source::budget::ListBudget;
use edgegate::index::source::follow::{
    PROJECT_WATCH_TIMEOUT_SECS, WATCH_TIMEOUT_SECS, WatchSink, Whole, follow_within,
};
use edgegate::runtime::admin::Probes;
use edgegate::runtime::controller::Controller;
use edgegate::runtime::lease::Leadership;
use edgegate::runtime::prune::gate::Gate;
use edgegate::runtime::queue::WorkQueue;
use edgegate::runtime::shard::{LEAVING_ANNOTATION, Links, READY_ANNOTATION, ShardConfig, share};
use edgegate::runtime::supervise::essential;
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::args::Args;
use crate::evidence::Evidence;
use crate::metrics::Metrics;
use crate::producer::{Producer, Projects, Trigger};
use edgegate::runtime::prune::parts::Parts;

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Marked by the watch handlers (through `forward`), which never wait: a set of what changed,
    // as large as the distinct changes however many events arrive.
    let triggers = Dirty::default();
    let view = Arc::new(HubView::new(args.record_name.clone()));
    let projects = Projects::default();
    let lease = args.lease.config(&args.lease_name, "edgegate-producer");
    // Sharing: the election is this replica's own member Lease, its ready buckets annotated.
    // From the first write, not a predecessor's (a Lease released while leaving still says so).
    let fresh = [(READY_ANNOTATION, ""), (LEAVING_ANNOTATION, "false")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    let (ready, annotations) = tokio::sync::watch::channel(BTreeMap::from(fresh));
    let sharing = args.shard.then(|| ShardConfig {
        namespace: lease.namespace.clone(),
        identity: lease.identity.clone(),
        duration: lease.duration,
        prefix: args.lease_name.clone(),
        unfenced: args.breaks_the_fence(),
    });
    let election = sharing.as_ref().map_or_else(|| lease.clone(), |s| s.member_lease(annotations));
    let controller = Controller::start(&args.hub, &election).await?;
    let hub = controller.hub.clone();
    let shutdown = &controller.shutdown;
    start_hub_watches(&hub, &view, &triggers, shutdown);
    let mut engaged = Engaged::new(projects, triggers.clone(), shutdown)
        .within(ListBudget::new(usize::from(args.project_lists_in_flight), args.project_lists_per_second));
    let owner = sharing.map(|config| {
        let (engage, buckets) = tokio::sync::watch::channel(BTreeSet::new());
        engaged = engaged.clone().sharing(buckets);
        let warm = engaged.clone();
        let (leave, leaving) = tokio::sync::watch::channel(false);
        let links = Links { ready, engage, warm: Arc::new(move |b| warm.warm(b)), leaving };
        let owner = share(&hub, config, controller.leader.clone(), links, shutdown);
        controller.drain_with(Box::pin(hand_over(owner.clone(), leave)));
        owner
    });
    match (&args.project_kubeconfig, &args.projects_dir, &args.milo_kubeconfig) {
        (Some(file), _, _) => {
            let name = args.project_name.clone().unwrap_or_else(|| stem(file));
            engaged.engage(&name, edgegate::runtime::client::project_client(file).await?);
            engaged.discovered();
        }
        (None, Some(dir), _) => {
            let engaged = engaged.clone();
            let dir = dir.clone();
            essential("projects directory watch", shutdown, async move { follow_projects_dir(&dir, &engaged).await });
        }
        (None, None, Some(milo)) => {
            let clients = edgegate::runtime::client::PathClients::new(Some(milo), None)
                .await
                .with_context(|| format!("Milo's kubeconfig {}", milo.display()))?;
            let engaged = engaged.clone();
            essential("Milo project watch", shutdown, async move {
                if let Err(error) = crate::discovery::follow_milo(clients, engaged).await {
                    tracing::error!(error = format!("{error:#}"), "following Milo's projects");
                }
            });
        }
        (None, None, None) => anyhow::bail!("give --project-kubeconfig, --projects-dir or --milo-kubeconfig"),
    }
    let metrics = Metrics::new().with_hub_token(&args.hub);
    let metrics = Arc::new(if owner.is_some() { metrics.sharded() } else { metrics });
    let recorder = controller.recorder("edgegate-producer");
    let unwritten = Arc::new(Mutex::new(edgegate::core::unwritten::Unwritten::new(args.withdraw_after)));
    let served =
        Arc::new(Mutex::new(edgegate::core::unwritten::Unwritten::new(args.withdraw_after + args.deletion.grace)));
    let failing = Arc::default();
    // The namespaces to write (and, with --prune, to pass over): one key each.
    let queue = WorkQueue::new();
    // With --prune, the pruner runs here, on this Lease and this queue, asking this process's
    // memory.
    let pruning = args.prune.then(|| {
        let memory = crate::evidence::Memory {
            unwritten: Arc::clone(&unwritten),
            served: Arc::clone(&served),
            failing: Arc::clone(&failing),
        };
        let whole_for = args.withdraw_after + args.deletion.grace;
        let (projects, clients) = (Arc::clone(&engaged.projects), Arc::clone(&engaged.clients));
        let evidence = Evidence::new(Arc::clone(&view), projects, clients, memory, whole_for, queue.clone());
        let evidence = Arc::new(evidence.sharing(owner.clone()));
        let metrics = edgegate::runtime::prune::metrics::Metrics::embedded();
        let gate = Some(Arc::clone(&evidence) as Arc<dyn Gate>);
        (Parts::start(&controller, &args.deletion, &args.record_name, metrics, queue.clone(), gate), evidence)
    });
    let producer = Producer {
        hub,
        view: Arc::clone(&view),
        projects: Arc::clone(&engaged.projects),
        force_ownership: args.force_ownership,
        withdrawals: Mutex::new(Hold::new(args.withdraw_after)),
        unwritten,
        served,
        failing,
        queue,
        leader: controller.leader.clone(),
        owner,
        metrics: Arc::clone(&metrics),
        recorder,
        mismatched: Mutex::default(),
        pacer: Some(edgegate::index::pace::Pacer::per_second(args.max_writes_per_second)),
    };
    let (pruner, evidence) = pruning.unzip();
    let admin = Admin {
        view,
        engaged: engaged.clone(),
        metrics,
        leader: controller.leader.clone(),
        owner: producer.owner.clone(),
        queue: producer.queue.clone(),
        pruner: pruner.as_ref().map(Parts::admin),
        evidence,
    };
    controller.serve_admin(args.listen, Arc::new(admin)).await?;
    tracing::info!(withdraw_after = ?args.withdraw_after, prune = args.prune, grace = ?args.deletion.grace, "producing");
    producer.run(triggers, pruner, args.resync, args.workers, controller.shutdown.clone()).await;
    controller.stopped().await;
    Ok(())
}

/// How long a stopping replica hands its buckets over before it stops anyway (the rest go over
/// cold: their owners take them once its member Lease is released, and list them then). Within
/// the Pod's `terminationGracePeriodSeconds` (30 s in components/producer-sharded).
const HAND_OVER_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// SIGTERM, sharing: delete nothing more, say so on the member Lease, and keep writing records
/// until every bucket has been handed to its owner (each once that one has listed its projects),
/// nobody is left to take one (every replica stopping at once: an emergency off, a deletion of
/// the StatefulSet), or [`HAND_OVER_WITHIN`].
async fn hand_over(owner: edgegate::runtime::shard::Ownership, leave: tokio::sync::watch::Sender<bool>) {
    owner.stop_deleting();
    let held = owner.held().len();
    let started = edgegate::index::clock::now();
    leave.send_replace(true);
    tracing::info!(held, "stopping: handing the buckets over");
    loop {
        let left = owner.held().len();
        let took = edgegate::index::clock::since(started);
        if left == 0 || owner.successors() == 0 || took >= HAND_OVER_WITHIN {
            tracing::info!(
                handed = held.saturating_sub(left),
                cold = left,
                ?took,
                "handover ended; the rest go over cold"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "project".to_owned())
}

/// The hub's Namespaces and EdgeReachabilities, into `view`; what appears or goes is a trigger.
pub fn start_hub_watches(hub: &Client, view: &Arc<HubView>, triggers: &Dirty<Trigger>, shutdown: &CancellationToken) {
    let tx = Dirty::default();
    forward(tx.clone(), triggers.clone(), Trigger::Hub, shutdown);
    let namespaces = Whole::new(HubWriter::new(Arc::clone(view), tx.clone()));
    spawn_follow::<NamespaceMeta, _>("hub", Api::all(hub.clone()), namespaces, WATCH_TIMEOUT_SECS, None, shutdown);
    let records = Whole::new(HubWriter::new(Arc::clone(view), tx));
    spawn_follow::<EdgeReachability, _>("hub", Api::all(hub.clone()), records, WATCH_TIMEOUT_SECS, None, shutdown);
}

/// Follow `api` into `sink` for as long as the process runs, or until the handle is aborted: a
/// watch that died would leave its index frozen and still synced, so one that ends stops the
/// process ([`essential`]). `of` names whose watch it is in the logs.
fn spawn_follow<K, S>(
    of: &str,
    api: Api<kube::core::DeserializeGuard<K>>,
    mut sink: S,
    timeout: u32,
    budget: Option<Arc<ListBudget>>,
    shutdown: &CancellationToken,
) -> JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    S: WatchSink<K> + Send + 'static,
{
    let name = format!("{of} {} watch", K::kind(&K::DynamicType::default()));
    let span = tracing::info_span!("watch", of, kind = %K::kind(&K::DynamicType::default()));
    // A streaming list where the API server offers one: one request per (re-)list, not two.
    let config = watcher::Config::default().timeout(timeout).streaming_lists();
    let watch = async move { follow_within(api, config, &mut sink, budget).await };
    essential(name, shutdown, tracing::Instrument::instrument(watch, span))
}

/// Tag each change marked on `from` with `wrap` and mark it on `to`, until `shutdown`.
fn forward(
    from: Dirty<Change>,
    to: Dirty<Trigger>,
    wrap: impl Fn(Change) -> Trigger + Send + 'static,
    shutdown: &CancellationToken,
) {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changes = from.next() => changes.into_iter().for_each(|c| to.mark(wrap(c))),
            }
        }
    });
}

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
        }
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
        let index = Arc::new(ProjectIndex::default());
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
            PROJECT_WATCH_TIMEOUT_SECS,
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

/// Engage a project per kubeconfig in `dir`, and follow the directory: files added, changed or
/// removed engage, re-engage or disengage their project. A file is compared by its content: a
/// kubelet rewrites every file of a Secret volume when any key changes (a project added), and a
/// project whose kubeconfig did not change is not engaged again (its watches listed anew).
async fn follow_projects_dir(dir: &Path, engaged: &Engaged) {
    let mut changes = edgegate::index::fs_watch::DirChanges::new();
    let mut watching = false;
    let mut seen: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    loop {
        watching = watching || changes.watch(dir);
        let files = project_files(dir);
        for (name, path) in &files {
            let Ok(content) = std::fs::read(path) else { continue };
            if seen.get(name).is_some_and(|s| *s == content) {
                continue;
            }
            match edgegate::runtime::client::project_client(path).await {
                Ok(client) => {
                    engaged.engage(name, client);
                    seen.insert(name.clone(), content);
                }
                Err(error) => {
                    tracing::warn!(project = %name, path = %path.display(), error = format!("{error:#}"), "project kubeconfig unusable; not engaged")
                }
            }
        }
        for name in engaged.names() {
            if !files.contains_key(&name) {
                engaged.disengage(&name);
                seen.remove(&name);
            }
        }
        engaged.discovered();
        tokio::select! {
            _ = changes.changed.recv() => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(if watching { 30 } else { 1 })) => {}
        }
    }
}

fn project_files(dir: &Path) -> BTreeMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "kubeconfig" || e == "yaml") && p.is_file())
        .map(|p| (stem(&p), p))
        .collect()
}

struct Admin {
    view: Arc<HubView>,
    engaged: Engaged,
    metrics: Arc<Metrics>,
    leader: Leadership,
    owner: Option<edgegate::runtime::shard::Ownership>,
    queue: WorkQueue<String>,
    /// With --prune: the pruner's readiness and metrics, and why its deletions wait.
    pruner: Option<edgegate::runtime::prune::parts::Admin>,
    evidence: Option<Arc<Evidence>>,
}

impl Probes for Admin {
    /// Ready once the hub side works. A project that cannot be listed does not hold the replica
    /// unready (that would stall every rollout for one bad kubeconfig): its records are left as
    /// they are, and it shows in `edgegate_producer_project_synced{project}` and its alert.
    fn ready(&self) -> Result<(), String> {
        if !self.view.synced() {
            return Err("hub namespaces and records not listed yet".into());
        }
        self.pruner.as_ref().map_or(Ok(()), Probes::ready)
    }

    fn metrics(&self) -> String {
        let projects = self.engaged.projects.read();
        let states: Vec<(String, bool)> = projects.iter().map(|(n, p)| (n.clone(), p.synced())).collect();
        drop(projects);
        self.metrics.set_state(self.leader.is_leader(), &states);
        if let Some(owner) = &self.owner {
            self.metrics.set_shards(owner.held().len(), owner.longest_vacancy());
        }
        self.metrics.set_queue(self.queue.depth(), self.queue.oldest(), self.queue.retries());
        if let Some(evidence) = &self.evidence {
            self.metrics.set_doubts(&evidence.doubts());
        }
        match &self.pruner {
            Some(pruner) => {
                pruner.refresh();
                edgegate::runtime::metrics::encode_all(&[self.metrics.registry(), pruner.registry()])
            }
            None => self.metrics.encode(),
        }
    }
}
