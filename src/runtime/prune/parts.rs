//! A pruner on a controller's hub and Lease, its watches started: what `edgegate-pruner` runs,
//! and `edgegate-producer --prune` beside its own writes.

use std::sync::Arc;

use crate::core::hold::Hold;
use crate::index::Change;
use crate::index::copies::{CopyIndex, CopyWriter};
use crate::index::dirty::Dirty;
use crate::index::hub::HubView;
use crate::index::pace::Pacer;
use crate::index::source::follow::follow;
use crate::index::source::kubernetes::{OnWatchError, RecordObserver, StoreWriter};
use crate::runtime::admin::Probes;
use crate::runtime::controller::Controller;
use crate::runtime::flags::DeletionArgs;
use crate::runtime::lease::Leadership;
use crate::runtime::queue::WorkQueue;
use crate::runtime::supervise::essential;
use crate::{EdgeReachability, RecordSource, RecordStore, Slice};
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::gate::Gate;
use super::metrics::Metrics;
use super::pruner::{Grace, Pruner, named_again};

/// Where a pruner reads records.
pub enum Records {
    /// From a watch of its own, of the records with this name (`edgegate-pruner`).
    Watch(String),
    /// From the producer's view of the hub (`edgegate-producer --prune`): one record watch and
    /// one record cache per process. Its changes come through the producer's own queue.
    View(Arc<HubView>),
}

/// A pruner on `controller`'s hub and Lease, its watches started: what `edgegate-pruner` runs,
/// and `edgegate-producer --prune` beside its own writes.
pub struct Parts {
    pub pruner: Pruner,
    /// What the watches mark changed: the namespaces to pass over.
    pub changes: Dirty<Change>,
}

impl Parts {
    /// Start the copy watch, the record watch unless `records` is a view already followed (and
    /// the spelling count, with `--exact-spelling`), and make the pruner, working `queue` (the
    /// producer's own, when it prunes: a namespace's write and its pass share one key), deleting
    /// only what `gate` allows besides.
    pub fn start(
        controller: &Controller,
        deletion: &DeletionArgs,
        records: Records,
        mut metrics: Metrics,
        queue: WorkQueue<String>,
        gate: Option<Arc<dyn Gate>>,
    ) -> Parts {
        let changes = Dirty::default();
        let copies = Arc::new(CopyIndex::default());
        let grace: Grace = Arc::new(Mutex::new(Hold::new(deletion.grace)));
        let observer = named_again(Arc::clone(&grace), Arc::clone(&copies));
        let records: Arc<dyn RecordSource> = match records {
            Records::Watch(record_name) => {
                let store = Arc::new(RecordStore::new(record_name));
                watch_records(&controller.hub, &store, &changes, Some(observer), &controller.shutdown);
                store
            }
            Records::View(view) => {
                view.observe_with(observer);
                view
            }
        };
        watch_copies(&controller.hub, &deletion.copy_selector, &copies, &changes, &controller.shutdown);
        if deletion.exact_spelling {
            metrics = metrics.with_spelling();
        }
        let metrics = Arc::new(metrics);
        if deletion.exact_spelling {
            let (records, copies, metrics) = (Arc::clone(&records), Arc::clone(&copies), Arc::clone(&metrics));
            let count = super::spelling::watch(records, copies, metrics, controller.shutdown.clone());
            essential("spelling count", &controller.shutdown, count);
        }
        let pruner = Pruner {
            client: controller.hub.clone(),
            records,
            copies,
            selector: deletion.copy_selector.clone(),
            dry_run: deletion.dry_run,
            pacer: Pacer::per_second(deletion.max_deletes_per_second).closed_by(controller.shutdown.child_token()),
            grace,
            gate,
            queue,
            leader: controller.leader.clone(),
            metrics,
            recorder: controller.recorder("edgegate-pruner"),
        };
        Parts { pruner, changes }
    }

    /// What the pruner's probes and metrics read.
    pub fn admin(&self) -> Admin {
        Admin {
            records: Arc::clone(&self.pruner.records),
            copies: Arc::clone(&self.pruner.copies),
            metrics: Arc::clone(&self.pruner.metrics),
            leader: self.pruner.leader.clone(),
            gate: self.pruner.gate.clone(),
            queue: self.pruner.queue.clone(),
        }
    }
}

/// One list and a watch each: EdgeReachability everywhere, and copies by the copy selector
/// ([`watch_records`], [`watch_copies`]).
pub fn start_watches(
    client: &Client,
    selector: &crate::CopySelector,
    records: &Arc<RecordStore>,
    copies: &Arc<CopyIndex>,
    changes: &Dirty<Change>,
    observer: Option<RecordObserver>,
    shutdown: &CancellationToken,
) {
    watch_records(client, records, changes, observer, shutdown);
    watch_copies(client, selector, copies, changes, shutdown);
}

/// EdgeReachability everywhere into `records`: unsynced on a watch error, every change and
/// re-list marked on `changes`, every record delivered shown to `observer`. [`essential`]: a
/// watch that died would leave the store frozen, still synced, and the pruner deleting against
/// it.
pub fn watch_records(
    client: &Client,
    records: &Arc<RecordStore>,
    changes: &Dirty<Change>,
    observer: Option<RecordObserver>,
    shutdown: &CancellationToken,
) {
    let mut writer = StoreWriter::new(Arc::clone(records), OnWatchError::Unsync).with_changes(changes.clone());
    if let Some(observer) = observer {
        writer = writer.with_observer(observer);
    }
    let api: Api<DeserializeGuard<EdgeReachability>> = Api::all(client.clone());
    essential("EdgeReachability watch", shutdown, async move {
        follow(api, watcher::Config::default(), &mut writer).await;
    });
}

/// Copies by the copy selector into `copies`, each change and re-list marked on `changes`;
/// [`essential`], as [`watch_records`].
pub fn watch_copies(
    client: &Client,
    selector: &crate::CopySelector,
    copies: &Arc<CopyIndex>,
    changes: &Dirty<Change>,
    shutdown: &CancellationToken,
) {
    let mut writer = CopyWriter::new(Arc::clone(copies)).with_changes(changes.clone());
    let api: Api<DeserializeGuard<Slice>> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector.as_str());
    essential("copy watch", shutdown, async move { follow(api, config, &mut writer).await });
}

/// The pruner's readiness and metrics.
#[derive(Clone)]
pub struct Admin {
    records: Arc<dyn RecordSource>,
    copies: Arc<CopyIndex>,
    metrics: Arc<Metrics>,
    leader: Leadership,
    gate: Option<Arc<dyn Gate>>,
    queue: WorkQueue<String>,
}

impl Admin {
    pub fn registry(&self) -> &prometheus_client::registry::Registry {
        self.metrics.registry()
    }

    /// Brings the gauges up to date before a scrape.
    pub fn refresh(&self) {
        let synced = self.records.synced() && self.copies.synced();
        self.metrics.set_state(self.leader.is_leader(), synced, self.copies.len());
        self.metrics.set_waiting_for_producer(self.gate.as_ref().map(|g| g.waited_for()).unwrap_or_default());
        self.metrics.set_queue(&self.queue);
    }
}

impl Probes for Admin {
    fn ready(&self) -> Result<(), String> {
        if self.records.synced() && self.copies.synced() { Ok(()) } else { Err("caches not synced".into()) }
    }

    fn metrics(&self) -> String {
        self.refresh();
        self.metrics.encode()
    }
}
