//! A rendered Deployment (or StatefulSet) run the way a kubelet runs its Pod, without containers: the container's
//! `command` and `args`, its `env` (values, and the Pod's name and namespace for `fieldRef`s),
//! and the credentials of **its own ServiceAccount** (a token bound to a Pod object created for
//! it), so a suite runs what deploy/ ships and not flags or credentials of its own choosing.
//!
//! What cannot be reproduced without a kubelet is rewritten, each rewrite of a kind the test
//! declares ([`Rewrite`]) and listed in the log; any other difference fails the test:
//! - the image's `/usr/local/bin/<binary>` is the binary cargo built;
//! - the in-cluster credentials (the token, CA and namespace files under
//!   `/var/run/secrets/kubernetes.io/serviceaccount` and `KUBERNETES_SERVICE_HOST`) are a
//!   `KUBECONFIG` naming the test API server and the Pod's own token: the binaries read it the way
//!   kube's `Config::infer` does in a Pod, through the same client code;
//! - listen addresses (`0.0.0.0:<containerPort>`) are `127.0.0.1:<a free port>`, as tests share
//!   one network (but a Pod in a network namespace of its own, below);
//! - a Secret volume's `mountPath` is a directory of the test's, where the Secret is projected as
//!   a kubelet projects it (`..data` swapped atomically, [`SecretVolume`]) and kept in step with
//!   the Secret (read every second, as the kubelet's sync does, only sooner).
//!
//! In a network namespace of its own ([`run_in`], root) nothing of its network is rewritten: it
//! listens as rendered, at the namespace's address, and the runner plays more of the kubelet's
//! part (`kubelet_status`): the Pod bound to a Ready Node, reported Running at that address and
//! Ready as its readinessProbe answers, and not ready as soon as its process has exited (a
//! kubelet sees a dead container within about a second, long before a probe's failureThreshold
//! would). kube-controller-manager's EndpointSlice controller then publishes it behind the
//! render's Service.
//!
//! A kubelet projects a changed Secret at its next sync of the volume, up to a minute or more
//! after the change (its sync period and its cache of the Secret), and each kubelet on its own
//! schedule: replicas on different nodes take a renewed certificate at different times.
//! [`run_in_with`] models that with a fixed delay per Pod (the runner's one-second read, then the
//! delay), so a test can deliver a renewal to its replicas in a known order.
//!
//! Timings shorter than the shipped defaults come from a kustomize patch the test writes where a
//! reader sees it ([`kustomization_with`]), never from here.
//!
//! What a kubelet does and the runner does not, besides the rewrites: the container's
//! `securityContext` (its user, a read-only root) and `resources` are not applied, and it runs in
//! the test's working directory; a stop is SIGTERM, then SIGKILL after 3 s (no `preStop`, no
//! `terminationGracePeriodSeconds`); the liveness probe is not run; the Pod's token is requested
//! for a day rather than renewed; a process killed is not restarted in its Pod: a test starts a
//! new Pod, as a ReplicaSet replaces a deleted one (a new name) or a StatefulSet does (the same
//! name, `<name>-<ordinal>`, once the one before is gone), so the in-place restart of a crashed
//! container is not exercised. A Pod
//! object is deleted when its process is dropped (marked terminating, the process stopped, then
//! deleted for good, as a kubelet confirms a deletion).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::control_plane::{ControlPlane, spawn_guarded};
use crate::helpers::{Process, binary, free_port};
use crate::netns::{NetNs, relayed_kubeconfig};
use crate::secret_volume::SecretVolume;

/// The kinds of rewrite a test allows the runner ([`run`] fails on any other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// `--<flag>=0.0.0.0:<port>` → `127.0.0.1:<free port>`.
    ListenAddress,
    /// A Secret volume's `mountPath`, in args and env values → the test's projection of it.
    MountPath,
    /// The process's wall clock set this many seconds off (libfaketime preloaded; its monotonic
    /// clocks untouched): a node whose clock is wrong.
    WallClock(i64),
}

/// `kubectl kustomize DIR`, parsed: the objects a user applies.
pub struct Render {
    pub objects: Vec<Value>,
}

impl Render {
    pub fn of(dir: &Path) -> Render {
        Render { objects: render(dir) }
    }

    /// The rendered object of `kind` named `name`.
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        find(&self.objects, kind, name)
    }

    /// The rendered workload named `name`: a Deployment, or a StatefulSet
    /// (components/producer-sharded makes the producer's one).
    pub fn workload(&self, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| (o["kind"] == "Deployment" || o["kind"] == "StatefulSet") && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Deployment or StatefulSet {name} in the rendered manifests"))
    }

    /// Apply (server-side, as the docs do) the rendered objects `keep` selects, unchanged.
    pub fn apply(&self, cp: &ControlPlane, keep: impl Fn(&Value) -> bool) {
        self.apply_with(&cp.kubeconfig, keep);
    }

    /// [`Render::apply`] with `kubeconfig` (written beside it).
    pub fn apply_with(&self, kubeconfig: &Path, keep: impl Fn(&Value) -> bool) {
        let docs: Vec<String> =
            self.objects.iter().filter(|o| keep(o)).map(|o| serde_json::to_string(o).expect("json")).collect();
        let file = kubeconfig.with_file_name(format!("render-{}.json", unique()));
        let list = format!("{{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{}]}}", docs.join(","));
        std::fs::write(&file, list).expect("write render");
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["apply", "--server-side", "-f"])
            .arg(&file)
            .output()
            .expect("kubectl apply runs");
        assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A number no other call in this process gets: for names that must not collide.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    u64::from(std::process::id()) * 1_000_000 + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `kubectl kustomize DIR` (or `EDGEGATE_KUSTOMIZE DIR`, e.g. `kustomize build`), parsed into
/// objects. deploy/components/dev-certs' certificate (not in git) is made first if missing, as
/// every render with that component reads it.
pub fn render(dir: &Path) -> Vec<Value> {
    crate::helpers::deploy_dev_certs();
    let kustomize = std::env::var("EDGEGATE_KUSTOMIZE").unwrap_or_else(|_| "kubectl kustomize".to_owned());
    let mut words = kustomize.split_whitespace();
    let program = words.next().unwrap_or("kubectl");
    let out =
        Command::new(program).args(words).arg(dir).output().expect("kustomize runs (kubectl or EDGEGATE_KUSTOMIZE)");
    assert!(out.status.success(), "rendering {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_saphyr::from_multiple::<Value>(&text).expect("rendered YAML parses")
}

/// The object of `kind` named `name` among `objects`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
}

/// A user's kustomization of the repo's `resources` and `components` (paths under deploy/) with
/// `extra` appended (e.g. a `patches:` block), in target/kustomize-test/NAME.
pub fn kustomization_with(name: &str, resources: &[&str], components: &[&str], extra: &str) -> PathBuf {
    let dir = crate::helpers::kustomization(name, resources, components);
    let path = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).expect("kustomization");
    std::fs::write(&path, format!("{text}{extra}")).expect("write");
    dir
}

/// One replica of a rendered Deployment, stopped when dropped.
pub struct RunningPod {
    pub process: Process,
    pub name: String,
    pub namespace: String,
    /// Its container ports by name, where they listen now.
    pub ports: BTreeMap<String, u16>,
    /// Every rewrite made, `before → after`.
    pub rewrites: Vec<String>,
    /// The tasks keeping its Secret volumes (and, in a network namespace, its status) in step,
    /// stopped with it.
    volume_sync: Vec<tokio::task::AbortHandle>,
    /// To delete its Pod object when it stops.
    admin_kubeconfig: PathBuf,
    /// The network namespace it runs in, if any (where its ports are reached).
    netns: Option<String>,
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        for task in &self.volume_sync {
            task.abort();
        }
        // Its Pod object goes too, as when a ReplicaSet's Pod is deleted: no endpoint stays
        // behind, and its bound token stops being valid. Deleted, a Pod bound to a Node (one in
        // a network namespace) is only marked terminating until its kubelet has stopped the
        // container and deletes it for good: the runner does the same.
        let delete = |last: &[&str]| {
            let _ = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.admin_kubeconfig)
                .args(["delete", "pod", "-n", &self.namespace, &self.name, "--wait=false", "--ignore-not-found"])
                .args(last)
                .output();
        };
        delete(&[]);
        self.process.stop();
        if self.netns.is_some() {
            delete(&["--grace-period=0", "--force"]);
        }
    }
}

impl RunningPod {
    /// The port its container port `name` listens on.
    pub fn port(&self, name: &str) -> u16 {
        *self.ports.get(name).unwrap_or_else(|| panic!("no container port {name}"))
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The body of `path` on its admin port (`process.port`), asked from inside its network
    /// namespace when it runs in one.
    pub fn get(&self, path: &str) -> String {
        let url = format!("http://127.0.0.1:{}{path}", self.process.port);
        let mut curl = match &self.netns {
            Some(netns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", netns, "curl"]);
                c
            }
            None => Command::new("curl"),
        };
        let out = curl.args(["-s", "--max-time", "2", &url]).output().expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Its process's id (the watchdog's child: `ip netns exec` and `env` exec it in turn).
    pub fn pid(&self) -> u32 {
        crate::helpers::pid_of(&self.process)
    }
}

/// Run replica `replica` of the Deployment or StatefulSet `deployment` of `render` (already applied): create
/// its Pod object, request its ServiceAccount's token bound to that Pod, and start its first
/// container's command as a kubelet would, with only the rewrites `allowed` lists.
pub async fn run(
    cp: &ControlPlane,
    render: &Render,
    deployment: &str,
    replica: usize,
    allowed: &[Rewrite],
) -> RunningPod {
    run_placed(cp, render, deployment, replica, allowed, None, Duration::ZERO).await
}

/// [`run`] inside network namespace `netns`, the Pod's own network: its listen addresses stay as
/// rendered (reach them with [`NetNs::curl`]), and it reaches the API server only through the
/// namespace's link. One Pod per namespace.
pub async fn run_in(
    cp: &ControlPlane,
    render: &Render,
    deployment: &str,
    replica: usize,
    allowed: &[Rewrite],
    netns: &NetNs,
) -> RunningPod {
    run_placed(cp, render, deployment, replica, allowed, Some(netns), Duration::ZERO).await
}

/// [`run_in`], the Pod's kubelet projecting a changed Secret into its volumes `volume_delay` after
/// the runner sees the change (it reads each Secret every second): a kubelet's sync of the volume,
/// which comes up to a minute or more after a change and at a different time on each node.
pub async fn run_in_with(
    cp: &ControlPlane,
    render: &Render,
    deployment: &str,
    replica: usize,
    allowed: &[Rewrite],
    netns: &NetNs,
    volume_delay: Duration,
) -> RunningPod {
    run_placed(cp, render, deployment, replica, allowed, Some(netns), volume_delay).await
}

async fn run_placed(
    cp: &ControlPlane,
    render: &Render,
    deployment: &str,
    replica: usize,
    allowed: &[Rewrite],
    netns: Option<&NetNs>,
    volume_delay: Duration,
) -> RunningPod {
    let object = render.workload(deployment);
    let namespace = object["metadata"]["namespace"].as_str().expect("workload namespace").to_owned();
    let template = &object["spec"]["template"];
    let spec = &template["spec"];
    // What the runner cannot do as a kubelet would, it refuses rather than skips.
    for unsupported in ["initContainers", "ephemeralContainers"] {
        assert!(
            spec[unsupported].as_array().is_none_or(Vec::is_empty),
            "{deployment}: {unsupported} are not run by the runner"
        );
    }
    assert_eq!(spec["containers"].as_array().map(Vec::len), Some(1), "{deployment}: the runner runs one container");
    let container = &spec["containers"][0];
    for unsupported in ["envFrom", "workingDir"] {
        assert!(
            container[unsupported].is_null() || container[unsupported].as_array().is_some_and(Vec::is_empty),
            "{deployment}: the container's {unsupported} is not provided by the runner yet"
        );
    }
    let text = container.to_string();
    assert!(!text.contains("$("), "{deployment}: $(VAR) references are not expanded by the runner");
    // Without automountServiceAccountToken (a Karmada host's binaries, which reach the hub through
    // a mounted kubeconfig) the Pod gets no credentials of its own.
    let automount = spec["automountServiceAccountToken"].as_bool() != Some(false);
    let account = spec["serviceAccountName"].as_str().unwrap_or("default").to_owned();
    // A StatefulSet's Pod is named by its ordinal, the same each time it is made again; a
    // Deployment's never twice.
    let stateful = object["kind"] == "StatefulSet";
    let name =
        if stateful { format!("{deployment}-{replica}") } else { format!("{deployment}-{replica}-{}", unique()) };
    let client = cp.client().await;

    // The Pod object, as the ReplicaSet controller would create it (what the token is bound to).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let mut spec_on_node = spec.clone();
    if netns.is_some() {
        // Bound to the test's Node, whose Pods the EndpointSlice controller routes to.
        spec_on_node["nodeName"] = json!(node(cp).await);
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": template["metadata"]["labels"]},
        "spec": spec_on_node,
    });
    let pod: Pod = serde_json::from_value(pod).expect("pod");
    // As the StatefulSet controller, only once the Pod of that name before it is gone.
    let started = std::time::Instant::now();
    let pod = loop {
        match pods.create(&PostParams::default(), &pod).await {
            Err(kube::Error::Api(e)) if e.code == 409 && stateful && started.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            created => break created.expect("create Pod"),
        }
    };
    let uid = pod.metadata.uid.clone().expect("pod uid");

    let mut kubeconfig =
        if automount { Some(pod_token(cp, client, &namespace, &account, &name, uid).await) } else { None };
    if let (Some(netns), Some(direct)) = (netns, &kubeconfig) {
        kubeconfig = Some(relayed_kubeconfig(cp, netns, direct, &format!("pod-{name}-relayed.kubeconfig")).await);
    }

    let mut rewrites = Vec::new();
    let (mounts, volume_sync) = secret_volumes(cp, &name, &namespace, spec, container, allowed, volume_delay).await;
    let mounted = |value: &str, rewrites: &mut Vec<String>| -> String {
        match mount_rewrite(value, &mounts) {
            Some(new) => {
                rewrites.push(format!("{value} → {new}"));
                new
            }
            None => value.to_owned(),
        }
    };
    let command: Vec<String> = strings(&container["command"]);
    assert!(!command.is_empty(), "{deployment}: the container has no command");
    let program = match command[0].strip_prefix("/usr/local/bin/") {
        Some(name) => binary(name),
        None => panic!("{deployment}: command {:?} is not one of the image's binaries", command[0]),
    };
    rewrites.push(format!("{} → {}", command[0], program.display()));

    // Container ports by number, to rewrite the listen addresses that name them.
    let declared: BTreeMap<u64, String> = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["containerPort"].as_u64()?, p["name"].as_str()?.to_owned())))
        .collect();
    let mut ports = BTreeMap::new();
    let mut args = command[1..].to_vec();
    for arg in strings(&container["args"]) {
        let rewritten = if netns.is_some() { None } else { listen_rewrite(&arg, &declared, &mut ports) };
        if let Some(new) = rewritten {
            assert!(allowed.contains(&Rewrite::ListenAddress), "{deployment}: {arg} needs Rewrite::ListenAddress");
            rewrites.push(format!("{arg} → {new}"));
            args.push(new);
        } else {
            args.push(mounted(&arg, &mut rewrites));
        }
    }

    // The container's environment: values, and the Pod's own name and namespace.
    // The kubelet sets HOSTNAME to the Pod's name.
    let mut env = vec![format!("HOSTNAME={name}")];
    if let Some(kubeconfig) = kubeconfig {
        env.push(format!("KUBECONFIG={}", kubeconfig.display()));
        rewrites
            .push(format!("in-cluster credentials → KUBECONFIG={} (ServiceAccount {account})", kubeconfig.display()));
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let key = var["name"].as_str().expect("env name");
        let value = if let Some(value) = var["value"].as_str() {
            mounted(value, &mut rewrites)
        } else {
            match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => name.clone(),
                Some("metadata.namespace") => namespace.clone(),
                _ => panic!(
                    "{deployment}: env {key} comes from {:?}, which the runner does not provide",
                    var["valueFrom"]
                ),
            }
        };
        env.push(format!("{key}={value}"));
    }

    for offset in allowed.iter().filter_map(|r| match r {
        Rewrite::WallClock(seconds) => Some(*seconds),
        _ => None,
    }) {
        let lib = crate::helpers::libfaketime();
        env.extend([
            format!("LD_PRELOAD={}", lib.display()),
            format!("FAKETIME={offset:+}"),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".to_owned(),
        ]);
        rewrites.push(format!("wall clock → {offset:+} s (libfaketime, monotonic clocks untouched)"));
    }

    // A container's environment is its own: nothing of the test process leaks in.
    let mut full = vec!["-i".to_owned()];
    full.extend(env);
    full.push(program.display().to_string());
    full.extend(args);
    if netns.is_some() {
        // Listening where it was rendered to: each declared port, in the Pod's own network.
        for (port, port_name) in &declared {
            ports.insert(port_name.clone(), u16::try_from(*port).expect("port"));
        }
    }
    let log = cp.dir.join(format!("{name}.log"));
    std::fs::write(&log, format!("pod {namespace}/{name}, rewrites:\n  {}\n", rewrites.join("\n  "))).expect("log");
    let mut volume_sync = volume_sync;
    let child = match netns {
        None => spawn_guarded(Path::new("env"), &full, &log),
        Some(netns) => {
            let inside: Vec<String> =
                ["netns", "exec", &netns.name, "env"].into_iter().map(str::to_owned).chain(full).collect();
            let child = spawn_guarded(Path::new("ip"), &inside, &log);
            // The kubelet's part: the Pod running at the namespace's address, Ready as its
            // readiness probe says, not ready once its process is gone.
            let pid = container_pid(child.id()).await;
            volume_sync.push(kubelet_status(cp, &namespace, &name, netns, container, pid).await);
            child
        }
    };
    // `Process::port` is where health and metrics are served, as the probes say.
    let admin = ports.get("admin").or_else(|| ports.values().next()).copied().unwrap_or_default();
    RunningPod {
        process: Process { child, port: admin, log },
        name,
        namespace,
        ports,
        rewrites,
        volume_sync,
        admin_kubeconfig: cp.kubeconfig.clone(),
        netns: netns.map(|n| n.name.clone()),
    }
}

/// The process the watchdog `shell` started (its first child), once it exists.
async fn container_pid(shell: u32) -> u32 {
    let started = std::time::Instant::now();
    loop {
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "watchdog {shell} started no process");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The test's Node (created once, Ready): where Pods run in a network namespace are bound.
async fn node(cp: &ControlPlane) -> &'static str {
    const NODE: &str = "edgegate-test-node";
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cp.client().await);
    if nodes.get_opt(NODE).await.expect("read the Node").is_none() {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
        let _ = nodes.create(&PostParams::default(), &serde_json::from_value(node).expect("node")).await;
    }
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes.patch_status(NODE, &PatchParams::default(), &Patch::Merge(&ready)).await.expect("Node Ready");
    NODE
}

/// What a kubelet reports of Pod `pod` running in network namespace `netns`: Running at the
/// namespace's address, and Ready as its container's readinessProbe (an `httpGet` on a port,
/// probed from inside the namespace) says, with the probe's own `periodSeconds` (10),
/// `timeoutSeconds` (1) and `failureThreshold` (3), as a kubelet applies them; and not ready
/// within about a second of its process `pid` exiting (checked every 500 ms), as a kubelet's
/// sight of a dead container. The task doing it.
async fn kubelet_status(
    cp: &ControlPlane,
    namespace: &str,
    pod: &str,
    netns: &NetNs,
    container: &Value,
    pid: u32,
) -> tokio::task::AbortHandle {
    let readiness = &container["readinessProbe"];
    let probe = &readiness["httpGet"];
    assert!(probe["scheme"].is_null() || probe["scheme"] == "HTTP", "{pod}: the runner probes plain HTTP only");
    let port = match &probe["port"] {
        Value::String(name) => container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == *name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{pod}: the readiness probe's port {name} is no container port")),
        other => other.as_u64().unwrap_or_else(|| panic!("{pod}: the runner probes an httpGet readinessProbe only")),
    };
    let setting = |name: &str, default: u64| readiness[name].as_u64().unwrap_or(default);
    let (period, timeout, failures) =
        (setting("periodSeconds", 10), setting("timeoutSeconds", 1), setting("failureThreshold", 3));
    let url = format!("http://127.0.0.1:{port}{}", probe["path"].as_str().unwrap_or("/"));
    let pods: Api<Pod> = Api::namespaced(cp.client().await, namespace);
    let (pod, address, netns) = (pod.to_owned(), netns.address.clone(), netns.name.clone());
    let task = tokio::spawn(async move {
        let (mut reported, mut ready, mut failed) = (None, false, 0);
        let mut next_probe = tokio::time::Instant::now();
        loop {
            let gone = crate::helpers::exited(pid);
            if gone {
                ready = false;
            } else if tokio::time::Instant::now() >= next_probe {
                next_probe += Duration::from_secs(period);
                let (netns, url) = (netns.clone(), url.clone());
                let answered = tokio::task::spawn_blocking(move || {
                    std::process::Command::new("ip")
                        .args(["netns", "exec", &netns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
                        .args(["--max-time", &timeout.to_string(), &url])
                        .output()
                        .is_ok_and(|o| o.stdout == b"200")
                })
                .await
                .unwrap_or(false);
                // Ready at the first success; not ready after `failureThreshold` failures in a row.
                failed = if answered { 0 } else { failed + 1 };
                if answered {
                    ready = true;
                } else if failed >= failures {
                    ready = false;
                }
            }
            if reported != Some(ready) {
                let status = if ready { "True" } else { "False" };
                let body = json!({"status": {
                    "phase": "Running",
                    "podIP": address, "podIPs": [{"ip": address}],
                    "conditions": [{"type": "Ready", "status": status}, {"type": "ContainersReady", "status": status}],
                }});
                if pods.patch_status(&pod, &PatchParams::default(), &Patch::Merge(&body)).await.is_ok() {
                    reported = Some(ready);
                }
            }
            if gone && reported == Some(false) {
                // Not restarted in its Pod (the runner's limit): nothing more to report.
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    task.abort_handle()
}

/// A kubeconfig with ServiceAccount `account`'s token bound to Pod `pod`: what the kubelet
/// projects into the Pod, as the binaries read it through `KUBECONFIG`.
async fn pod_token(
    cp: &ControlPlane,
    client: kube::Client,
    namespace: &str,
    account: &str,
    pod: &str,
    uid: String,
) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            // A kubelet renews its Pod's token before it expires; the runner asks for one that
            // outlasts any run here instead (a day).
            expiration_seconds: Some(86_400),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.to_owned()),
                uid: Some(uid),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("token of ServiceAccount {namespace}/{account}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("token");
    cp.kubeconfig_with_token(&format!("pod-{pod}"), &token)
}

/// The container's volume mounts, each a Secret volume projected into a directory of the test's
/// and kept in step with its Secret: `(mountPath, directory)`, and the tasks that keep them.
/// Like a kubelet, waits (60 s at most) for a Secret that does not exist yet. A change is
/// projected `delay` after it is seen, as it then stands ([`run_in_with`]).
async fn secret_volumes(
    cp: &ControlPlane,
    pod: &str,
    namespace: &str,
    spec: &Value,
    container: &Value,
    allowed: &[Rewrite],
    delay: Duration,
) -> (Vec<(String, PathBuf)>, Vec<tokio::task::AbortHandle>) {
    let secrets: Api<Secret> = Api::namespaced(cp.client().await, namespace);
    let (mut mounts, mut tasks) = (Vec::new(), Vec::new());
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume_name = mount["name"].as_str().expect("volumeMount name");
        let path = mount["mountPath"].as_str().expect("mountPath").trim_end_matches('/').to_owned();
        assert!(
            mount["subPath"].is_null(),
            "{pod}: volumeMount {volume_name} has a subPath, which the runner does not provide"
        );
        let volume = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == volume_name)
            .unwrap_or_else(|| panic!("{pod}: volumeMount {volume_name} names no volume"));
        let secret_name = volume["secret"]["secretName"]
            .as_str()
            .unwrap_or_else(|| {
                panic!("{pod}: volume {volume_name} is not a Secret volume, which is all the runner provides")
            })
            .to_owned();
        assert!(
            volume["secret"]["items"].is_null(),
            "{pod}: volume {volume_name} selects items, which the runner does not provide"
        );
        assert!(allowed.contains(&Rewrite::MountPath), "{pod}: mounting {path} needs Rewrite::MountPath");
        let mut projected = SecretVolume::new(&cp.dir.join(pod).join("volumes").join(volume_name));
        let mut current = None;
        let waited = std::time::Instant::now();
        while current.is_none() {
            current = secrets.get_opt(&secret_name).await.expect("read the volume's Secret");
            assert!(
                current.is_some() || waited.elapsed() < Duration::from_secs(60),
                "{pod}: Secret {namespace}/{secret_name} of volume {volume_name} never appeared"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut current = current.expect("Secret");
        projected.project(&current);
        mounts.push((path, projected.dir.clone()));
        let secrets = secrets.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if let Ok(Some(mut now)) = secrets.get_opt(&secret_name).await
                    && now.data != current.data
                {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                        if let Ok(Some(then)) = secrets.get_opt(&secret_name).await {
                            now = then;
                        }
                    }
                    projected.project(&now);
                    current = now;
                }
            }
        });
        tasks.push(task.abort_handle());
    }
    (mounts, tasks)
}

/// `--flag=0.0.0.0:<port>` naming a declared container port → `--flag=127.0.0.1:<free port>`,
/// noting the port under the container port's name.
fn listen_rewrite(arg: &str, declared: &BTreeMap<u64, String>, ports: &mut BTreeMap<String, u16>) -> Option<String> {
    let (flag, value) = arg.split_once('=')?;
    let port: u64 = value.strip_prefix("0.0.0.0:")?.parse().ok()?;
    let name = declared.get(&port)?;
    let local = free_port();
    ports.insert(name.clone(), local);
    Some(format!("{flag}=127.0.0.1:{local}"))
}

/// `value` with each Secret volume's mount path in it (as a whole path: followed by `/` or
/// nothing) replaced by the directory the runner projects that volume into; `None` when it names
/// no mount.
fn mount_rewrite(value: &str, mounts: &[(String, PathBuf)]) -> Option<String> {
    let mut rewritten = None;
    for (path, dir) in mounts {
        let current: &str = rewritten.as_deref().unwrap_or(value);
        if let Some(at) = current.find(path.as_str()) {
            let rest = &current[at + path.len()..];
            if rest.is_empty() || rest.starts_with('/') {
                rewritten = Some(format!("{}{}{rest}", &current[..at], dir.display()));
            }
        }
    }
    rewritten
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_on_a_declared_port_moves_to_loopback() {
        let declared = BTreeMap::from([(8443, "https".to_owned())]);
        let mut ports = BTreeMap::new();
        let new = listen_rewrite("--listen=0.0.0.0:8443", &declared, &mut ports).expect("rewritten");
        let port = ports["https"];
        assert_eq!(new, format!("--listen=127.0.0.1:{port}"));
        for untouched in ["--listen=0.0.0.0:9999", "--listen=127.0.0.1:8443", "--listen", "--grace=30s"] {
            assert_eq!(listen_rewrite(untouched, &declared, &mut ports), None, "{untouched}");
        }
    }

    #[test]
    fn a_mount_path_is_rewritten_only_as_a_whole_path() {
        let mounts = [("/etc/edgegate/hub".to_owned(), PathBuf::from("/tmp/pod/volumes/hub"))];
        let rows = [
            ("--kubeconfig=/etc/edgegate/hub/kubeconfig", Some("--kubeconfig=/tmp/pod/volumes/hub/kubeconfig")),
            ("/etc/edgegate/hub", Some("/tmp/pod/volumes/hub")),
            ("/etc/edgegate/hubs/kubeconfig", None),
            ("/etc/edgegate/tls/tls.crt", None),
        ];
        for (value, expected) in rows {
            assert_eq!(mount_rewrite(value, &mounts).as_deref(), expected, "{value}");
        }
    }
}
