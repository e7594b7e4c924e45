//! `/healthz`, `/readyz` and `/metrics`, the same for every binary: the controllers serve them on
//! a plain-HTTP admin listener, the webhook on its TLS listener too.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

/// What a controller tells its probes and scrapers.
pub trait Probes: Send + Sync + 'static {
    /// `Err(why)` while not ready.
    fn ready(&self) -> Result<(), String>;
    /// The Prometheus text exposition.
    fn metrics(&self) -> String;
}

/// The content type of `/metrics`: prometheus-client writes OpenMetrics text (it ends in `# EOF`).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The three routes, answered by `probes`.
pub fn router(probes: Arc<dyn Probes>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(probes)
}

/// Serve `probes` on `listener` until `shutdown`; a listener that fails before then stops the
/// process (one that answers no probe would only be restarted later, by the liveness probe).
pub fn serve(listener: tokio::net::TcpListener, probes: Arc<dyn Probes>, shutdown: CancellationToken) {
    let app = router(probes);
    let until = shutdown.clone();
    super::supervise::essential("admin listener", &shutdown, async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(until.cancelled_owned()).await {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
}

async fn readyz(State(p): State<Arc<dyn Probes>>) -> impl IntoResponse {
    match p.ready() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn metrics(State(p): State<Arc<dyn Probes>>) -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], p.metrics())
}
