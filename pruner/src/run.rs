//! Wiring: the hub client, the two watches, the Lease, the admin listener, signals.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use edgegate::index::copies::{CopyIndex, CopyWriter};
use edgegate::index::source::follow::follow;
use edgegate::index::source::kubernetes::{OnWatchError, StoreWriter};
use edgegate::{EdgeReachability, RecordSource, RecordStore, Slice};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::args::Args;
use crate::metrics::Metrics;
use crate::pruner::Pruner;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = edgegate::runtime::hub::hub_client(&args.hub).await?;
    let shutdown = CancellationToken::new();
    let identity = args.identity.clone().unwrap_or_else(|| format!("edgegate-pruner-{}", std::process::id()));
    let (changes_tx, changes) = mpsc::unbounded_channel();
    let records = Arc::new(RecordStore::new(args.record_name.clone()));
    let copies = Arc::new(CopyIndex::default());
    start_watches(&client, &args.copy_selector, &records, &copies, changes_tx);
    let leader = elect(&client, &args, &identity).await?;
    let metrics = Arc::new(Metrics::new());
    let admin = Admin {
        records: Arc::clone(&records),
        copies: Arc::clone(&copies),
        metrics: Arc::clone(&metrics),
        leader: leader.clone(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, identity, dry_run = args.dry_run, selector = %args.copy_selector, "serving probes and metrics");
    let admin_shutdown = shutdown.clone();
    tokio::spawn(async move {
        let app = admin_routes(admin);
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(admin_shutdown.cancelled_owned()).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        edgegate::runtime::process::shutdown_signal().await;
        on_signal.cancel();
    });
    let pace = if args.max_deletes_per_second > 0.0 {
        Duration::from_secs_f64(1.0 / args.max_deletes_per_second)
    } else {
        Duration::ZERO
    };
    let recorder =
        Recorder::new(client.clone(), Reporter { controller: "edgegate-pruner".into(), instance: Some(identity) });
    let pruner = Pruner {
        client,
        records,
        copies,
        selector: args.copy_selector,
        dry_run: args.dry_run,
        pace,
        leader,
        metrics,
        recorder,
    };
    pruner.run(changes, args.resync, shutdown).await;
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

/// Leadership: a Lease through kube-lease-manager, or always-leader with --no-leader-election.
async fn elect(client: &Client, args: &Args, identity: &str) -> anyhow::Result<watch::Receiver<bool>> {
    if args.no_leader_election {
        tracing::warn!("leader election is off: run exactly one replica");
        let (_, rx) = watch::channel(true);
        return Ok(rx);
    }
    let duration = args.lease_duration.as_secs().max(3);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&args.lease_namespace)
        .with_identity(identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        .build()
        .await?;
    let (leader, _task) = manager.watch().await;
    Ok(leader)
}

#[derive(Clone)]
struct Admin {
    records: Arc<RecordStore>,
    copies: Arc<CopyIndex>,
    metrics: Arc<Metrics>,
    leader: watch::Receiver<bool>,
}

fn admin_routes(admin: Admin) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(admin)
}

async fn readyz(State(a): State<Admin>) -> impl IntoResponse {
    if a.records.synced() && a.copies.synced() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
    }
}

async fn metrics(State(a): State<Admin>) -> impl IntoResponse {
    let synced = a.records.synced() && a.copies.synced();
    a.metrics.set_state(*a.leader.borrow(), synced, a.copies.len());
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], a.metrics.encode())
}
