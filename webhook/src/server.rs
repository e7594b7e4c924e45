//! HTTP routes and the TLS listener. Thin on purpose: bytes in, [`Admission`] decides, bytes out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Endpoint};
use crate::inflight::{InFlight, Taken};

/// A TLS handshake, a request's headers or a request's body that has not arrived by then is
/// dropped: a slow or stalled client (slowloris) holds a connection for at most this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The routes served over TLS: admission, `extra` (nothing in the shipped server; the load
/// measurements add their ceiling routes), and the probes and metrics every binary serves.
pub fn routes(admission: Arc<Admission>, max_body_bytes: usize, in_flight: InFlight, extra: Router) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .layer(axum::Extension(BodyLimit(max_body_bytes, in_flight)))
        // The handlers read the body themselves, under BodyLimit and BODY_TIMEOUT.
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::clone(&admission))
        .merge(extra)
        .merge(edgegate::runtime::admin::router(admission))
        .fallback(not_found)
}

/// `--max-body-bytes`, and the budget of every body in flight (`--max-inflight-bytes`).
#[derive(Clone)]
struct BodyLimit(usize, InFlight);

async fn validate(State(a): State<Arc<Admission>>, limit: axum::Extension<BodyLimit>, request: Request) -> Response {
    answer(&a, &limit.0, request, Endpoint::Validate).await
}

async fn mutate(State(a): State<Arc<Admission>>, limit: axum::Extension<BodyLimit>, request: Request) -> Response {
    answer(&a, &limit.0, request, Endpoint::Mutate).await
}

/// Refuse what is not a plain JSON body before reading it (a status and why).
fn check_headers(headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        let is_json =
            content_type.to_str().is_ok_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("application/json"));
        if !is_json {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send the AdmissionReview as Content-Type: application/json".to_owned(),
            ));
        }
    }
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING)
        && !encoding.to_str().is_ok_and(|e| e.trim().eq_ignore_ascii_case("identity"))
    {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Encoding {encoding:?} is not accepted; send the AdmissionReview uncompressed"),
        ));
    }
    Ok(())
}

/// The body, at most `limit` bytes (413 beyond), within BODY_TIMEOUT (408 after), its bytes
/// taken from `in_flight` before they are read (429 when it cannot spare them: see
/// [`crate::inflight`]). A body over `limit` is read and dropped up to DRAIN_LIMIT more, so that
/// the client reads the 413 rather than a reset stream; one announced larger than that is refused
/// without reading any of it.
async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Body,
    limit: usize,
    in_flight: &InFlight,
) -> Result<(Bytes, Taken), Response> {
    use http_body_util::BodyExt;
    const DRAIN_LIMIT: usize = 64 * 1024 * 1024;
    let too_large = || error(StatusCode::PAYLOAD_TOO_LARGE, format!("body over {limit} bytes (--max-body-bytes)"));
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if announced.is_some_and(|n| n > limit.saturating_add(DRAIN_LIMIT)) {
        return Err(too_large());
    }
    let read = async move {
        let mut body = body;
        // Bytes are taken as they arrive: a request that announces much and sends little holds
        // only what it sent. The announced length only says which pool they come from.
        let (mut kept, mut seen, mut taken) = (Vec::new(), 0usize, Taken::default());
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| error(StatusCode::BAD_REQUEST, format!("reading the body failed: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            seen = seen.saturating_add(data.len());
            if seen <= limit {
                if !in_flight.cover(&mut taken, seen, announced) {
                    return Err(busy());
                }
                kept.extend_from_slice(&data);
            } else if seen > limit.saturating_add(DRAIN_LIMIT) {
                break;
            }
        }
        if seen > limit { Err(too_large()) } else { Ok((Bytes::from(kept), taken)) }
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(result) => result,
        Err(_) => Err(error(StatusCode::REQUEST_TIMEOUT, format!("body not received within {BODY_TIMEOUT:?}"))),
    }
}

/// 429 with `Retry-After: 1`: the budget of bodies in flight cannot spare this one's bytes now.
fn busy() -> Response {
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        "too many request bytes in flight (--max-inflight-bytes); retry".to_owned(),
    );
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

async fn answer(admission: &Admission, limit: &BodyLimit, request: Request, endpoint: Endpoint) -> Response {
    let (parts, body) = request.into_parts();
    if let Err((status, why)) = check_headers(&parts.headers) {
        // Read (and drop) the body first, within the same bounds: answering before it is read
        // resets the unread stream on HTTP/2, and the client would see a framing error, not why.
        let _ = read_body(&parts.headers, body, limit.0, &limit.1).await;
        return error(status, why);
    }
    // Held until the answer is built: decoding is where a body costs most.
    let (body, _taken) = match read_body(&parts.headers, body, limit.0, &limit.1).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
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

async fn not_found(request: Request) -> Response {
    // Drain a small body first, for the reason given in `answer` (it is dropped as it is read:
    // nothing is held, so it takes nothing from the budget).
    let (parts, body) = request.into_parts();
    let _ = read_body(&parts.headers, body, 0, &InFlight::new(0)).await;
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint; POST /validate or /mutate, GET /healthz, /readyz or /metrics".to_owned(),
    )
}

/// Streams one HTTP/2 connection may have open at once (hyper's default is 200): the API server
/// needs a handful, and each open stream may hold a body.
const MAX_STREAMS_PER_CONNECTION: u32 = 32;

/// What an HTTP/2 peer may send before a handler reads it (hyper's default is 1 MiB a
/// connection): data buffered outside the in-flight budget, per connection.
const H2_CONNECTION_WINDOW: u32 = 256 * 1024;
const H2_STREAM_WINDOW: u32 = 64 * 1024;

/// Serve `app` over TLS until `shutdown`, then stop accepting and give in-flight requests up to
/// `grace` to finish.
///
/// The number of connections is not capped here: a cap that makes new connections wait lets a
/// few hundred idle ones (handshaken, then silent) lock the API server out for as long as they
/// stay. What a connection may make the process hold is bounded instead: its HTTP/2 windows and
/// streams, and the bodies in flight ([`crate::inflight`]).
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let acceptor = TlsAcceptor::from(tls);
    let connections = TaskTracker::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .initial_connection_window_size(H2_CONNECTION_WINDOW)
        .initial_stream_window_size(H2_STREAM_WINDOW);
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
        let service = TowerToHyperService::new(app.clone());
        connections.spawn(serve_connection(acceptor.clone(), tcp, peer, builder.clone(), service, shutdown.clone()));
    }
    drop(listener);
    connections.close();
    tracing::info!(connections = connections.len(), "stopped accepting; draining in-flight requests");
    if tokio::time::timeout(grace, connections.wait()).await.is_err() {
        tracing::warn!(?grace, "shutdown grace elapsed with requests still in flight");
    }
}

/// One connection: the TLS handshake, then HTTP until the client is done or `shutdown`.
///
/// At shutdown the connection is polled once more before it is told to finish (`biased`), so a
/// request whose bytes had already arrived is read, and then answered. Told first, hyper closes
/// a connection it has read nothing from yet, and the client that sent a review before the
/// SIGTERM would see its connection reset instead of an answer.
async fn serve_connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    service: TowerToHyperService<Router>,
    shutdown: CancellationToken,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        biased;
        result = conn.as_mut() => result,
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}
