//! Wiring: record source, TLS, listeners, signals.

use std::sync::Arc;

use anyhow::Context;
use edgegate::index::source::files::FileSource;
use edgegate::runtime::supervise::essential;
use edgegate::{RecordSource, RecordStore};
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::args::Args;
use crate::ca_bundle::CaBundleKeeper;
use crate::metrics::Metrics;
use crate::tls::CertReloader;

pub async fn run(args: Args) -> anyhow::Result<()> {
    serve(args, axum::Router::new()).await
}

/// The webhook, with `extra` routes served over TLS beside its own (the load measurements'
/// ceiling; nothing in the shipped binary).
pub async fn serve(args: Args, extra: axum::Router) -> anyhow::Result<()> {
    let in_flight = crate::inflight::InFlight::new(args.max_inflight_bytes);
    anyhow::ensure!(
        in_flight.largest() >= args.max_body_bytes,
        "--max-inflight-bytes {} leaves {} bytes for large bodies, less than one of --max-body-bytes {}: raise it",
        args.max_inflight_bytes,
        in_flight.largest(),
        args.max_body_bytes
    );
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    let shutdown = CancellationToken::new();
    let metrics = Arc::new(Metrics::new().with_hub_token(&args.hub));
    let store = Arc::new(RecordStore::new(args.record_name.clone()).with_max_staleness(args.max_staleness));
    start_record_source(&args, Arc::clone(&store), Arc::clone(&metrics), shutdown.clone()).await?;

    let (cert, key) = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ => {
            let (cert, key) = crate::tls::ensure_self_signed(&args.self_signed)?;
            let ca = args.self_signed.join("ca.crt");
            println!("edgegate-webhook: self-signed CA at {} (curl --cacert {})", ca.display(), ca.display());
            (cert, key)
        }
    };
    let mut reloader =
        CertReloader::new(cert.clone(), key, Arc::clone(&metrics)).context("loading the serving certificate")?;
    if let Some(name) = &args.ca_bundle_for {
        let client = edgegate::runtime::client::hub_client(&args.hub).await?;
        let keeper = CaBundleKeeper::new(client, name.clone(), args.ca_bundle_settle, args.ca_bundle_keep_old);
        let ca_file = args.ca_file.clone().unwrap_or_else(|| cert.with_file_name("ca.crt"));
        reloader = reloader.with_ca_bundle(ca_file, keeper)?;
    }
    let tls = Arc::new(crate::tls::server_config(reloader.resolver())?);
    essential("certificate reloader", &shutdown, reloader.watch(shutdown.clone()));

    let admission = Arc::new(Admission {
        source: store as Arc<dyn RecordSource>,
        selector: args.copy_selector.clone(),
        mode: args.mode,
        metrics,
    });
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr()?;
    println!("edgegate-webhook: listening on https://{local}");
    tracing::info!(listen = %local, mode = ?args.mode, selector = %args.copy_selector, "serving");

    if let Some(admin) = args.admin_listen {
        let listener =
            tokio::net::TcpListener::bind(admin).await.with_context(|| format!("binding --admin-listen {admin}"))?;
        edgegate::runtime::admin::serve(listener, Arc::clone(&admission) as _, shutdown.clone());
    }
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        edgegate::runtime::process::shutdown_signal().await;
        on_signal.cancel();
    });
    let app = crate::server::routes(admission, args.max_body_bytes, in_flight, extra);
    crate::server::serve_tls(listener, tls, app, shutdown, args.shutdown_grace).await;
    tracing::info!("stopped");
    Ok(())
}

async fn start_record_source(
    args: &Args,
    store: Arc<RecordStore>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if args.kubernetes {
        let client = edgegate::runtime::client::hub_client(&args.hub).await?;
        let api = kube::Api::<kube::core::DeserializeGuard<edgegate::EdgeReachability>>::all(client);
        let writer = edgegate::index::source::kubernetes::StoreWriter::new(
            store,
            edgegate::index::source::kubernetes::OnWatchError::KeepServing,
        );
        essential("EdgeReachability watch", &shutdown, edgegate::index::source::kubernetes::run(api, writer));
        return Ok(());
    }
    let source = FileSource::new(args.records_dir.clone(), store);
    let errors = Arc::clone(&source.parse_errors);
    essential("records directory watch", &shutdown, source.watch(shutdown.clone().cancelled_owned()));
    essential("record file error count", &shutdown, async move {
        loop {
            metrics.record_file_errors(errors.load(std::sync::atomic::Ordering::Relaxed));
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    Ok(())
}
