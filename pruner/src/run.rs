//! Wiring: the hub client, the two watches, the Lease, the admin listener, signals.

use std::sync::{Arc, Mutex};

use edgegate::core::hold::Hold;
use edgegate::index::copies::{CopyIndex, CopyWriter};
use edgegate::index::source::follow::follow;
use edgegate::index::source::kubernetes::{OnWatchError, StoreWriter};
use edgegate::runtime::admin::Probes;
use edgegate::runtime::lease::{Leadership, elect};
use edgegate::{EdgeReachability, RecordSource, RecordStore, Slice};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::args::Args;
use crate::metrics::Metrics;
use crate::pruner::{Pacer, Pruner};

pub async fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = edgegate::runtime::hub::hub_client(&args.hub).await?;
    let shutdown = CancellationToken::new();
    let lease = args.lease.config(&args.lease_name, "edgegate-pruner");
    let identity = lease.identity.clone();
    let (changes_tx, changes) = mpsc::unbounded_channel();
    let records = Arc::new(RecordStore::new(args.record_name.clone()));
    let copies = Arc::new(CopyIndex::default());
    start_watches(&client, &args.copy_selector, &records, &copies, changes_tx.clone());
    let election_stop = CancellationToken::new();
    let (leader, election) = elect(&client, &lease, election_stop.clone());
    let metrics = Arc::new(Metrics::new());
    let admin = Admin {
        records: Arc::clone(&records),
        copies: Arc::clone(&copies),
        metrics: Arc::clone(&metrics),
        leader: leader.clone(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, identity, dry_run = args.dry_run, selector = %args.copy_selector, "serving probes and metrics");
    edgegate::runtime::admin::serve(listener, Arc::new(admin), shutdown.clone());
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        edgegate::runtime::process::shutdown_signal().await;
        on_signal.cancel();
    });
    let recorder =
        Recorder::new(client.clone(), Reporter { controller: "edgegate-pruner".into(), instance: Some(identity) });
    let pruner = Pruner {
        client,
        records,
        copies,
        selector: args.copy_selector,
        dry_run: args.dry_run,
        pacer: Pacer::per_second(args.max_deletes_per_second),
        grace: Mutex::new(Hold::new(args.grace)),
        again: Some(changes_tx),
        leader,
        metrics,
        recorder,
    };
    tracing::info!(grace = ?args.grace, max_deletes_per_second = args.max_deletes_per_second, "pruning");
    pruner.run(changes, args.resync, shutdown).await;
    // The last pass has ended: hand the Lease over now rather than let it expire.
    election_stop.cancel();
    let _ = election.await;
    tracing::info!("stopped");
    Ok(())
}

/// One list and a watch each: EdgeReachability everywhere, and copies by the copy selector.
/// Both indexes go unsynced on a watch error, and every change and re-list is sent on `changes`.
pub fn start_watches(
    client: &Client,
    selector: &edgegate::CopySelector,
    records: &Arc<RecordStore>,
    copies: &Arc<CopyIndex>,
    changes: mpsc::UnboundedSender<edgegate::index::source::kubernetes::Change>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut record_writer = StoreWriter::new(Arc::clone(records), OnWatchError::Unsync).with_changes(changes.clone());
    let record_api: Api<EdgeReachability> = Api::all(client.clone());
    let mut copy_writer = CopyWriter::new(Arc::clone(copies)).with_changes(changes);
    let copy_api: Api<Slice> = Api::all(client.clone());
    let config = watcher::Config::default().labels(selector.as_str());
    vec![
        tokio::spawn(async move { follow(record_api, watcher::Config::default(), &mut record_writer).await }),
        tokio::spawn(async move { follow(copy_api, config, &mut copy_writer).await }),
    ]
}

#[derive(Clone)]
struct Admin {
    records: Arc<RecordStore>,
    copies: Arc<CopyIndex>,
    metrics: Arc<Metrics>,
    leader: Leadership,
}

impl Probes for Admin {
    fn ready(&self) -> Result<(), String> {
        if self.records.synced() && self.copies.synced() { Ok(()) } else { Err("caches not synced".into()) }
    }

    fn metrics(&self) -> String {
        let synced = self.records.synced() && self.copies.synced();
        self.metrics.set_state(self.leader.is_leader(), synced, self.copies.len());
        self.metrics.encode()
    }
}
