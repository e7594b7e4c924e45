//! The hub API server's cost per admitted copy, four ways on one kube-apiserver
//! (scripts/vs-policy.sh runs this; not part of CI): no admission; the baseline
//! ValidatingAdmissionPolicy with the EdgeReachability as its parameter
//! (tests/policy/edgereachability-vap.yaml); edgegate's webhook as installed, one replica of
//! overlays/dev's Deployment run as its Pod in a network namespace, published behind deploy/'s
//! Service by kube-controller-manager's EndpointSlice controller and called through the Service
//! reference (an endpoint address over HTTP/1.1, as a hub calls it); and edgegate's own policy mode (deploy/components/policy, when
//! present). Prints the answers to the decision table; a grid of record × slice sizes per mode
//! (dry-run creates: throughput, latency, API server and webhook CPU per create) and its medians
//! over rounds; the webhook's TLS connections per 1,000 calls; with `VS_PROFILE=1`, CPU profiles
//! of kube-apiserver; and the webhook calls its matchConditions save.

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::netns::NetNs;
use edgegate_system_tests::pod::{Render, RunningPod, kustomization_with};
use edgegate_system_tests::shipped::{reviews, webhook_in};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;

const SCOPE: &str = "vs";
const VAP: &str = "tests/policy/edgereachability-vap.yaml";
const POLICY: &str = "deploy/components/policy/policy.yaml";
const RECORD_SIZES: [usize; 4] = [1, 100, 1_000, 8_192];
const SLICE_SIZES: [usize; 3] = [1, 100, 1_000];
const IN_FLIGHT: usize = 16;
const WEBHOOK_PORT: u16 = 8443;
const PROFILE_SECONDS: u64 = 15;

/// What judges copies: nothing, the baseline policy, edgegate's webhook, or edgegate's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    None,
    Vap,
    Webhook,
    Policy,
}

impl Mode {
    fn title(self) -> &'static str {
        match self {
            Mode::None => "no admission",
            Mode::Vap => "ValidatingAdmissionPolicy (baseline)",
            Mode::Webhook => "edgegate webhook (Service)",
            Mode::Policy => "edgegate policy",
        }
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The `i`th address of every record: record n names the first n, so its last is `n - 1`.
fn record_address(i: usize) -> String {
    format!("fd20:b:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)
}

/// An address no record names.
fn unnamed_address(i: usize) -> String {
    format!("fd20:e:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)
}

/// A copy of `endpoints` endpoints of one address each, of which only the last, `named`, is in a
/// record (the record's last address too): a rule that looks address by address scans them all.
fn last_named(name: &str, endpoints: usize, named: &str) -> EndpointSlice {
    let mut addresses: Vec<String> = (0..endpoints - 1).map(unnamed_address).collect();
    addresses.push(named.to_owned());
    let refs: Vec<&str> = addresses.iter().map(String::as_str).collect();
    slice(SCOPE, name, true, &refs)
}

/// An admin client that waits for an answer as long as the API server works on it (its
/// request timeout is 60 s): in the costliest cells a create waits behind fifteen others for
/// longer than the binaries' 15 s read timeout, and a create given up on would still cost the API
/// server its CPU.
async fn patient_client(cp: &ControlPlane) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&cp.kubeconfig).expect("admin kubeconfig");
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("admin client config");
    config.read_timeout = Some(Duration::from_secs(70));
    Client::try_from(config).expect("admin client")
}

/// The namespaces and their records: the answers' cases, `vs-r<n>` with an n-address record per
/// record size of the grid, and `vs-mix` for the matchConditions count.
async fn records(client: &Client) {
    let grid = RECORD_SIZES.map(|n| format!("vs-r{n}"));
    let named = ["vs-none", "vs-named", "vs-empty", "vs-mix"];
    for ns in named.iter().copied().chain(grid.iter().map(String::as_str)) {
        namespace(client, ns, &[("edgegate-e2e", SCOPE)]).await;
    }
    set_record(client, "vs-named", &["fd20:0:b::1", "FD20:0:B:0::2"]).await;
    set_record(client, "vs-empty", &[]).await;
    set_record(client, "vs-mix", &["fd20:0:c::1"]).await;
    for (n, ns) in RECORD_SIZES.iter().zip(&grid) {
        let addresses: Vec<String> = (0..*n).map(record_address).collect();
        set_record(client, ns, &addresses.iter().map(String::as_str).collect::<Vec<_>>()).await;
    }
}

/// Copies the record does not name, stored before any admission is in force, for the UPDATE
/// cases: `unnamed`, and `leaving`, terminating and held by its last finalizer.
async fn stored_copies(client: &Client) {
    create(client, "vs-named", &slice(SCOPE, "unnamed", true, &["fd20:0:b::9"]), false).await.expect("unnamed");
    let mut leaving = slice(SCOPE, "leaving", true, &["fd20:0:b::9"]);
    leaving.metadata.finalizers = Some(vec!["edgegate.test/hold".to_owned()]);
    create(client, "vs-named", &leaving, false).await.expect("leaving");
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "vs-named");
    api.delete("leaving", &DeleteParams::default()).await.expect("leaving is terminating");
}

/// deploy/'s policy (`edgegate policy`) as components/enforce makes it (failing closed and
/// denying) and scoped to the test's namespaces, as a List for kubectl; None while deploy/ lacks it.
fn edgegate_policy(cp: &ControlPlane) -> Option<PathBuf> {
    let text = std::fs::read_to_string(repo().join(POLICY)).ok()?;
    let mut docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("policy.yaml parses");
    docs.retain(|d| !d.is_null());
    for doc in &mut docs {
        if doc["kind"] == "ValidatingAdmissionPolicy" {
            doc["spec"]["failurePolicy"] = json!("Fail");
        }
        if doc["kind"] == "ValidatingAdmissionPolicyBinding" {
            doc["spec"]["validationActions"] = json!(["Deny"]);
            doc["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] = json!({"edgegate-e2e": SCOPE});
        }
    }
    let path = cp.dir.join("edgegate-policy.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&path, list.to_string()).expect("write the policy");
    Some(path)
}

/// deploy/'s ValidatingWebhookConfiguration as components/enforce makes it (failing closed), its
/// Service reference unchanged, trusting the dev CA, scoped to the test's namespaces; without its
/// matchConditions unless `match_conditions`, as an API server without them calls it.
async fn register_webhook(client: &Client, match_conditions: bool) {
    let text = std::fs::read_to_string(repo().join("deploy/base/admission/validating-webhook.yaml")).expect("vwc");
    let mut vwc: serde_json::Value = serde_saphyr::from_str(&text).expect("vwc parses");
    let ca = std::fs::read(deploy_dev_certs().join("ca.crt")).expect("dev CA");
    let hook = &mut vwc["webhooks"][0];
    hook["failurePolicy"] = json!("Fail");
    hook["clientConfig"]["caBundle"] = json!(base64(&ca));
    hook["namespaceSelector"]["matchLabels"] = json!({"edgegate-e2e": SCOPE});
    if !match_conditions && let Some(hook) = hook.as_object_mut() {
        hook.remove("matchConditions");
    }
    vwc["metadata"]["name"] = json!(format!("edgegate-{SCOPE}"));
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(vwc).expect("vwc type")).await.expect("create vwc");
}

fn verdict(r: &Result<(), String>) -> String {
    match r {
        Ok(()) => "admitted".to_owned(),
        Err(e) if e.contains("not carried") => "refused".to_owned(),
        Err(e) => format!("error: {}", e.chars().take(90).collect::<String>()),
    }
}

/// A write of the answers table: a dry-run create, or a dry-run merge patch of a stored copy.
enum Write {
    Create(&'static str, Box<EndpointSlice>),
    Update(&'static str, &'static str, serde_json::Value),
}

impl Write {
    fn create(ns: &'static str, s: EndpointSlice) -> Write {
        Write::Create(ns, Box::new(s))
    }

    async fn attempt(&self, client: &Client) -> Result<(), String> {
        match self {
            Write::Create(ns, s) => create(client, ns, s, true).await,
            Write::Update(ns, name, patch) => {
                let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
                let params = PatchParams { dry_run: true, ..PatchParams::default() };
                api.patch(name, &params, &Patch::Merge(patch)).await.map(|_| ()).map_err(|e| e.to_string())
            }
        }
    }
}

fn cases() -> Vec<(&'static str, Write)> {
    let big = record_address(8191);
    vec![
        ("no record", Write::create("vs-none", slice(SCOPE, "c1", true, &["fd20:0:b::9"]))),
        ("record names it", Write::create("vs-named", slice(SCOPE, "c2", true, &["fd20:0:b::1"]))),
        ("record names none", Write::create("vs-named", slice(SCOPE, "c3", true, &["fd20:0:b::9"]))),
        ("empty record", Write::create("vs-empty", slice(SCOPE, "c4", true, &["fd20:0:b::1"]))),
        ("not a copy", Write::create("vs-empty", slice(SCOPE, "c5", false, &["fd20:0:b::1"]))),
        ("copy without endpoints", Write::create("vs-empty", slice(SCOPE, "c6", true, &[]))),
        ("record spells it FD20:0:B:0::2", Write::create("vs-named", slice(SCOPE, "c7", true, &["fd20:0:b::2"]))),
        ("200 endpoints, 8,192-address record, last named", Write::create("vs-r8192", last_named("c8", 200, &big))),
        ("1,000 endpoints, 8,192-address record, last named", Write::create("vs-r8192", last_named("c9", 1000, &big))),
        (
            "UPDATE: a label on a copy the record does not name",
            Write::Update("vs-named", "unnamed", json!({"metadata": {"labels": {"claimed": "yes"}}})),
        ),
        (
            "UPDATE: the last finalizer leaves a terminating unnamed copy",
            Write::Update("vs-named", "leaving", json!({"metadata": {"finalizers": null}})),
        ),
    ]
}

/// A grid cell's figures, for the medians.
struct Cell {
    mode: Mode,
    record: usize,
    slice: usize,
    rate: f64,
    api_us: f64,
    webhook_us: f64,
}

/// `n` dry-run creates of `s` in `ns`, `IN_FLIGHT` at a time, none started after `VS_CELL_SECONDS`
/// (default 15: a slow engine's cell is measured over fewer creates, not for longer): the round
/// trips of those admitted, and the errors of the others (a rule over its cost budget fails, it
/// does not stall).
async fn load(client: &Client, ns: &str, s: &EndpointSlice, n: usize) -> (Vec<Duration>, Vec<String>) {
    let budget = Duration::from_secs(env_or("VS_CELL_SECONDS", 15) as u64);
    let started = Instant::now();
    let results: Vec<Result<Duration, String>> = futures::stream::iter(0..n)
        .take_while(|_| std::future::ready(started.elapsed() < budget))
        .map(|_| async {
            let start = Instant::now();
            create(client, ns, s, true).await.map(|()| start.elapsed())
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let (mut times, mut errors) = (Vec::new(), Vec::new());
    for r in results {
        match r {
            Ok(t) => times.push(t),
            Err(e) => errors.push(e),
        }
    }
    times.sort();
    (times, errors)
}

/// The `q` quantile of round trips, in ms.
fn quantile_ms(times: &[Duration], q: f64) -> f64 {
    percentile(times, q).as_secs_f64() * 1000.0
}

/// TCP connections the API server opened to the webhook while a cell ran, from inside its
/// namespace: new ones (the namespace's TCP PassiveOpens, so each a TLS handshake), and, sampled
/// every 200 ms, the most established at once and the distinct peer ports seen.
struct Connections {
    opens: u64,
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<(usize, HashSet<String>)>,
}

/// The namespace's TCP PassiveOpens (connections accepted) from its /proc/net/snmp.
fn passive_opens(netns: &NetNs) -> u64 {
    let out = Command::new("ip").args(["netns", "exec", &netns.name, "cat", "/proc/net/snmp"]).output().expect("snmp");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:")).map(|l| l.split_whitespace());
    let (names, values) = (tcp.next().expect("Tcp names"), tcp.next().expect("Tcp values"));
    names.zip(values).find(|(name, _)| *name == "PassiveOpens").and_then(|(_, v)| v.parse().ok()).expect("PassiveOpens")
}

/// The peers of the connections established to `port` in namespace `netns` now.
fn established_peers(netns: &str, port: u16) -> Vec<String> {
    let filter = format!("( sport = :{port} )");
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "ss", "-Htn", "state", "established", &filter])
        .output()
        .expect("ss");
    // With a state filter the columns are Recv-Q, Send-Q, local and peer address.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

impl Connections {
    fn watch(netns: &NetNs, port: u16) -> Connections {
        let stop = Arc::new(AtomicBool::new(false));
        let (stopped, name) = (Arc::clone(&stop), netns.name.clone());
        let sampler = std::thread::spawn(move || {
            let (mut most, mut peers) = (0, HashSet::new());
            while !stopped.load(Ordering::Relaxed) {
                let now = established_peers(&name, port);
                most = most.max(now.len());
                peers.extend(now);
                std::thread::sleep(Duration::from_millis(200));
            }
            (most, peers)
        });
        Connections { opens: passive_opens(netns), stop, sampler }
    }

    /// New connections, the most at once, distinct peers.
    fn finish(self, netns: &NetNs) -> (u64, usize, usize) {
        let opens = passive_opens(netns) - self.opens;
        self.stop.store(true, Ordering::Relaxed);
        let (most, peers) = self.sampler.join().expect("sampler");
        (opens, most, peers.len())
    }
}

/// What every part measures on: the control plane with the webhook replica behind its Service,
/// and edgegate's policy as the test applies it if deploy/ has it. (Fields drop in order: the
/// replica before its namespace, both before the control plane.)
struct Bench {
    replica: RunningPod,
    netns: NetNs,
    client: Client,
    policy: Option<PathBuf>,
    cp: ControlPlane,
}

impl Bench {
    async fn start() -> Bench {
        let cp = ControlPlane::own();
        // The EndpointSlice controller publishes the replica behind the Service. It and the
        // other two controllers idle during the measurement: dry-run creates store nothing, so
        // they see no event.
        cp.start_controller_manager();
        let client = patient_client(&cp).await;
        // overlays/dev (enforcing, the dev certificate) but its admission configurations: the
        // CRD, edgegate-system with the webhook's Service, Secret and RBAC. Each mode is put in
        // force by the test.
        deploy_dev_certs();
        let render = Render::of(&kustomization_with("vs-policy", &["overlays/dev"], &[], ""));
        render.apply_but_admission(&cp);
        records(&client).await;
        stored_copies(&client).await;
        let netns = NetNs::create();
        let replica = webhook_in(&cp, &render, 0, &netns, Duration::ZERO).await;
        assert_eq!(replica.port("https"), WEBHOOK_PORT, "the rendered containerPort, where connections are counted");
        let policy = edgegate_policy(&cp);
        if policy.is_none() {
            eprintln!("vs: no {POLICY}: the edgegate policy mode is left out");
        }
        Bench { replica, netns, client, policy, cp }
    }

    fn modes(&self) -> Vec<Mode> {
        let policy = self.policy.as_ref().map(|_| Mode::Policy);
        [Mode::None, Mode::Vap, Mode::Webhook].into_iter().chain(policy).collect()
    }

    /// Wait until a copy the record does not name is refused, or admitted.
    async fn until_probe(&self, refused: bool) {
        let bad = slice(SCOPE, "probe", true, &["fd20:0:b::9"]);
        let what = if refused { "the mode refuses" } else { "nothing refuses" };
        eventually(Duration::from_secs(60), what, async || {
            (verdict(&create(&self.client, "vs-empty", &bad, true).await) == "refused") == refused
        })
        .await;
    }

    /// Take every mode out of force, and wait until none refuses any more.
    async fn clear(&self) {
        self.cp.kubectl_ok(&["delete", "--ignore-not-found", "-f", &repo().join(VAP).display().to_string()]);
        if let Some(policy) = &self.policy {
            self.cp.kubectl_ok(&["delete", "--ignore-not-found", "-f", &policy.display().to_string()]);
        }
        let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let _ = vwcs.delete(&format!("edgegate-{SCOPE}"), &DeleteParams::default()).await;
        self.until_probe(false).await;
    }

    /// Put `mode` (alone) in force and wait until a known-bad copy shows it.
    async fn switch(&self, mode: Mode, match_conditions: bool) {
        self.clear().await;
        match mode {
            Mode::None => {}
            Mode::Vap => {
                self.cp.kubectl_ok(&["apply", "-f", &repo().join(VAP).display().to_string()]);
            }
            Mode::Webhook => register_webhook(&self.client, match_conditions).await,
            Mode::Policy => {
                let policy = self.policy.as_ref().expect("the policy mode only with deploy/'s policy");
                self.cp.kubectl_ok(&["apply", "-f", &policy.display().to_string()]);
            }
        }
        self.until_probe(mode != Mode::None).await;
        tokio::time::sleep(Duration::from_secs(2)).await; // every API server watcher caught up
    }

    /// Part 1: each mode's answers (and round trips) to the decision table's cases.
    async fn answers(&self) {
        let (cases, modes) = (cases(), self.modes());
        let mut table = vec![String::new(); cases.len()];
        for &mode in &modes {
            self.switch(mode, true).await;
            for (row, (_, write)) in table.iter_mut().zip(&cases) {
                let start = Instant::now();
                let r = write.attempt(&self.client).await;
                row.push_str(&format!(" | {} ({} ms)", verdict(&r), start.elapsed().as_millis()));
            }
        }
        let titles: Vec<&str> = modes.iter().map(|m| m.title()).collect();
        eprintln!("vs: | case | {} |", titles.join(" | "));
        for (row, (what, _)) in table.iter().zip(&cases) {
            eprintln!("vs: | {what}{row} |");
        }
    }

    /// Part 2: one round of the grid, every mode in turn (starting one further each round), and
    /// with `VS_PROFILE=1` in the last round a profile per admitting mode.
    async fn round(&self, round: usize, last: bool, n: usize, cells: &mut Vec<Cell>) {
        let mut order = self.modes();
        let turn = round % order.len();
        order.rotate_left(turn);
        for mode in order {
            self.switch(mode, true).await;
            for record in RECORD_SIZES {
                for slice in SLICE_SIZES {
                    let cell = if mode == Mode::Webhook && record == 1 && slice == 1 {
                        self.cell_counting_connections(round, n).await
                    } else {
                        self.cell(round, mode, record, slice, n).await
                    };
                    cells.push(cell);
                }
            }
            if last && mode != Mode::None && std::env::var("VS_PROFILE").is_ok_and(|v| v == "1") {
                self.profile(mode).await;
            }
        }
    }

    /// `n` creates of a `slice`-endpoint copy against a `record`-address record, in `mode`.
    async fn cell(&self, round: usize, mode: Mode, record: usize, slice: usize, n: usize) -> Cell {
        let (ns, s) = (format!("vs-r{record}"), last_named("load", slice, &record_address(record - 1)));
        let (apiserver, webhook) = (self.cp.pid("kube-apiserver"), self.replica.pid());
        let (cpu, webhook_cpu, start) = (cpu_seconds(apiserver), cpu_seconds(webhook), Instant::now());
        let (times, errors) = load(&self.client, &ns, &s, n).await;
        let wall = start.elapsed().as_secs_f64();
        let n = times.len() + errors.len();
        let per_create = |seconds: f64| seconds / n as f64 * 1e6;
        let api_us = per_create(cpu_seconds(apiserver) - cpu);
        // The replica idles in the other modes; only its work in this one counts.
        let webhook_us = if mode == Mode::Webhook { per_create(cpu_seconds(webhook) - webhook_cpu) } else { 0.0 };
        let rate = n as f64 / wall;
        eprintln!(
            "vs: round {round} {mode:?} record {record} slice {slice}: {rate:.0} creates/s, p50 {:.1} ms, p99 {:.1} ms, API server CPU {api_us:.0} µs/create, webhook CPU {webhook_us:.0} µs/create",
            quantile_ms(&times, 0.5),
            quantile_ms(&times, 0.99),
        );
        if let Some(first) = errors.first() {
            eprintln!(
                "vs: round {round} {mode:?} record {record} slice {slice}: {} of {n} creates failed, first: {first}",
                errors.len()
            );
        }
        Cell { mode, record, slice, rate, api_us, webhook_us }
    }

    /// The 1-address, 1-endpoint webhook cell, counting the connections the API server opens to
    /// the webhook meanwhile: how often it pays a TLS handshake.
    async fn cell_counting_connections(&self, round: usize, n: usize) -> Cell {
        let calls_before = reviews(&self.replica);
        let watch = Connections::watch(&self.netns, WEBHOOK_PORT);
        let cell = self.cell(round, Mode::Webhook, 1, 1, n).await;
        let (opens, most, peers) = watch.finish(&self.netns);
        let calls = reviews(&self.replica) - calls_before;
        eprintln!(
            "vs: round {round} Webhook TLS (record 1, slice 1): {calls} calls, {opens} new connections = {:.1} handshakes per 1,000 calls; at most {most} established at once, {peers} distinct peer ports seen (sampled every 200 ms)",
            opens as f64 * 1000.0 / calls.max(1) as f64
        );
        cell
    }

    /// A CPU profile of kube-apiserver over `PROFILE_SECONDS` of creates in the 1-address,
    /// 1-endpoint cell, saved to `$VS_PROFILE_DIR/<mode>.pb.gz` (default target/vs-profiles).
    async fn profile(&self, mode: Mode) {
        let dir = std::env::var_os("VS_PROFILE_DIR").map_or_else(|| repo().join("target/vs-profiles"), PathBuf::from);
        std::fs::create_dir_all(&dir).expect("profile dir");
        let file = dir.join(format!("{}.pb.gz", format!("{mode:?}").to_lowercase()));
        let fetch = tokio::task::spawn_blocking(self.fetch_profile(&file));
        let s = last_named("profile", 1, &record_address(0));
        let mut creates = 0;
        while !fetch.is_finished() {
            creates += load(&self.client, "vs-r1", &s, 64).await.0.len();
        }
        if !fetch.await.expect("profile fetch") {
            eprintln!("vs: profile {mode:?}: the API server gave no profile");
            return;
        }
        eprintln!(
            "vs: profile {mode:?} (record 1, slice 1): {creates} creates in {PROFILE_SECONDS} s, {}",
            file.display()
        );
        top(&self.cp.program("kube-apiserver"), &file, mode);
    }

    /// The fetch of a profile of `PROFILE_SECONDS` to `file`, as the admin (system:masters).
    fn fetch_profile(&self, file: &Path) -> impl FnOnce() -> bool + Send + 'static {
        let mut curl = Command::new("curl");
        let dir = &self.cp.dir;
        curl.args(["-sf", "--max-time", &(PROFILE_SECONDS + 30).to_string(), "--cacert"])
            .arg(dir.join("ca.crt"))
            .arg("--cert")
            .arg(dir.join("admin.crt"))
            .arg("--key")
            .arg(dir.join("admin.key"))
            .arg("-o")
            .arg(file)
            .arg(format!("{}/debug/pprof/profile?seconds={PROFILE_SECONDS}", self.cp.server));
        move || curl.status().is_ok_and(|s| s.success())
    }

    /// Part 3: the calls matchConditions save: 500 creates (a third of them without endpoints) and 1,000
    /// metadata-only updates, with and without them.
    async fn calls_saved(&self) {
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), "vs-mix");
        for with in [true, false] {
            self.switch(Mode::Webhook, with).await;
            let _ = api.delete_collection(&DeleteParams::default(), &Default::default()).await;
            let before = reviews(&self.replica);
            for i in 0..500 {
                let addresses: &[&str] = if i % 3 == 0 { &[] } else { &["fd20:0:c::1"] };
                create(&self.client, "vs-mix", &slice(SCOPE, &format!("mix-{i}"), true, addresses), false)
                    .await
                    .unwrap_or_else(|e| panic!("creating mix-{i}: {e}"));
            }
            for i in 0..1000 {
                let label = json!({"metadata": {"labels": {"claimed": format!("{i}")}}});
                api.patch(&format!("mix-{}", i % 500), &PatchParams::default(), &Patch::Merge(label))
                    .await
                    .unwrap_or_else(|e| panic!("labelling: {e}"));
            }
            eprintln!(
                "vs: matchConditions {}: 1,500 writes (500 creates, a third without endpoints; 1,000 label updates) → {} webhook calls",
                if with { "on" } else { "off" },
                reviews(&self.replica) - before
            );
        }
    }
}

/// The 25 functions of `profile` with the most cumulative CPU, if `go` is on PATH.
fn top(binary: &Path, profile: &Path, mode: Mode) {
    let out =
        Command::new("go").args(["tool", "pprof", "-top", "-cum", "-nodecount=25"]).arg(binary).arg(profile).output();
    match out {
        Ok(out) if out.status.success() => {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                eprintln!("vs: pprof {mode:?}: {line}");
            }
        }
        Ok(out) => eprintln!("vs: pprof {mode:?}: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(_) => eprintln!("vs: pprof {mode:?}: no go on PATH; read it with go tool pprof -top -cum"),
    }
}

/// The middle of `values` (the mean of the two middle ones for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) { (values[mid - 1] + values[mid]) / 2.0 } else { values[mid] }
}

/// Medians over rounds per cell: creates/s, API server CPU per create and its ratio to no
/// admission, that CPU's spread over rounds (max − min over the median), and the webhook's CPU.
fn summary(modes: &[Mode], cells: &[Cell]) {
    eprintln!(
        "vs: | record | slice | mode | creates/s | API server CPU/create | × no admission | spread | webhook CPU/create |"
    );
    for record in RECORD_SIZES {
        for slice in SLICE_SIZES {
            let of =
                |mode: Mode| cells.iter().filter(move |c| c.mode == mode && c.record == record && c.slice == slice);
            let none = median(of(Mode::None).map(|c| c.api_us).collect());
            for &mode in modes {
                let api: Vec<f64> = of(mode).map(|c| c.api_us).collect();
                let (min, max) = api.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                let api = median(api);
                eprintln!(
                    "vs: | {record} | {slice} | {mode:?} | {:.0} | {api:.0} µs | {:.2} | {:.0} % | {:.0} µs |",
                    median(of(mode).map(|c| c.rate).collect()),
                    api / none,
                    (max - min) / api * 100.0,
                    median(of(mode).map(|c| c.webhook_us).collect()),
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes: scripts/vs-policy.sh"]
async fn webhook_versus_validating_admission_policy() {
    if !runs_as_root("the webhook replica's network namespace") {
        return;
    }
    let bench = Bench::start().await;
    let (n, rounds) = (env_or("VS_CREATES", 300), env_or("VS_ROUNDS", 3));
    bench.answers().await;
    let mut cells = Vec::new();
    for round in 0..rounds {
        bench.round(round, round + 1 == rounds, n, &mut cells).await;
    }
    summary(&bench.modes(), &cells);
    bench.calls_saved().await;
}

/// The connections the API server keeps to the webhook across its pauses
/// (`scripts/keepalive.sh`): bursts of `VS_BURST` creates (16 in flight), `VS_PAUSE_SECONDS`
/// apart (15: longer than the 10 s after which the webhook used to close an idle HTTP/1.1
/// connection, shorter than the API server's 90 s), counting the new connections and the API
/// server's CPU per create in each burst after the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of about two minutes: scripts/keepalive.sh"]
async fn webhook_connections_across_pauses() {
    if !runs_as_root("the webhook replica's network namespace") {
        return;
    }
    let bench = Bench::start().await;
    bench.switch(Mode::Webhook, true).await;
    let (burst, bursts) = (env_or("VS_BURST", 64), env_or("VS_BURSTS", 6));
    let pause = Duration::from_secs(env_or("VS_PAUSE_SECONDS", 15) as u64);
    let s = last_named("load", 1, &record_address(0));
    let apiserver = bench.cp.pid("kube-apiserver");
    let (mut opens_after_pauses, mut cpu_after_pauses, mut creates_after_pauses) = (0, 0.0, 0);
    for b in 0..bursts {
        if b > 0 {
            tokio::time::sleep(pause).await;
        }
        let watch = Connections::watch(&bench.netns, WEBHOOK_PORT);
        let cpu = cpu_seconds(apiserver);
        let (times, errors) = load(&bench.client, "vs-r1", &s, burst).await;
        let used = cpu_seconds(apiserver) - cpu;
        let (opens, _, _) = watch.finish(&bench.netns);
        let n = times.len() + errors.len();
        eprintln!(
            "vs: burst {b}: {n} creates, {} failed, {opens} new connections, API server CPU {:.0} µs/create",
            errors.len(),
            used / n as f64 * 1e6
        );
        if b > 0 {
            opens_after_pauses += opens;
            cpu_after_pauses += used;
            creates_after_pauses += n;
        }
    }
    eprintln!(
        "vs: after pauses of {pause:?}: {:.1} new connections per burst, API server CPU {:.0} µs/create",
        opens_after_pauses as f64 / (bursts - 1).max(1) as f64,
        cpu_after_pauses / creates_after_pauses.max(1) as f64 * 1e6
    );
}
