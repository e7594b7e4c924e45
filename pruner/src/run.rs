//! Wiring: the two watches and the pass loop, inside the life every controller shares.

use std::sync::Arc;

use edgegate::core::hold::Hold;
use edgegate::index::copies::{CopyIndex, CopyWriter};
use edgegate::index::source::follow::follow;
use edgegate::index::source::kubernetes::{OnWatchError, RecordObserver, StoreWriter};
use edgegate::runtime::admin::Probes;
use edgegate::runtime::controller::Controller;
use edgegate::runtime::lease::Leadership;
use edgegate::runtime::supervise::essential;
use edgegate::runtime::wakeups::Later;
use edgegate::{EdgeReachability, RecordSource, RecordStore, Slice};
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::args::Args;
use crate::metrics::Metrics;
use crate::pruner::{Grace, Pacer, Pruner, named_again};
use crate::word::ProducerWord;

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.producer_lease.is_none() || !args.grace.is_zero(),
        "--producer-lease needs a non-zero --grace: the producer's word is asked for after a copy falls due"
    );
    let controller = Controller::start(&args.hub, &args.lease.config(&args.lease_name, "edgegate-pruner")).await?;
    // Unbounded: the watch handlers send on it and must never wait, and a change dropped would
    // lose a pass; one message per event, drained into one pass per namespace by each batch.
    let (changes_tx, changes) = mpsc::unbounded_channel();
    let records = Arc::new(RecordStore::new(args.record_name.clone()));
    let copies = Arc::new(CopyIndex::default());
    let grace: Grace = Arc::new(Mutex::new(Hold::new(args.grace)));
    let observer = named_again(Arc::clone(&grace), Arc::clone(&copies));
    let shutdown = &controller.shutdown;
    start_watches(
        &controller.hub,
        &args.copy_selector,
        &records,
        &copies,
        changes_tx.clone(),
        Some(observer),
        shutdown,
    );
    let mut metrics = Metrics::new().with_hub_token(&args.hub);
    if args.exact_spelling {
        metrics = metrics.with_spelling();
    }
    let metrics = Arc::new(metrics);
    if args.exact_spelling {
        let (records, copies, metrics) = (Arc::clone(&records), Arc::clone(&copies), Arc::clone(&metrics));
        let count = crate::spelling::watch(records, copies, metrics, controller.shutdown.clone());
        essential("spelling count", &controller.shutdown, count);
    }
    let word = args.producer_lease.as_ref().map(|name| {
        let lease = Api::namespaced(controller.hub.clone(), &args.lease.lease_namespace);
        Arc::new(ProducerWord::new(lease, name.clone(), args.grace, changes_tx.clone()))
    });
    let admin = Admin {
        records: Arc::clone(&records),
        copies: Arc::clone(&copies),
        metrics: Arc::clone(&metrics),
        leader: controller.leader.clone(),
        word: word.clone(),
    };
    controller.serve_admin(args.listen, Arc::new(admin)).await?;
    let pruner = Pruner {
        client: controller.hub.clone(),
        records,
        copies,
        selector: args.copy_selector,
        dry_run: args.dry_run,
        pacer: Pacer::per_second(args.max_deletes_per_second),
        grace,
        again: Some(Later::default()),
        word,
        leader: controller.leader.clone(),
        metrics,
        recorder: controller.recorder("edgegate-pruner"),
    };
    tracing::info!(
        grace = ?args.grace,
        max_deletes_per_second = args.max_deletes_per_second,
        dry_run = args.dry_run,
        exact_spelling = args.exact_spelling,
        producer_lease = args.producer_lease.as_deref(),
        selector = %pruner.selector,
        "pruning"
    );
    pruner.run(changes, args.resync, controller.shutdown.clone()).await;
    controller.stopped().await;
    Ok(())
}

/// One list and a watch each: EdgeReachability everywhere, and copies by the copy selector.
/// Both indexes go unsynced on a watch error, and every change and re-list is sent on `changes`;
/// every record delivered is also shown to `observer`. Both are [`essential`]: a watch that died
/// would leave its index frozen, still synced, and the pruner deleting against it.
pub fn start_watches(
    client: &Client,
    selector: &edgegate::CopySelector,
    records: &Arc<RecordStore>,
    copies: &Arc<CopyIndex>,
    changes: mpsc::UnboundedSender<edgegate::index::Change>,
    observer: Option<RecordObserver>,
    shutdown: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut record_writer = StoreWriter::new(Arc::clone(records), OnWatchError::Unsync).with_changes(changes.clone());
    if let Some(observer) = observer {
        record_writer = record_writer.with_observer(observer);
    }
    let record_api: Api<DeserializeGuard<EdgeReachability>> = Api::all(client.clone());
    let mut copy_writer = CopyWriter::new(Arc::clone(copies)).with_changes(changes);
    let copy_api: Api<DeserializeGuard<Slice>> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector.as_str());
    vec![
        essential("EdgeReachability watch", shutdown, async move {
            follow(record_api, watcher::Config::default(), &mut record_writer).await;
        }),
        essential("copy watch", shutdown, async move { follow(copy_api, config, &mut copy_writer).await }),
    ]
}

#[derive(Clone)]
struct Admin {
    records: Arc<RecordStore>,
    copies: Arc<CopyIndex>,
    metrics: Arc<Metrics>,
    leader: Leadership,
    word: Option<Arc<ProducerWord>>,
}

impl Probes for Admin {
    fn ready(&self) -> Result<(), String> {
        if self.records.synced() && self.copies.synced() { Ok(()) } else { Err("caches not synced".into()) }
    }

    fn metrics(&self) -> String {
        let synced = self.records.synced() && self.copies.synced();
        self.metrics.set_state(self.leader.is_leader(), synced, self.copies.len());
        self.metrics.set_waiting_for_producer(self.word.as_ref().map(|w| w.held_for()).unwrap_or_default());
        self.metrics.encode()
    }
}
