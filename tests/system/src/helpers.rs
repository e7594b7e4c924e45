//! What the whole-system suites share: binaries, namespaces, records, copies, the webhook
//! registered on the API server, scraped metrics.

pub use std::path::{Path, PathBuf};
pub use std::process::Child;
pub use std::time::{Duration, Instant};

pub use crate::control_plane::{ControlPlane, shared, spawn_guarded};
pub use k8s_openapi::api::core::v1::Namespace;
pub use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
pub use kube::{Api, Client};
pub use serde_json::json;

pub const COPY_LABEL: &str = "networking.datumapis.com/vpc-endpointslice-projection";

pub use crate::control_plane::repo;

pub fn binary(name: &str) -> PathBuf {
    // Test binaries live in target/<profile>/deps; the workspace's binaries one level up.
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_owned();
    let path = dir.join(name);
    assert!(path.exists(), "{} is not built: run the README's test command (cargo test --workspace)", path.display());
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

pub async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = edgegate::core::crd::crd();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the CRD: {e}"),
    }
    let start = Instant::now();
    loop {
        let got = crds.get("edgereachabilities.networking.datumapis.com").await.expect("crd");
        let established = got
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if established {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "CRD not established");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A stand-in CRD for a kind the test does not run the operator of (cert-manager's, the Prometheus
/// Operator's): any spec is accepted, so the API server can validate the rest of a render.
pub async fn stand_in_crd(client: &Client, group: &str, kind: &str, plural: &str) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "listKind": format!("{kind}List"), "singular": kind.to_lowercase()},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.create(&PostParams::default(), &serde_json::from_value(crd).expect("crd")).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("stand-in CRD {plural}.{group}: {e}"),
    }
}

pub async fn namespace(client: &Client, name: &str, labels: &[(&str, &str)]) {
    if let Err(e) = try_namespace(client, name, labels).await {
        panic!("creating namespace {name}: {e}");
    }
}

/// A namespace created, or already there.
pub async fn try_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// An EndpointSlice, a copy if `copy`. Every slice carries `edgegate-e2e: <test>` so that each
/// test's pruners (cluster-wide, selecting by that label too) judge only that test's copies.
pub fn slice(test: &str, name: &str, copy: bool, addresses: &[&str]) -> EndpointSlice {
    let mut labels = std::collections::BTreeMap::from([("edgegate-e2e".to_owned(), test.to_owned())]);
    if copy {
        labels.insert(COPY_LABEL.to_owned(), "true".to_owned());
    }
    EndpointSlice {
        metadata: ObjectMeta { name: Some(name.into()), labels: Some(labels), ..ObjectMeta::default() },
        address_type: "IPv6".into(),
        endpoints: Some(
            addresses.iter().map(|a| Endpoint { addresses: vec![(*a).to_owned()], ..Endpoint::default() }).collect(),
        ),
        ports: None,
    }
}

/// The entries of the `default` record of hub namespace `hub_ns`, if it exists.
pub async fn record(hub: &Client, hub_ns: &str) -> Option<Vec<String>> {
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(hub.clone(), hub_ns);
    api.get_opt("default").await.expect("get record").map(|r| r.entries().to_vec())
}

/// Write (create or replace) the namespace's `default` record by server-side apply.
pub async fn set_record(client: &Client, ns: &str, addresses: &[&str]) {
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(client.clone(), ns);
    let record = json!({
        "apiVersion": "networking.datumapis.com/v1alpha", "kind": "EdgeReachability",
        "metadata": {"name": "default", "namespace": ns}, "spec": {"addresses": addresses},
    });
    api.patch("default", &PatchParams::apply("edgegate-e2e").force(), &Patch::Apply(&record))
        .await
        .expect("apply record");
}

pub async fn delete_record(client: &Client, ns: &str) {
    let api: Api<edgegate::EdgeReachability> = Api::namespaced(client.clone(), ns);
    api.delete("default", &DeleteParams::default()).await.expect("delete record");
}

/// Create a slice; `Err` carries the API server's message.
pub async fn create(client: &Client, ns: &str, s: &EndpointSlice, dry_run: bool) -> Result<(), String> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let params = PostParams { dry_run, ..PostParams::default() };
    api.create(&params, s).await.map(|_| ()).map_err(|e| e.to_string())
}

pub async fn exists(client: &Client, ns: &str, name: &str) -> bool {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    api.get_opt(name).await.expect("get").is_some()
}

pub async fn eventually(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    start.elapsed()
}

/// May this test do what needs root (`why`: network namespaces, chroot)? Not without it: then it
/// prints that it is skipped, except under CI (`CI` set; CI runs as root), where a test that
/// cannot run fails instead.
pub fn runs_as_root(why: &str) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1)) == Some("0") {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI=true but not root: {why} needs root");
    eprintln!("skipped: {why} needs root (CI runs as root)");
    false
}

/// libfaketime's preload library (Debian's package `libfaketime`), installed with apt-get where
/// it is missing (root; one install at a time across test processes).
pub fn libfaketime() -> PathBuf {
    let find = || {
        let out = std::process::Command::new("dpkg").args(["-L", "libfaketime"]).output().ok()?;
        let listed = String::from_utf8_lossy(&out.stdout).into_owned();
        listed.lines().find(|l| l.ends_with("/libfaketime.so.1")).map(PathBuf::from).filter(|p| p.exists())
    };
    if let Some(lib) = find() {
        return lib;
    }
    let lock = std::fs::File::create(std::env::temp_dir().join("edgegate-apt.lock")).expect("apt lock file");
    lock.lock().expect("apt lock");
    if let Some(lib) = find() {
        return lib;
    }
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "-qq", "libfaketime"]) {
        assert!(apt(&["update", "-qq"]), "apt-get update failed (libfaketime is needed: root and Debian's packages)");
        assert!(apt(&["install", "-y", "-qq", "libfaketime"]), "apt-get install libfaketime failed");
    }
    find().expect("libfaketime.so.1 installed")
}

/// Wait (30 s at most) until `p` answers 200 on `/readyz`: plain HTTP on its admin port, or HTTPS
/// verified by `ca` (the webhook's TLS listener).
pub async fn until_ready(what: &str, p: &Process, ca: Option<&Path>) -> Duration {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{}/readyz", p.port);
    eventually(Duration::from_secs(30), what, async || http_status(&url, ca) == 200).await
}

/// A kustomization of the repo's `resources` and `components` (paths under deploy/), written to
/// target/kustomize-test/NAME: what a user's own kustomization of those lines is.
pub fn kustomization(name: &str, resources: &[&str], components: &[&str]) -> PathBuf {
    let dir = repo().join("target/kustomize-test").join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let list = |paths: &[&str]| paths.iter().map(|p| format!("  - ../../../deploy/{p}\n")).collect::<String>();
    let text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{}components:\n{}",
        list(resources),
        list(components)
    );
    std::fs::write(dir.join("kustomization.yaml"), text).expect("write");
    dir
}

/// A running binary, killed when dropped.
pub struct Process {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Process {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Process {
    /// Stop it and wait until it is gone: SIGTERM to the watchdog, which stops the binary (KILL
    /// after 3 s) and waits for it; SIGKILL would leave the binary running behind it. Once only.
    pub fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}

/// deploy/components/dev-certs/certs, made by certs/dev-certs.sh once per test binary if missing:
/// what the dev overlay and any render with the dev certificate source read.
pub fn deploy_dev_certs() -> PathBuf {
    static MADE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let certs = repo().join("deploy/components/dev-certs/certs");
        if !certs.join("tls.crt").exists() {
            let out = std::process::Command::new(repo().join("certs/dev-certs.sh"))
                .arg(&certs)
                .output()
                .expect("dev-certs.sh");
            assert!(out.status.success(), "dev-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
        }
        certs
    })
    .clone()
}

pub fn dev_certs() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgegate-e2e-certs-{}", std::process::id()));
    if !dir.join("tls.crt").exists() {
        let out =
            std::process::Command::new(repo().join("certs/dev-certs.sh")).arg(&dir).output().expect("dev-certs.sh");
        assert!(out.status.success());
    }
    dir
}

pub fn start_webhook(cp: &ControlPlane, kubeconfig: &Path) -> Process {
    let certs = dev_certs();
    let port = free_port();
    let log = cp.dir.join(format!("webhook-{port}.log"));
    let args = [
        "--kubernetes".to_owned(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--listen=127.0.0.1:{port}"),
        format!("--tls-cert={}", certs.join("tls.crt").display()),
        format!("--tls-key={}", certs.join("tls.key").display()),
        "--shutdown-grace=1s".to_owned(),
    ];
    let child = spawn_guarded(&binary("edgegate-webhook"), &args, &log);
    Process { child, port, log }
}

/// A pruner judging only the copies of `test`; with no grace unless `extra` gives one, so that
/// the suites measure the pruner's own latency.
pub fn start_pruner(cp: &ControlPlane, test: &str, kubeconfig: &Path, extra: &[&str]) -> Process {
    let port = free_port();
    let log = cp.dir.join(format!("pruner-{port}.log"));
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--listen=127.0.0.1:{port}"),
        format!("--copy-selector={COPY_LABEL}=true,edgegate-e2e={test}"),
    ];
    if !extra.iter().any(|a| a.starts_with("--grace")) {
        args.push("--grace=0".to_owned());
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let child = spawn_guarded(&binary("edgegate-pruner"), &args, &log);
    Process { child, port, log }
}

pub fn http_status(url: &str, ca: Option<&Path>) -> u16 {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2"]);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    let out = cmd.arg(url).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

pub fn metrics(p: &Process) -> String {
    let out = std::process::Command::new("curl")
        .args(["-s", &format!("http://127.0.0.1:{}/metrics", p.port)])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn counter(text: &str, series: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap_or(0))).unwrap_or(0)
}

/// deploy/'s ValidatingWebhookConfiguration, pointed at a local process by url with the dev CA,
/// and scoped to namespaces labelled `edgegate-e2e=<scope>` so other tests are not affected.
pub async fn register_webhook(client: &Client, port: u16, scope: &str) {
    register(client, port, scope, true).await;
}

/// The same without its matchConditions, as an API server that lacks them would call the
/// webhook: every review reaches it, so a test proves the webhook's own answer.
pub async fn register_webhook_called_always(client: &Client, port: u16, scope: &str) {
    register(client, port, scope, false).await;
}

async fn register(client: &Client, port: u16, scope: &str, match_conditions: bool) {
    let text = std::fs::read_to_string(repo().join("deploy/base/admission/validating-webhook.yaml")).expect("vwc");
    let mut vwc: serde_json::Value = serde_saphyr::from_str(&text).expect("vwc parses");
    let ca = std::fs::read(dev_certs().join("ca.crt")).expect("ca");
    let hook = &mut vwc["webhooks"][0];
    // Enforcing, as components/enforce makes the base's configuration.
    hook["failurePolicy"] = json!("Fail");
    hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": base64(&ca)});
    hook["namespaceSelector"]["matchLabels"] = json!({"edgegate-e2e": scope});
    if !match_conditions && let Some(hook) = hook.as_object_mut() {
        hook.remove("matchConditions");
    }
    vwc["metadata"]["name"] = json!(format!("edgegate-{scope}"));
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let vwc = serde_json::from_value(vwc).expect("vwc type");
    api.create(&PostParams::default(), &vwc).await.expect("create vwc");
}

/// deploy/'s ValidatingWebhookConfiguration as `edgegate-<scope>`, scoped to namespaces labelled
/// `edgegate-e2e=<scope>`, calling `url` with the dev CA under `failure_policy` (`Fail` as
/// components/enforce sets it, `Ignore` as the base watches) with a `timeout` in seconds.
pub async fn register_webhook_at(client: &Client, scope: &str, url: &str, failure_policy: &str, timeout: u64) {
    let text = std::fs::read_to_string(repo().join("deploy/base/admission/validating-webhook.yaml")).expect("vwc");
    let mut vwc: serde_json::Value = serde_saphyr::from_str(&text).expect("vwc parses");
    let ca = std::fs::read(dev_certs().join("ca.crt")).expect("ca");
    let hook = &mut vwc["webhooks"][0];
    hook["failurePolicy"] = json!(failure_policy);
    hook["timeoutSeconds"] = json!(timeout);
    hook["clientConfig"] = json!({"url": url, "caBundle": base64(&ca)});
    hook["namespaceSelector"] = json!({"matchLabels": {"edgegate-e2e": scope}});
    vwc["metadata"]["name"] = json!(format!("edgegate-{scope}"));
    let api: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(vwc).expect("vwc type")).await.expect("create vwc");
}

pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// RSS of the process a watchdog shell runs (its one child).
pub fn rss_mib(p: &Process) -> u64 {
    let pid = pid_of(p);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches(" kB").parse().ok()))
        .unwrap_or(0);
    kib / 1024
}

/// CPU seconds (user + system) `pid` has used.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let fields: Vec<&str> =
        stat.rsplit_once(") ").map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: f64 = [11, 12].iter().filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok())).sum();
    ticks / 100.0
}

/// Send signal `name` (`TERM`, `KILL`, `STOP`, `CONT`) to process `pid`.
pub fn signal(pid: u32, name: &str) {
    let status =
        std::process::Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// Whether process `pid` has exited: gone, or a zombie not reaped yet.
pub fn exited(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `pid (comm) state ...`: the state follows the last parenthesis (comm may hold one).
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, None | Some('Z' | 'X'))
}

/// Until process `pid` has exited (within `limit`); how long that took.
pub async fn until_exited(pid: u32, limit: Duration) -> Duration {
    eventually(limit, "the stopped process exited", async || exited(pid)).await
}

/// The pid under a watchdog shell.
pub fn pid_of(p: &Process) -> u32 {
    let shell = p.child.id();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
    children.split_whitespace().next().and_then(|p| p.parse().ok()).expect("the watched process")
}

/// How many reviews reached a webhook: the sum of its `edgegate_admission_reviews_total`.
pub fn webhook_reviews(port: u16, ca: &Path) -> u64 {
    let out = std::process::Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}/metrics"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("edgegate_admission_reviews_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// `cmd` (its arguments, environment and directory) under coreutils' `timeout`, no stdin, its
/// output captured; fails the test if it took more than `seconds`.
pub fn run_bounded(cmd: &mut std::process::Command, seconds: u64) -> std::process::Output {
    let mut bounded = std::process::Command::new("timeout");
    bounded.arg("--kill-after=5").arg(seconds.to_string()).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => bounded.env(k, v),
            None => bounded.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        bounded.current_dir(dir);
    }
    let out = bounded.stdin(std::process::Stdio::null()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert_ne!(out.status.code(), Some(124), "{cmd:?} took more than {seconds}s");
    out
}

/// The `p` quantile (0 to 1) of `values`, the nearest by rank; zero when there are none.
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(((sorted.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
}
