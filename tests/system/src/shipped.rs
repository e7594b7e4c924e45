//! What an operator does around the shipped render, for the suites that run it through the pod
//! runner ([`crate::pod`]): a kustomization of deploy/ with a test's shorter timings as a patch,
//! applied as the docs say; project control planes handed to the producer the way
//! docs/producer.md says (a ServiceAccount there bound to `edgegate-producer-project`, its
//! kubeconfig a key of the hub's Secret `edgegate-producer-projects`); the webhook registered
//! by URL where the API server cannot reach a Pod through its Service ([`webhook`]), and its
//! replicas in network namespaces of their own, published behind its Service by
//! kube-controller-manager's EndpointSlice controller where it can ([`webhook_in`]).

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::control_plane::ControlPlane;
use crate::helpers::base64;
use crate::netns::NetNs;
use crate::pod::{Render, Rewrite, RunningPod, kustomization_with, run_in_with};

/// The namespace deploy/ installs into.
pub const NAMESPACE: &str = "edgegate-system";

/// The Secret the producer's `projects` volume mounts.
const PROJECTS_SECRET: &str = "edgegate-producer-projects";

impl Render {
    /// `resources` and `components` of deploy/ rendered as a user's kustomization named `name`,
    /// with `flags` set on the named Deployments' first container by a patch: a flag the render
    /// already has is replaced in place, any other appended. The patch is printed, and the
    /// flags are in the test that calls this: shorter timings than the shipped ones, visibly.
    pub fn tuned(name: &str, resources: &[&str], components: &[&str], flags: &[(&str, &[&str])]) -> Render {
        let shipped = Render::of(&kustomization_with(name, resources, components, ""));
        let mut patches = String::from("patches:\n");
        for (deployment, set) in flags.iter().filter(|(_, set)| !set.is_empty()) {
            let args = shipped.workload(deployment)["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let ops: Vec<Value> = set
                .iter()
                .map(|flag| {
                    let key = flag.split_once('=').map_or(*flag, |(k, _)| k);
                    let at = args.iter().position(|a| {
                        a.as_str().is_some_and(|a| a == key || a.starts_with(&format!("{key}=")))
                    });
                    match at {
                        Some(i) => json!({"op": "replace", "path": format!("/spec/template/spec/containers/0/args/{i}"), "value": flag}),
                        None => json!({"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": flag}),
                    }
                })
                .collect();
            patches.push_str(&format!(
                "  - target: {{group: apps, name: {deployment}}}\n    patch: '{}'\n",
                serde_json::to_string(&ops).expect("json").replace('\'', "''")
            ));
        }
        if patches == "patches:\n" {
            return shipped;
        }
        eprintln!("{name}: the shipped render with\n{patches}");
        Render::of(&kustomization_with(name, resources, components, &patches))
    }

    /// Apply everything but the admission configurations (which name a Service no API server
    /// here can reach; a test registers its webhook by URL instead, [`register_webhook`]).
    pub fn apply_but_admission(&self, cp: &ControlPlane) {
        self.apply(cp, |o| !o["kind"].as_str().unwrap_or_default().ends_with("WebhookConfiguration"));
    }
}

/// overlays/dev (enforcing) with the pruner's `flags` set by a patch, rendered as kustomization
/// `name` and applied (but its admission configurations) to a control plane of its own, since
/// the shipped pruner judges every copy of its API server; and an admin client.
pub async fn with_pruner_flags(name: &str, flags: &[&str]) -> (ControlPlane, Render, kube::Client) {
    crate::helpers::deploy_dev_certs();
    let cp = ControlPlane::own();
    let render = Render::tuned(name, &["overlays/dev"], &[], &[("edgegate-pruner", flags)]);
    render.apply_but_admission(&cp);
    let client = cp.client().await;
    (cp, render, client)
}

/// Hand project control plane `project` to the hub's producer as project `name`, as
/// docs/producer.md says: deploy/project applied there (a ServiceAccount of the producer's bound
/// to the ClusterRole `edgegate-producer-project`), whose token's kubeconfig (CA embedded, as a
/// kubeconfig in a Secret must be) is key `<name>.kubeconfig` of the hub's Secret
/// `edgegate-producer-projects`.
pub async fn add_project(hub: &ControlPlane, name: &str, project: &ControlPlane) {
    let kubeconfig = project_kubeconfig(project).await;
    set_project(hub, name, &kubeconfig).await;
}

/// deploy/ with the producer reading Milo (components/producer, components/producer-milo, enforcing,
/// the dev certificate) rendered as kustomization `name`, applied to `hub` (but its admission
/// configurations), and Milo handed over ([`hand_milo_over`]); `producer_flags` added to the
/// producer's (a test's shorter timings).
pub async fn install_with_milo(
    name: &str,
    hub: &ControlPlane,
    backing: &ControlPlane,
    milo: &crate::milo::Milo,
    producer_flags: &[&str],
) -> Render {
    install_with_milo_and(name, hub, backing, milo, &[], producer_flags).await
}

/// [`install_with_milo`] with `extra` components right after components/producer-milo (as
/// components/producer-sharded goes).
pub async fn install_with_milo_and(
    name: &str,
    hub: &ControlPlane,
    backing: &ControlPlane,
    milo: &crate::milo::Milo,
    extra: &[&str],
    producer_flags: &[&str],
) -> Render {
    let mut components = vec!["components/dev-certs", "components/producer", "components/producer-milo"];
    components.extend(extra);
    components.extend(["components/enforce", "components/images"]);
    let render = Render::tuned(name, &["base"], &components, &[("edgegate-producer", producer_flags)]);
    render.apply_but_admission(hub);
    hand_milo_over(hub, backing, milo).await;
    render
}

/// With components/producer-milo: the producer's identity on Milo (the stand-in `milo` in front of
/// `backing`) granted exactly as deploy/milo grants it (its ClusterRoles bound at the root to
/// user `edgegate-producer`), that user's token in the kubeconfig of the hub's Secret
/// `edgegate-producer-milo`, as docs/producer.md says.
pub async fn hand_milo_over(hub: &ControlPlane, backing: &ControlPlane, milo: &crate::milo::Milo) {
    Render::of(&crate::control_plane::repo().join("deploy/milo")).apply_with(&backing.kubeconfig, |_| true);
    let token = format!("{{token: {}}}", crate::control_plane::MILO_USER_TOKEN);
    set_milo_kubeconfig(hub, &milo_kubeconfig(backing, milo, &token)).await;
}

/// A kubeconfig for the Milo stand-in `milo` (in front of `backing`, whose CA it embeds) whose
/// user authenticates with `user` (a kubeconfig's `user:` in flow YAML).
pub fn milo_kubeconfig(backing: &ControlPlane, milo: &crate::milo::Milo, user: &str) -> String {
    let ca = std::fs::read(backing.dir.join("ca.crt")).expect("Milo's CA");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: milo\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
         users:\n- name: edgegate-producer\n  user: {user}\n\
         contexts:\n- name: milo\n  context: {{cluster: milo, user: edgegate-producer}}\ncurrent-context: milo\n",
        milo.server,
        base64(&ca),
    )
}

/// The hub's Secret `edgegate-producer-milo` (key `kubeconfig`) set to `kubeconfig`.
pub async fn set_milo_kubeconfig(hub: &ControlPlane, kubeconfig: &str) {
    set_milo_secret(hub, &[("kubeconfig", kubeconfig)]).await;
}

/// The hub's Secret `edgegate-producer-milo` set to `entries` (key, content), its other keys gone.
pub async fn set_milo_secret(hub: &ControlPlane, entries: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> =
        entries.iter().map(|(k, v)| ((*k).to_owned(), Value::from(base64(v.as_bytes())))).collect();
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "edgegate-producer-milo", "namespace": NAMESPACE}, "data": data});
    apply_objects(hub, vec![secret]);
}

/// With components/producer-milo and a project served by a kube-apiserver of its own
/// ([`ControlPlane::start_project_server`]): the producer's read grant there, as Milo's own
/// authorization of a project would give it (deploy/milo applied there: its user, which the
/// project's server learns from the root's TokenReview, bound to the roles).
pub fn grant_project_server(server: &crate::control_plane::ProjectServer) {
    Render::of(&crate::control_plane::repo().join("deploy/milo")).apply_with(&server.kubeconfig, |_| true);
}

/// The kubeconfig [`add_project`] hands over: the producer's identity on `project`, made there as
/// docs/producer.md says (deploy/project applied, a token of its ServiceAccount).
pub async fn project_kubeconfig(project: &ControlPlane) -> String {
    // docs/producer.md's commands "in each project control plane", pasted as written: the last
    // line they print is the token.
    let clone = crate::docs::clone();
    std::fs::copy(&project.kubeconfig, clone.path().join("acme-admin.kubeconfig"))
        .expect("the project's admin kubeconfig");
    let (in_project, _) = crate::docs::split_at(&crate::docs::sh_block("producer.md", "## Deploy"), "# on the hub");
    let said = crate::docs::paste(clone.path(), &project.kubeconfig, &in_project);
    let token = said.lines().last().expect("a token printed").trim().to_owned();
    assert!(token.starts_with("eyJ") && token.split('.').count() == 3, "the last line printed is no token:\n{said}");
    let ca = std::fs::read(project.dir.join("ca.crt")).expect("project CA");
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: project\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
         users:\n- name: producer\n  user:\n    token: {token}\n\
         contexts:\n- name: project\n  context: {{cluster: project, user: producer}}\ncurrent-context: project\n",
        project.server,
        base64(&ca),
    )
}

/// Project `acme` handed over as docs/producer.md's "Deploy" says, every command of it pasted as
/// written: in `project` its identity and a token ([`project_kubeconfig`]), `acme.kubeconfig`
/// written with them, then on `hub` the Secret created from that file (the hub's install applied
/// before, as the page says).
pub async fn add_acme_as_documented(hub: &ControlPlane, project: &ControlPlane) {
    let kubeconfig = project_kubeconfig(project).await;
    let clone = crate::docs::clone();
    std::fs::write(clone.path().join("acme.kubeconfig"), kubeconfig).expect("acme.kubeconfig");
    let (_, on_hub) = crate::docs::split_at(&crate::docs::sh_block("producer.md", "## Deploy"), "# on the hub");
    crate::docs::paste(clone.path(), &hub.kubeconfig, &on_hub);
}

/// Key `<name>.kubeconfig` of the hub's Secret `edgegate-producer-projects` set to `kubeconfig`
/// (e.g. one that names no reachable server).
pub async fn set_project(hub: &ControlPlane, name: &str, kubeconfig: &str) {
    set_projects(hub, json!({ format!("{name}.kubeconfig"): base64(kubeconfig.as_bytes()) })).await;
}

/// The hub's Secret `edgegate-producer-projects` with no project (yet), as an operator creates it.
pub async fn no_projects(hub: &ControlPlane) {
    set_projects(hub, json!({})).await;
}

/// Take project `name` out of the hub's Secret `edgegate-producer-projects`.
pub async fn remove_project(hub: &ControlPlane, name: &str) {
    set_projects(hub, json!({ format!("{name}.kubeconfig"): null })).await;
}

async fn set_projects(hub: &ControlPlane, data: Value) {
    let secrets: Api<Secret> = Api::namespaced(hub.client().await, NAMESPACE);
    if secrets.get_opt(PROJECTS_SECRET).await.expect("read projects Secret").is_none() {
        let empty = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": PROJECTS_SECRET}, "data": {}});
        secrets
            .create(&PostParams::default(), &serde_json::from_value(empty).expect("secret"))
            .await
            .expect("create projects Secret");
    }
    secrets
        .patch(PROJECTS_SECRET, &PatchParams::default(), &Patch::Merge(&json!({"data": data})))
        .await
        .expect("patch projects Secret");
}

/// Objects of the test's own (what an operator adds beside the render: Secrets, bindings, a
/// configuration), applied server-side as the render's are.
pub fn apply_objects(cp: &ControlPlane, objects: Vec<Value>) {
    Render { objects }.apply(cp, |_| true);
}

/// deploy/'s webhook as installed: a Pod of `installed` (a render already applied to `cp`), or
/// else of overlays/dev (enforcing, the dev certificate's Secret) applied to `cp` but for its
/// admission configurations; run under its own ServiceAccount, ready, and registered by URL ([`register_webhook`]) for namespaces labelled
/// `edgegate-e2e=<scope>`, with deploy/'s matchConditions or (`match_conditions` false) without
/// them, as an API server that lacks them calls it. Applying the same render again is a no-op,
/// so tests sharing a control plane may each call this.
pub async fn webhook(cp: &ControlPlane, installed: Option<&Render>, scope: &str, match_conditions: bool) -> Webhook {
    let own;
    let render = match installed {
        Some(render) => render,
        None => {
            own = Render::of(&kustomization_with(&format!("webhook-{scope}"), &["overlays/dev"], &[], ""));
            own.apply_but_admission(cp);
            &own
        }
    };
    let pod = crate::pod::run(
        cp,
        render,
        "edgegate-webhook",
        0,
        &[crate::pod::Rewrite::ListenAddress, crate::pod::Rewrite::MountPath],
    )
    .await;
    crate::helpers::until_ready("webhook ready", &pod.process, None).await;
    let https = pod.port("https");
    register(cp, render, https, scope, match_conditions);
    Webhook { ca: crate::helpers::deploy_dev_certs().join("ca.crt"), https, pod }
}

/// A webhook Pod of the render, as [`webhook`] starts it.
pub struct Webhook {
    pub pod: crate::pod::RunningPod,
    /// The CA of its serving certificate (deploy/components/dev-certs).
    pub ca: std::path::PathBuf,
    /// Its TLS port on loopback.
    pub https: u16,
}

impl Webhook {
    /// How many reviews it has answered: the sum of `edgegate_admission_reviews_total`.
    pub fn reviews(&self) -> u64 {
        reviews(&self.pod)
    }
}

/// How many reviews webhook Pod `pod` has answered: the sum of its
/// `edgegate_admission_reviews_total`.
pub fn reviews(pod: &RunningPod) -> u64 {
    pod.get("/metrics")
        .lines()
        .filter(|l| l.starts_with("edgegate_admission_reviews_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
        .sum()
}

/// How many times webhook Pod `pod` has taken up a changed certificate from its volume.
pub fn reloads(pod: &RunningPod) -> u64 {
    crate::helpers::counter(&pod.get("/metrics"), "edgegate_tls_reloads_total{result=\"success\"}")
}

/// Replica `replica` of deploy/'s webhook as `render` (applied to `cp`: its Service, Secret and
/// RBAC) has it, run as its Pod in network namespace `netns` ([`run_in_with`]: listening as
/// rendered at the namespace's address, a changed Secret reaching its volume `volume_delay` after
/// it is seen); returned once kube-controller-manager's EndpointSlice controller (started by the
/// caller, [`ControlPlane::start_controller_manager`]) publishes it ready behind the render's
/// Service, so the API server calls it through the Service as a hub's calls a replica.
pub async fn webhook_in(
    cp: &ControlPlane,
    render: &Render,
    replica: usize,
    netns: &NetNs,
    volume_delay: std::time::Duration,
) -> RunningPod {
    let pod = run_in_with(cp, render, "edgegate-webhook", replica, &[Rewrite::MountPath], netns, volume_delay).await;
    let client = cp.client().await;
    let took = crate::helpers::eventually(
        std::time::Duration::from_secs(60),
        "the webhook Pod published ready behind its Service",
        async || published(&client, &netns.address).await == Some(true),
    )
    .await;
    eprintln!("webhook Pod {} at {}: published ready {took:.1?} after it started", pod.name, netns.address);
    pod
}

/// Whether the EndpointSlice controller's slices of the Service `edgegate-webhook` name `address`:
/// `Some(ready)`, ready if one of its endpoints there is (a Pod terminating and a new one may
/// share an address for a moment), `None` if no slice names it.
pub async fn published(client: &kube::Client, address: &str) -> Option<bool> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = "kubernetes.io/service-name=edgegate-webhook,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io";
    let list = slices.list(&kube::api::ListParams::default().labels(selector)).await.ok()?;
    let named: Vec<bool> = list
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter().flatten())
        .filter(|e| e.addresses.iter().any(|a| a == address))
        .map(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .collect();
    (!named.is_empty()).then(|| named.contains(&true))
}

/// deploy/'s ValidatingWebhookConfiguration as the render has it (enforcing), pointed by URL at
/// a webhook Pod's `https` port on loopback with the render's own CA (the Secret
/// `edgegate-webhook-tls`'s `ca.crt`), and scoped to namespaces labelled `edgegate-e2e=<scope>`.
/// The one difference from the shipped path: the API server dials the port, not the Service.
pub async fn register_webhook(cp: &ControlPlane, render: &Render, port: u16, scope: &str) {
    register(cp, render, port, scope, true);
}

fn register(cp: &ControlPlane, render: &Render, port: u16, scope: &str, match_conditions: bool) {
    let mut vwc = render.get("ValidatingWebhookConfiguration", "edgegate").clone();
    let tls = render.get("Secret", "edgegate-webhook-tls");
    let ca: String = tls["data"]["ca.crt"]
        .as_str()
        .expect("the render's Secret edgegate-webhook-tls has ca.crt")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    for hook in vwc["webhooks"].as_array_mut().expect("webhooks") {
        hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": ca});
        hook["namespaceSelector"]["matchLabels"] = json!({"edgegate-e2e": scope});
        if !match_conditions && let Some(hook) = hook.as_object_mut() {
            hook.remove("matchConditions");
        }
    }
    vwc["metadata"] = json!({"name": format!("edgegate-{scope}")});
    apply_objects(cp, vec![vwc]);
}
