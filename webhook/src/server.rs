//! HTTP routes and the TLS listener. Thin on purpose: bytes in, [`Admission`] decides, bytes out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, Endpoint};

/// A TLS handshake that has not finished by then is dropped (slow or idle clients).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The routes served over TLS: admission plus the probes and metrics.
pub fn routes(admission: Arc<Admission>, max_body_bytes: usize, serve_ceiling: bool) -> Router {
    let mut router = Router::new().route("/validate", post(validate)).route("/mutate", post(mutate));
    if serve_ceiling {
        router = router.route("/ceiling", post(ceiling));
    }
    router
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .merge(admin_routes(Arc::clone(&admission)))
        .with_state(admission)
        .fallback(not_found)
}

/// Probes and metrics only, for the optional plain-HTTP admin listener.
pub fn admin_routes(admission: Arc<Admission>) -> Router<Arc<Admission>> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(admission)
}

async fn validate(
    State(a): State<Arc<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    answer(&a, &headers, body, Endpoint::Validate)
}

async fn mutate(State(a): State<Arc<Admission>>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    answer(&a, &headers, body, Endpoint::Mutate)
}

fn answer(
    admission: &Admission,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        let is_json =
            content_type.to_str().is_ok_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/json"));
        if !is_json {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the AdmissionReview as Content-Type: application/json".to_owned(),
            );
        }
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    match admission.review(&body, endpoint) {
        Ok(review) => match serde_json::to_vec(&review) {
            Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the response failed: {e}")),
        },
        Err(bad) => {
            tracing::info!(error = %bad, "bad AdmissionReview");
            error(StatusCode::BAD_REQUEST, bad.to_string())
        }
    }
}

/// A JSON error body: `{"error": "...", "code": 400}`.
fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({ "error": message, "code": status.as_u16() });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// A fixed allow for a fixed uid: the server's ceiling with the review path taken out.
async fn ceiling(_body: Bytes) -> Response {
    const ALLOW: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"ceiling","allowed":true,"status":{}}}"#;
    ([(header::CONTENT_TYPE, "application/json")], ALLOW).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint; POST /validate or /mutate, GET /healthz, /readyz or /metrics".to_owned(),
    )
}

async fn readyz(State(a): State<Arc<Admission>>) -> Response {
    if a.source.synced() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "record source not synced\n").into_response()
    }
}

async fn metrics(State(a): State<Arc<Admission>>) -> Response {
    let text = a.metrics.encode(&a.source);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// Serve `app` over TLS until `shutdown`, then stop accepting and give in-flight requests up to
/// `grace` to finish.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(connections = graceful.count(), "stopped accepting; draining in-flight requests");
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(?grace, "shutdown grace elapsed with requests still in flight");
    }
}

/// Serve the admin routes over plain HTTP until `shutdown`.
pub async fn serve_admin(addr: SocketAddr, app: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await?;
    Ok(())
}
