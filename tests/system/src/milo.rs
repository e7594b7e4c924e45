//! A stand-in for Datum's Milo built from real parts: a TLS path proxy in front of one real
//! kube-apiserver. Its root serves what the API server serves (the `Project` CRD of
//! tests/crds/milo.yaml among it); under
//! `/apis/resourcemanager.miloapis.com/v1alpha1/projects/<p>/control-plane/` it serves project
//! `<p>`'s control plane: the rest of the path on the same API server, every GET scoped to the
//! objects labelled [`PROJECT_LABEL`]` = <p>` (so many projects share one API server, each seeing
//! only its own namespaces and objects). The caller's credentials are passed through, so the API
//! server's RBAC judges them as Milo's would: a bearer token as it is; a client certificate of the
//! API server's client CA, which a proxy cannot pass on, by the admin impersonating its CN (and O
//! as groups), as Milo authenticates certificates itself.
//!
//! A project may instead be routed to a kube-apiserver of its own ([`Milo::route`], e.g. one of
//! [`ControlPlane::start_project_server`]'s on the same etcd): its requests go there unscoped, as
//! Milo serves a project from a storage of its own; restarting that server is a project's server
//! restarting.
//!
//! It counts the requests it serves per project, and injects per-project faults ([`Fault`]). What
//! it does not do as Milo does: authorization per project (one RBAC for all of the projects it
//! scopes), and a write under a scoped project's path is not labelled for it (the producer never
//! writes there).

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};

use crate::control_plane::ControlPlane;

/// The label that puts an object (a namespace, and everything in it) in a project.
pub const PROJECT_LABEL: &str = "milo.test/project";

const PREFIX: &str = "/apis/resourcemanager.miloapis.com/v1alpha1/projects/";

/// What a project's requests get instead of an answer. Setting one also ends the project's
/// answers in flight (its watches), so the next request meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// This status, at once.
    Status(u16),
    /// Nothing: the request is held open, unanswered, until the fault is lifted; then it goes on
    /// to the API server, as a backend that stalled and came back answers what it held.
    Silent,
}

#[derive(Default)]
struct State {
    faults: HashMap<String, Fault>,
    requests: HashMap<String, u64>,
    /// Each project's answers in flight (its watches) end when this is cancelled: a fault set
    /// ends them, as a project whose backend fails ends its streams.
    cuts: HashMap<String, tokio_util::sync::CancellationToken>,
    /// The projects served by an API server of their own, unscoped.
    routes: HashMap<String, Upstream>,
}

/// The key of Milo's root in [`Milo::set_fault`]: a fault set for it answers every request
/// outside a project's path (its Projects, discovery).
pub const ROOT: &str = "";

/// The stand-in, serving until dropped.
pub struct Milo {
    /// Where it serves (`https://127.0.0.1:<port>`), with the API server's CA.
    pub server: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    cp_kubeconfig: PathBuf,
    cp_server: String,
}

impl Drop for Milo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Milo {
    /// The stand-in as the suites use it: edgegate's CRD on `hub`, the project kinds' and Milo's
    /// `Project` and IAM CRDs on `backing_cp` (served before it returns) with Milo's own
    /// namespace `milo-system` at its root, and Milo in front of it.
    pub async fn serving(hub: &kube::Client, backing_cp: &ControlPlane, backing: &kube::Client) -> Milo {
        crate::helpers::install_crd(hub).await;
        world::install_crds(backing_cp);
        crate::helpers::namespace(backing, "milo-system", &[]).await;
        let proxies: kube::Api<kube::api::DynamicObject> =
            kube::Api::all_with(backing.clone(), &crate::soak::project::resource("HTTPProxy", "httpproxies"));
        crate::helpers::eventually(std::time::Duration::from_secs(30), "Milo's CRDs served", async || {
            world::projects(backing).list(&Default::default()).await.is_ok()
                && proxies.list(&Default::default()).await.is_ok()
        })
        .await;
        Milo::start(backing_cp).await
    }

    /// In front of `cp`'s API server, with its serving certificate.
    pub async fn start(cp: &ControlPlane) -> Milo {
        use rustls::pki_types::pem::PemObject;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let certs = rustls_pemfile_certs(&cp.dir.join("apiserver.crt"));
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(cp.dir.join("apiserver.key")).expect("apiserver key");
        // Client certificates of the API server's client CA authenticate as Milo's do (CN the user,
        // O the groups); without one, a bearer token passes through.
        let mut client_roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile_certs(&cp.dir.join("ca.crt")) {
            client_roots.add(cert).expect("Milo's client CA");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(client_roots))
            .allow_unauthenticated()
            .build()
            .expect("client verifier");
        let mut tls = rustls::ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .expect("tls");
        // HTTP/2 as a Go API server offers it (250 streams a connection), and HTTP/1.1.
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server = format!("https://{}", listener.local_addr().expect("addr"));
        // Upstream: the API server with its CA and no credentials of the proxy's own; for a caller
        // that authenticated by certificate, the admin's, impersonating it.
        let upstream = upstream_client(&cp.server, cp).await;
        let impersonating = admin_client(&cp.server, cp);
        let state = Arc::new(Mutex::new(State::default()));
        let serving = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, upstream, state) = (acceptor.clone(), upstream.clone(), Arc::clone(&serving));
                let impersonating = impersonating.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let identity = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(identity);
                    // A caller known by its certificate reaches the API server as the admin
                    // impersonating it.
                    let (upstream, identity) = match identity {
                        Some(identity) => (impersonating, Some(identity)),
                        None => (upstream, None),
                    };
                    let service = hyper::service::service_fn(move |request| {
                        proxy(request, upstream.clone(), identity.clone(), Arc::clone(&state))
                    });
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let mut builder =
                        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                    builder.http2().max_concurrent_streams(250);
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
        Milo { server, state, task, cp_kubeconfig: cp.kubeconfig.clone(), cp_server: cp.server.clone() }
    }

    /// `kubeconfig` (one of the API server's, e.g. a ServiceAccount's) pointed at the stand-in.
    pub fn kubeconfig(&self, kubeconfig: &std::path::Path, file: &std::path::Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        std::fs::write(file, text.replace(&self.cp_server, &self.server)).expect("write kubeconfig");
        file.to_owned()
    }

    /// The API server's admin kubeconfig (for the test's own writes, unscoped).
    pub fn admin_kubeconfig(&self) -> &std::path::Path {
        &self.cp_kubeconfig
    }

    pub fn set_fault(&self, project: &str, fault: Option<Fault>) {
        let mut state = self.state.lock().expect("state");
        match fault {
            Some(fault) => {
                state.faults.insert(project.to_owned(), fault);
                if let Some(cut) = state.cuts.remove(project) {
                    cut.cancel();
                }
            }
            None => {
                state.faults.remove(project);
            }
        }
    }

    /// Serve project `project` from its own API server `server` (its CA `cp`'s) from now on,
    /// every request passed through unscoped.
    pub async fn route(&self, project: &str, server: &str, cp: &ControlPlane) {
        let client = upstream_client(server, cp).await;
        self.state.lock().expect("state").routes.insert(project.to_owned(), client);
    }

    /// Requests served under each project's path so far.
    pub fn requests(&self) -> HashMap<String, u64> {
        self.state.lock().expect("state").requests.clone()
    }
}

fn rustls_pemfile_certs(path: &std::path::Path) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path).expect("cert file").map(|c| c.expect("cert")).collect()
}

/// An API server the stand-in passes requests to, over HTTP/2: every request a stream of one
/// connection, as Milo serves its projects in one process, so ten thousand projects' watches do
/// not cost the stand-in a socket each (its API servers allow the streams:
/// `--http2-max-streams-per-connection`).
#[derive(Clone)]
struct Upstream {
    http: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
    /// `https://host:port`, without a trailing slash.
    base: String,
}

async fn upstream_client(server: &str, cp: &ControlPlane) -> Upstream {
    let tls = rustls::ClientConfig::builder().with_root_certificates(roots(cp)).with_no_client_auth();
    upstream_over(server, tls)
}

/// [`upstream_client`] with the API server's admin certificate (which may impersonate).
fn admin_client(server: &str, cp: &ControlPlane) -> Upstream {
    use rustls::pki_types::pem::PemObject;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(cp.dir.join("admin.key")).expect("admin key");
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots(cp))
        .with_client_auth_cert(rustls_pemfile_certs(&cp.dir.join("admin.crt")), key)
        .expect("admin certificate");
    upstream_over(server, tls)
}

fn roots(cp: &ControlPlane) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile_certs(&cp.dir.join("ca.crt")) {
        roots.add(cert).expect("Milo's CA");
    }
    roots
}

/// Who a client certificate says its holder is: its CN, and its O as groups.
#[derive(Clone, Debug)]
struct Identity {
    user: String,
    groups: Vec<String>,
}

fn identity(certificate: &rustls::pki_types::CertificateDer<'_>) -> Option<Identity> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let subject = parsed.subject();
    let user = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect();
    Some(Identity { user, groups })
}

fn upstream_over(server: &str, tls: rustls::ClientConfig) -> Upstream {
    let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http2().build();
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build(connector);
    Upstream { http, base: server.trim_end_matches('/').to_owned() }
}

type Body = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// What project `key`'s fault answers instead of the upstream, if anything: a status at once;
/// silent, nothing until the fault is lifted (or changed), and then whatever it is by then.
async fn instead(key: &str, state: &Arc<Mutex<State>>) -> Option<Response<Body>> {
    loop {
        let fault = state.lock().expect("state").faults.get(key).copied();
        match fault {
            Some(Fault::Status(code)) => {
                return Some(status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)));
            }
            Some(Fault::Silent) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            None => return None,
        }
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let body = format!(r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","code":{}}}"#, code.as_u16());
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed_unsync());
    *response.status_mut() = code;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// `/…/projects/<p>/control-plane/<rest>` → (`p`, `/<rest>`).
fn project_path(path: &str) -> Option<(&str, String)> {
    let rest = path.strip_prefix(PREFIX)?;
    let (project, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("control-plane")?;
    (rest.is_empty() || rest.starts_with('/'))
        .then(|| (project, if rest.is_empty() { "/".to_owned() } else { rest.to_owned() }))
}

async fn proxy(
    request: Request<Incoming>,
    upstream: Upstream,
    mut identity: Option<Identity>,
    state: Arc<Mutex<State>>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let mut query = parts.uri.query().map(str::to_owned);
    let mut cut = None;
    let mut upstream = upstream;
    if project_path(&path).is_none() {
        if let Some(answer) = instead(ROOT, &state).await {
            return Ok(answer);
        }
        // Taken once past the fault: a request held through one is not ended by it.
        cut = Some(state.lock().expect("state").cuts.entry(ROOT.to_owned()).or_default().clone());
    }
    if let Some((project, rest)) = project_path(&path) {
        *state.lock().expect("state").requests.entry(project.to_owned()).or_default() += 1;
        if let Some(answer) = instead(project, &state).await {
            return Ok(answer);
        }
        let routed = {
            let mut state = state.lock().expect("state");
            cut = Some(state.cuts.entry(project.to_owned()).or_default().clone());
            state.routes.get(project).cloned()
        };
        if let Some(routed) = routed {
            // A project's own server has no admin of the stand-in's: a certificate's holder is
            // not known there (the tests route token callers only).
            upstream = routed;
            identity = None;
        } else if parts.method == http::Method::GET {
            let selector = format!("labelSelector={PROJECT_LABEL}%3D{project}");
            query = Some(match query {
                // A selector the caller gave is kept, the project's added to it.
                Some(q) if q.contains("labelSelector=") => q.replacen("labelSelector=", &format!("{selector}%2C"), 1),
                Some(q) if !q.is_empty() => format!("{q}&{selector}"),
                _ => selector,
            });
        }
        let uri = match &query {
            Some(q) => format!("{rest}?{q}"),
            None => rest,
        };
        parts.uri = uri.parse::<Uri>().unwrap_or_else(|_| Uri::from_static("/"));
    }
    // A certificate's holder, as the admin impersonating it: only the stand-in says who (the
    // caller's own impersonation headers go, or they would ride on the admin's authority).
    if let Some(identity) = &identity {
        let theirs: Vec<_> =
            parts.headers.keys().filter(|name| name.as_str().starts_with("impersonate-")).cloned().collect();
        for name in theirs {
            parts.headers.remove(name);
        }
        for (name, value) in std::iter::once(("impersonate-user", &identity.user))
            .chain(identity.groups.iter().map(|g| ("impersonate-group", g)))
        {
            if let Ok(value) = http::HeaderValue::from_str(value) {
                parts.headers.append(name, value);
            }
        }
    }
    // The upstream's own scheme and authority: over HTTP/2 a request's URI carries the
    // stand-in's.
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!("{}{path_and_query}", upstream.base).parse::<Uri>().unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = http::Version::HTTP_2;
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
    };
    parts.headers.remove(http::header::HOST);
    // Hop-by-hop headers have no place in HTTP/2.
    parts.headers.remove(http::header::CONNECTION);
    parts.headers.remove(http::header::TRANSFER_ENCODING);
    parts.headers.remove(http::header::UPGRADE);
    parts.headers.remove("keep-alive");
    let request = Request::from_parts(parts, Full::new(body));
    match upstream.http.request(request).await {
        Ok(response) => Ok(response.map(|body| {
            let body = body.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            match cut {
                // Ends with the project's cut: a watch in flight ends when a fault is set.
                Some(cut) => {
                    use futures::StreamExt;
                    let frames = http_body_util::BodyStream::new(body).take_until(cut.cancelled_owned());
                    http_body_util::StreamBody::new(frames).boxed_unsync()
                }
                None => body.boxed_unsync(),
            }
        })),
        Err(error) => {
            eprintln!("milo stand-in: upstream failed: {error}");
            Ok(status(StatusCode::BAD_GATEWAY))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::project_path;

    #[test]
    fn paths_under_a_project() {
        let p = "/apis/resourcemanager.miloapis.com/v1alpha1/projects/acme/control-plane/api/v1/namespaces";
        assert_eq!(project_path(p), Some(("acme", "/api/v1/namespaces".to_owned())));
        assert_eq!(
            project_path("/apis/resourcemanager.miloapis.com/v1alpha1/projects/acme/control-plane"),
            Some(("acme", "/".to_owned()))
        );
        assert_eq!(project_path("/apis/resourcemanager.miloapis.com/v1alpha1/projects/acme"), None);
        assert_eq!(project_path("/apis/resourcemanager.miloapis.com/v1alpha1/projects"), None);
        assert_eq!(project_path("/api/v1/namespaces"), None);
    }
}

/// What a Milo world is made of, for the suites that use the stand-in.
pub mod world {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    use kube::{Api, Client};
    use serde_json::json;

    use super::PROJECT_LABEL;
    use crate::control_plane::ControlPlane;
    use crate::helpers::{namespace, repo};

    /// The project kinds' CRDs and Milo's `Project` CRD on the stand-in's API server.
    pub fn install_crds(cp: &ControlPlane) {
        install_crds_with(&cp.kubeconfig);
    }

    /// [`install_crds`] with `kubeconfig` (e.g. a project server's).
    pub fn install_crds_with(kubeconfig: &std::path::Path) {
        for file in ["tests/crds/project.yaml", "tests/crds/milo.yaml", "tests/crds/milo-iam.yaml"] {
            let out = std::process::Command::new("kubectl")
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(["apply", "--server-side", "-f"])
                .arg(repo().join(file))
                .output()
                .expect("kubectl");
            assert!(out.status.success(), "applying {file}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    /// Milo's `Project`s at the root.
    pub fn projects(backing: &Client) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("resourcemanager.miloapis.com", "v1alpha1", "Project");
        Api::all_with(backing.clone(), &ApiResource::from_gvk_with_plural(&gvk, "projects"))
    }

    /// Project `name` at Milo's root, with its Ready condition `ready` when given.
    pub async fn project(backing: &Client, name: &str, ready: Option<&str>) {
        let api = projects(backing);
        let body = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": {"name": name}});
        api.patch(name, &PatchParams::apply("milo").force(), &Patch::Apply(&body)).await.expect("Project");
        if let Some(ready) = ready {
            let status = json!({"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test", "message": "",
                                           "lastTransitionTime": "2026-12-05T00:00:00Z"}]}});
            api.patch_status(name, &PatchParams::apply("milo").force(), &Patch::Apply(&status))
                .await
                .expect("Project status");
        }
    }

    /// Namespace `ns` of project `p`, serving `address` (proxy → service → held interface) when
    /// given, every object labelled for `p`; its hub namespace labelled `cluster-<p>`, returned.
    pub async fn project_namespace(backing: &Client, hub: &Client, p: &str, ns: &str, address: Option<&str>) -> String {
        namespace(backing, ns, &[(PROJECT_LABEL, p)]).await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(backing.clone());
        let uid = namespaces.get(ns).await.expect("ns").metadata.uid.expect("uid");
        let hub_ns = format!("ns-{uid}");
        namespace(hub, &hub_ns, &[("meta.datumapis.com/upstream-cluster-name", &format!("cluster-{p}"))]).await;
        let Some(address) = address else { return hub_ns };
        let labels = json!({PROJECT_LABEL: p, "app": "web"});
        let selector = json!({"matchLabels": {"app": "web"}});
        let objects = [
            (
                "NetworkService",
                json!({"metadata": {"labels": labels}, "spec": {"networkInterfaces": {"selector": selector}}}),
            ),
            (
                "NetworkInterface",
                json!({"metadata": {"labels": labels}, "spec": {"addresses": [{"address": address}]}, "status": {"phase": "Bound"}}),
            ),
            (
                "HTTPProxy",
                json!({"metadata": {"labels": labels}, "spec": {"rules": [{"backends": [{"networkService": {"name": "web"}}]}]}}),
            ),
        ];
        for (kind, body) in objects {
            crate::soak::project::put(backing, ns, kind, "web", body).await.expect("project object");
        }
        hub_ns
    }
}
