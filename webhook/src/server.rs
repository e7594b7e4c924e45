//! HTTP routes and the TLS listener. Thin on purpose: bytes in, [`Admission`] decides, bytes out.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Endpoint};
use crate::inflight::{InFlight, Taken};
use crate::metrics::Metrics;

/// A TLS handshake, a request's headers or a request's body that has not arrived by then is
/// dropped: a slow or stalled client (slowloris) holds a connection for at most this long. The
/// first request's headers are due HEADER_TIMEOUT after the handshake (see [`serve_connection`]);
/// a later request's, on a kept-alive connection, within IDLE_TIMEOUT of the last answer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection with no request in flight for this long is shut down (HTTP/2: GOAWAY; HTTP/1.1:
/// closed). Longer than the API server's own idle limit on purpose: its webhook client
/// (client-go's transport, `utilnet.SetTransportDefaults`) keeps Go's `http.DefaultTransport`
/// value for `IdleConnTimeout`, 90 s, so the client, which knows when it will send next, retires
/// its idle connections first and never races our close. What this catches is a peer that never
/// does.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// After a GOAWAY, how long an idle connection has to close before it is dropped: a client
/// answers the GOAWAY's ping in a round trip; a silent one never does.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// HTTP/2 pings that find a dead peer: one after this long without a frame from it, and the
/// connection closed if it is not answered within the timeout. (The API server pings too, after
/// 30 s without a frame, and gives up after 15 s.)
const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Shortens IDLE_TIMEOUT to this many seconds, for the tests. Debug builds only: a release binary
/// never reads the variable.
#[cfg(debug_assertions)]
const TEST_IDLE_SECONDS: &str = "EDGEGATE_TEST_IDLE_SECONDS";

fn idle_timeout() -> Duration {
    #[cfg(debug_assertions)]
    if let Some(idle) = std::env::var(TEST_IDLE_SECONDS)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        return idle;
    }
    IDLE_TIMEOUT
}

/// A refused request's body is read and dropped for at most this long, and this many bytes,
/// before it is answered (see [`drain`]).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

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
/// taken from `in_flight` as they arrive (429 when it cannot spare them: see
/// [`crate::inflight`]). A body refused 413 or 429 gives back what it took, and the rest of it is
/// drained (see [`drain`]) before the answer; one announced larger than `limit` takes nothing,
/// and one announced larger than DRAIN_LIMIT more is refused without reading any of it.
async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Body,
    limit: usize,
    in_flight: &InFlight,
    metrics: &Metrics,
) -> Result<(Bytes, Taken), Response> {
    use http_body_util::BodyExt;
    enum Stop {
        Busy { seen: usize },
        TooLarge,
        Failed(String),
    }
    let too_large = || error(StatusCode::PAYLOAD_TOO_LARGE, format!("body over {limit} bytes (--max-body-bytes)"));
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if announced.is_some_and(|n| n > limit.saturating_add(DRAIN_LIMIT)) {
        return Err(too_large());
    }
    if announced.is_some_and(|n| n > limit) {
        drain(body).await;
        return Err(too_large());
    }
    let mut body = body;
    let read = async {
        // Bytes are taken as they arrive: a request that announces much and sends little holds
        // only what it sent. The announced length only says which pool they come from.
        let (mut kept, mut seen, mut taken) = (Vec::new(), 0usize, Taken::default());
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Stop::Failed(e.to_string()))?;
            let Ok(data) = frame.into_data() else { continue };
            seen = seen.saturating_add(data.len());
            if seen > limit {
                return Err(Stop::TooLarge);
            }
            if !in_flight.cover(&mut taken, seen, announced) {
                return Err(Stop::Busy { seen });
            }
            kept.extend_from_slice(&data);
        }
        Ok((Bytes::from(kept), taken))
    };
    // What was kept and taken is dropped with `read`, before any drain.
    let outcome = tokio::time::timeout(BODY_TIMEOUT, read).await;
    match outcome {
        Ok(Ok(read)) => Ok(read),
        Ok(Err(Stop::Busy { seen })) => {
            metrics.refused_busy();
            tracing::debug!(seen, announced, "429: the in-flight budget cannot spare this body's bytes now");
            drain(body).await;
            Err(busy())
        }
        Ok(Err(Stop::TooLarge)) => {
            drain(body).await;
            Err(too_large())
        }
        Ok(Err(Stop::Failed(e))) => Err(error(StatusCode::BAD_REQUEST, format!("reading the body failed: {e}"))),
        Err(_) => Err(error(StatusCode::REQUEST_TIMEOUT, format!("body not received within {BODY_TIMEOUT:?}"))),
    }
}

/// Read the rest of a body and drop it as it arrives (nothing kept, nothing taken from the
/// budget), for at most DRAIN_TIMEOUT and DRAIN_LIMIT bytes, before answering a request refused
/// without its body. Answered with its body unread, an HTTP/1.1 request is followed by a close
/// with unread data, and an HTTP/2 stream by a reset: a client still uploading then sees a reset
/// connection or stream instead of the answer (curl: "Send failure: Broken pipe", "Stream error
/// in the HTTP/2 framing layer"), and the API server does not retry a POST after a transport
/// error the way it retries a 429.
async fn drain(body: axum::body::Body) {
    use http_body_util::BodyExt;
    use hyper::body::Body as _;
    if body.size_hint().lower() > DRAIN_LIMIT as u64 {
        return;
    }
    let read = async move {
        let mut body = body;
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                seen = seen.saturating_add(data.len());
                if seen > DRAIN_LIMIT {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, read).await;
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
        drain(body).await;
        return error(status, why);
    }
    // Held until the answer is built: decoding is where a body costs most.
    let (body, _taken) = match read_body(&parts.headers, body, limit.0, &limit.1, &admission.metrics).await {
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
    drain(request.into_body()).await;
    error(
        StatusCode::NOT_FOUND,
        "no such endpoint; POST /validate or /mutate, GET /healthz, /readyz or /metrics".to_owned(),
    )
}

/// What hyper may read ahead on one HTTP/1.1 connection (its default is about 400 KiB), outside
/// the in-flight budget; a request's headers must fit. Every connection draining a refused body
/// fills it: at the default, the debug build's flood of 96 HTTP/1.1 connections peaked at
/// 234-272 MiB instead of 147-171 MiB.
const H1_READ_BUFFER: usize = 64 * 1024;

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
    let idle = idle_timeout();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper re-arms its HTTP/1.1 header timer whenever a kept-alive connection goes idle
    // (proto/h1/conn.rs, `State::idle`), so that timer is also the HTTP/1.1 idle limit. The API
    // server calls a webhook named by a Service over HTTP/1.1 only, and keeps an idle connection
    // 90 s: at HEADER_TIMEOUT we closed it first, and it paid a new TLS handshake after every
    // pause longer than that (and a POST caught in our close fails: neither Go nor client-go
    // retries it). `serve_connection` keeps both deadlines that matter (first headers
    // HEADER_TIMEOUT after the handshake, `idle` after the last answer); this is only the
    // backstop behind them.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(idle + CLOSE_GRACE).max_buf_size(H1_READ_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
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
        // Small writes at once: an HTTP/2 WINDOW_UPDATE held back by Nagle's algorithm until the
        // peer's delayed ACK (40 ms) paced a 7 MB upload to 4.4 s.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "TCP_NODELAY not set");
        }
        let service = TowerToHyperService::new(app.clone());
        connections.spawn(serve_connection(
            acceptor.clone(),
            tcp,
            peer,
            builder.clone(),
            service,
            shutdown.clone(),
            idle,
        ));
    }
    drop(listener);
    connections.close();
    tracing::info!(connections = connections.len(), "stopped accepting; draining in-flight requests");
    if tokio::time::timeout(grace, connections.wait()).await.is_err() {
        tracing::warn!(?grace, "shutdown grace elapsed with requests still in flight");
    }
}

/// One connection: the TLS handshake, then HTTP until the client is done, `shutdown`, or it has
/// been idle too long.
///
/// At shutdown the connection is polled once more before it is told to finish (`biased`), so a
/// request whose bytes had already arrived is read, and then answered. Told first, hyper closes
/// a connection it has read nothing from yet, and the client that sent a review before the
/// SIGTERM would see its connection reset instead of an answer.
///
/// Idle deadlines, which hyper does not keep itself: after the handshake, hyper-util reads the
/// protocol preface without a timer, HTTP/1.1's header timer starts only once that is read, and
/// HTTP/2 has no idle timeout at all. So a connection whose first request's headers have not all
/// arrived HEADER_TIMEOUT after the handshake is dropped (nothing was asked of it: there is no
/// one to tell), and one that has had no request in flight for `idle` is shut down gracefully
/// (HTTP/2: GOAWAY; HTTP/1.1: closed) and dropped if it has not closed CLOSE_GRACE later.
async fn serve_connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    service: TowerToHyperService<Router>,
    shutdown: CancellationToken,
    idle: Duration,
) {
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
    };
    let activity = Arc::new(Activity::default());
    let service = Tracked { inner: service, activity: Arc::clone(&activity) };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let mut closing: Option<Instant> = None;
    // When to look next: never later than `idle` after a request may have ended.
    let mut check = Instant::now() + HEADER_TIMEOUT.min(idle);
    let result = loop {
        tokio::select! {
            biased;
            result = conn.as_mut() => break result,
            () = shutdown.cancelled() => {
                conn.as_mut().graceful_shutdown();
                break conn.as_mut().await;
            }
            () = tokio::time::sleep_until(check) => {
                let now = Instant::now();
                let Some((since, served)) = activity.quiet() else {
                    // A request in flight: look again soon after it ends.
                    check = now + Duration::from_secs(1);
                    continue;
                };
                if served == 0 {
                    // `since` is the handshake.
                    if since + HEADER_TIMEOUT > now {
                        check = (since + HEADER_TIMEOUT).min(now + idle);
                        continue;
                    }
                    tracing::debug!(%peer, "no request within {HEADER_TIMEOUT:?} of the handshake; closing");
                    break Ok(());
                }
                match closing {
                    None if since + idle > now => check = since + idle,
                    None => {
                        tracing::debug!(%peer, served, "idle for {idle:?}; closing");
                        conn.as_mut().graceful_shutdown();
                        closing = Some(now);
                        check = now + CLOSE_GRACE;
                    }
                    Some(told) => {
                        let until = told.max(since) + CLOSE_GRACE;
                        if until > now {
                            check = until;
                            continue;
                        }
                        tracing::debug!(%peer, "told to close {CLOSE_GRACE:?} ago and still open; dropped");
                        break Ok(());
                    }
                }
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// What one connection is doing, for its idle deadlines: requests in flight, requests served,
/// and since when it has had none in flight (from the handshake until its first).
struct Activity(Mutex<Quiet>);

struct Quiet {
    in_flight: usize,
    served: u64,
    since: Instant,
}

impl Default for Activity {
    fn default() -> Self {
        Activity(Mutex::new(Quiet { in_flight: 0, served: 0, since: Instant::now() }))
    }
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, Quiet> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request begins; it ends when the guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        let mut quiet = self.lock();
        quiet.in_flight += 1;
        quiet.served += 1;
        Busy(Arc::clone(self))
    }

    /// None while a request is in flight; else since when none has been, and how many were.
    fn quiet(&self) -> Option<(Instant, u64)> {
        let quiet = self.lock();
        (quiet.in_flight == 0).then_some((quiet.since, quiet.served))
    }
}

/// One request in flight on a connection, from its headers until its answer is built (or it is
/// dropped: the client reset the stream).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut quiet = self.0.lock();
        quiet.in_flight = quiet.in_flight.saturating_sub(1);
        if quiet.in_flight == 0 {
            quiet.since = Instant::now();
        }
    }
}

/// The app's service, counting the connection's requests in flight.
#[derive(Clone)]
struct Tracked {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Tracked {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>;

    fn call(&self, request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let busy = self.activity.begin();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(busy);
            answer
        })
    }
}
