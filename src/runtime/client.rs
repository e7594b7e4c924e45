//! The client every binary talks to an API server with: the hub's, or (the producer) a project's.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use anyhow::Context;

use super::flags::HubArgs;

/// A client for the hub: `--kubeconfig` (and `--context`) if given, `--context` of the default
/// kubeconfig if only that is, else in-cluster, else ~/.kube/config.
pub async fn hub_client(hub: &HubArgs) -> anyhow::Result<kube::Client> {
    kube_client(hub.kubeconfig.as_deref(), hub.context.as_deref()).await
}

/// A client from `kubeconfig` (and `context`) if given, `context` of the default kubeconfig if
/// only that is, else in-cluster, else ~/.kube/config.
pub async fn kube_client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Client> {
    Ok(kube::Client::try_from(with_timeouts(config(kubeconfig, context).await?))?)
}

/// A client for one project control plane from its kubeconfig: as [`kube_client`], with the
/// project's longer read timeout ([`PROJECT_READ_TIMEOUT`]).
pub async fn project_client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let mut config = with_timeouts(config(Some(kubeconfig), None).await?);
    config.read_timeout = Some(PROJECT_READ_TIMEOUT);
    Ok(kube::Client::try_from(config)?)
}

/// How long a connection to the API server may stay silent while a response is owed before the
/// request fails. Longer than a watch lasts
/// ([`crate::index::source::follow::WATCH_TIMEOUT_SECS`]), so a quiet healthy watch never meets
/// it; short enough that an API server cut off without a reset (a dropped link, a partition) is
/// noticed within seconds rather than the minutes TCP takes, and that a request stuck on such a
/// connection gives way to a new one soon after the link heals.
pub const API_READ_TIMEOUT: Duration = Duration::from_secs(15);

/// A project control plane's read timeout: its watches are long
/// ([`crate::index::source::follow::PROJECT_WATCH_TIMEOUT_SECS`]) and quiet but for the API
/// server's bookmarks, about one a minute; a project cut off without a reset is noticed within
/// this long.
pub const PROJECT_READ_TIMEOUT: Duration = Duration::from_secs(90);
const API_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Clients for many control planes served by one API server under path prefixes (Milo's projects,
/// each at [`crate::core::milo::control_plane_path`]), on one host with one set of credentials:
/// one TLS configuration for all of them, where a `Client` per project would build one each, and
/// their requests carried in [`Lane`]s of [`LANE_PROJECTS`] projects each, one connection per
/// lane. Over HTTP/2 (where the server offers it) a lane's watches are streams of one connection,
/// so an idle project costs no socket, TLS session or connection buffers of its own. Each
/// project's client only adds its base path and the credentials (a token file is read by each
/// client's own refresher).
#[derive(Clone)]
pub struct PathClients {
    root: kube::Config,
    connector: Connector,
    lanes: Arc<Mutex<Vec<Lane>>>,
}

type Connector =
    hyper_timeout::TimeoutConnector<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>>;

type PooledHttp = hyper_util::client::legacy::Client<Connector, kube::client::Body>;

/// How many projects share a [`Lane`]. At most five watches each and a read now and then, so at
/// most about 85 streams: under what a server allows on one HTTP/2 connection (Go's 250, hyper's
/// 200, 100 for most proxies), or a request beyond them would wait for a stream that a watch
/// does not give back for minutes.
pub const LANE_PROJECTS: usize = 16;

/// How often a lane's connection is pinged, and how long an answer may take before the connection
/// is dropped (and its watches start again): a dead connection is noticed within a minute, even
/// while its streams wait quietly for events.
const LANE_PING: Duration = Duration::from_secs(30);
const LANE_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// A connection pool of its own (over HTTP/2, one connection) for the projects that hold a
/// [`Seat`] of it: how many do is the count of `seats`' clones, less the one in [`PathClients`]'s
/// list.
#[derive(Clone)]
struct Lane {
    http: PooledHttp,
    seats: Arc<()>,
}

/// A project's place in a lane, held once per project client at the outside of its stack (the
/// retry layer clones what is inside it for every request).
struct Seat<S> {
    inner: S,
    _seat: Arc<()>,
}

impl<S, R> tower::Service<R> for Seat<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.inner.call(request)
    }
}

impl PathClients {
    /// From the root's kubeconfig (and context), or in-cluster.
    pub async fn new(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Self> {
        use kube::client::ConfigExt;
        let mut root = with_timeouts(config(kubeconfig, context).await?);
        root.read_timeout = Some(PROJECT_READ_TIMEOUT);
        anyhow::ensure!(root.proxy_url.is_none(), "a proxy in the kubeconfig is not supported for project clients");
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        // HTTP/2 where the server offers it (ALPN), HTTP/1.1 otherwise; the kubeconfig's
        // tls-server-name as kube's own connector has it.
        let mut https =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(root.rustls_client_config()?).https_or_http();
        if let Some(name) = root.tls_server_name.as_ref() {
            let name = name.clone().try_into().with_context(|| format!("tls-server-name {name}"))?;
            https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
        }
        let https = https.enable_http1().enable_http2().wrap_connector(http);
        let mut connector = hyper_timeout::TimeoutConnector::new(https);
        connector.set_connect_timeout(root.connect_timeout);
        // Over HTTP/1.1 a connection nothing comes over for this long after a request was written
        // is dead (kube's own timing; over HTTP/2 a lane's pings tell that, see `lane`).
        connector.set_read_timeout(root.read_timeout);
        connector.set_write_timeout(root.write_timeout);
        connector.set_reset_reader_on_write(root.reset_reader_on_write);
        Ok(PathClients { root, connector, lanes: Arc::default() })
    }

    /// A client for the control plane served under `path` (e.g. `/apis/…/projects/acme/control-plane`),
    /// on the first lane with room.
    pub fn at(&self, path: &str) -> anyhow::Result<kube::Client> {
        use kube::client::ConfigExt;
        use tower::ServiceBuilder;
        let mut config = self.root.clone();
        let base = self.root.cluster_url.to_string();
        config.cluster_url = format!("{}{path}", base.trim_end_matches('/'))
            .parse()
            .with_context(|| format!("{path} is no path under {base}"))?;
        // As kube's own stack: 429, 503 and 504 retried after the server's Retry-After (Milo
        // paces a cold start of a thousand projects so).
        let retry = config
            .default_retry
            .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
        let lane = self.lane();
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(retry)
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(tower::BoxError::from)
            .service(answered_within(lane.http, PROJECT_READ_TIMEOUT));
        let service = Seat { inner: service, _seat: lane.seats };
        Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
    }

    /// The first lane with room for one more project, or a new one.
    fn lane(&self) -> Lane {
        let mut lanes = self.lanes.lock();
        if let Some(lane) = lanes.iter().find(|lane| Arc::strong_count(&lane.seats) <= LANE_PROJECTS) {
            return lane.clone();
        }
        let timer = hyper_util::rt::TokioTimer::new();
        let http = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(timer.clone())
            .pool_timer(timer)
            .http2_keep_alive_interval(LANE_PING)
            .http2_keep_alive_timeout(LANE_PING_TIMEOUT)
            // Kept while its watches are quiet: a connection is checked out again only when a
            // watch renews (every 10 to 20 minutes), and an idle timeout counted from that would open
            // a new connection each time, while the old one still carries the other watches.
            .pool_idle_timeout(None)
            .build(self.connector.clone());
        let lane = Lane { http, seats: Arc::default() };
        lanes.push(lane.clone());
        lane
    }

    /// How many lanes there are, and how many projects hold each (for tests).
    pub fn lanes(&self) -> Vec<usize> {
        self.lanes.lock().iter().map(|lane| Arc::strong_count(&lane.seats) - 1).collect()
    }
}

/// `http` with a bound on each answer: its head within `limit` of the request (many projects'
/// streams share a connection, so the connection's read timeout no longer tells one request that
/// is never answered), then its body failing after `limit` without a byte (a watch's bookmarks
/// come about once a minute). Either way only that request's project becomes incomplete.
fn answered_within<S, B>(
    http: S,
    limit: Duration,
) -> tower::timeout::Timeout<tower_http::timeout::ResponseBodyTimeout<S>>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
{
    tower::ServiceBuilder::new()
        .layer(tower::timeout::TimeoutLayer::new(limit))
        .layer(tower_http::timeout::ResponseBodyTimeoutLayer::new(limit))
        .service(http)
}

async fn config(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Config> {
    // A context names one of a kubeconfig's: without a file, the one kubectl reads ($KUBECONFIG,
    // or ~/.kube/config), never in-cluster credentials that have no contexts.
    let (read, from) = match (kubeconfig, context) {
        (Some(path), _) => (kube::config::Kubeconfig::read_from(path), path.display().to_string()),
        (None, Some(_)) => {
            (kube::config::Kubeconfig::read(), "the kubeconfig ($KUBECONFIG or ~/.kube/config)".to_owned())
        }
        (None, None) => return Ok(kube::Config::infer().await?),
    };
    let kubeconfig = read.with_context(|| format!("reading {from}"))?;
    super::credential::supported(&kubeconfig, context).with_context(|| from.clone())?;
    let options = kube::config::KubeConfigOptions { context: context.map(str::to_owned), ..Default::default() };
    kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.with_context(|| from)
}

fn with_timeouts(mut config: kube::Config) -> kube::Config {
    config.read_timeout = Some(API_READ_TIMEOUT);
    // Count from when a request is written, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config.connect_timeout = Some(API_CONNECT_TIMEOUT);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Projects fill a lane before the next is opened, and a project let go makes room: a lane's
    /// streams stay under what one connection may carry.
    #[tokio::test]
    async fn projects_share_lanes_of_a_bounded_size() {
        let dir = std::env::temp_dir().join(format!("edgegate-lanes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let kubeconfig = dir.join("milo.kubeconfig");
        std::fs::write(
            &kubeconfig,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: milo\n  cluster: {server: 'https://127.0.0.1:9'}\n\
             users:\n- name: p\n  user: {token: t}\ncontexts:\n- name: milo\n  context: {cluster: milo, user: p}\n\
             current-context: milo\n",
        )
        .expect("kubeconfig");
        let clients = PathClients::new(Some(&kubeconfig), None).await.expect("clients");
        let mut held: Vec<kube::Client> =
            (0..LANE_PROJECTS * 2 + 6).map(|n| clients.at(&format!("/p/{n}")).expect("client")).collect();
        assert_eq!(clients.lanes(), [LANE_PROJECTS, LANE_PROJECTS, 6]);
        held.truncate(LANE_PROJECTS - 1);
        // The kube::Client's buffer task lets its service go once the client is dropped.
        for _ in 0..100 {
            if clients.lanes() == [LANE_PROJECTS - 1, 0, 0] {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(clients.lanes(), [LANE_PROJECTS - 1, 0, 0]);
        let _next = clients.at("/p/next").expect("client");
        assert_eq!(clients.lanes(), [LANE_PROJECTS, 0, 0], "the first lane with room");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A project's request that is never answered fails after the limit, not never: over a
    /// connection many projects share, nothing else would end it.
    #[tokio::test(start_paused = true)]
    async fn an_answer_that_never_comes_fails_in_time() {
        use tower::{Service, ServiceExt};
        let (mock, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let mut service = answered_within(mock, PROJECT_READ_TIMEOUT);
        let started = tokio::time::Instant::now();
        let call = service.ready().await.expect("ready").call(http::Request::new(kube::client::Body::empty()));
        let (_request, _never) = handle.next_request().await.expect("the request");
        assert!(call.await.is_err(), "no answer: an error");
        assert_eq!(started.elapsed(), PROJECT_READ_TIMEOUT);
    }
}
