//! deploy/ says what the README claims: every overlay renders with kustomize, and the rendered
//! manifests hold the invariants the webhook's safety and the least-privilege RBAC depend on.

use std::process::Command;

use clap::CommandFactory;
use edgegate::runtime::rbac::{PRUNER, PRUNER_LEASE, Rule, WEBHOOK, WEBHOOK_CA_BUNDLE};
use edgegate_system_tests::helpers::{deploy_dev_certs, kustomization, repo};
use edgegate_system_tests::pod::{find, kustomization_with, render};
use serde_json::{Value, json};

fn dev_overlay() -> Vec<Value> {
    deploy_dev_certs();
    render(&repo().join("deploy/overlays/dev"))
}

fn has(objects: &[Value], kind: &str) -> bool {
    objects.iter().any(|o| o["kind"] == kind)
}

fn assert_webhook_invariants(objects: &[Value]) {
    let conditions: Vec<&str> =
        find(objects, "ValidatingWebhookConfiguration", "edgegate")["webhooks"][0]["matchConditions"]
            .as_array()
            .expect("matchConditions")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
    assert_eq!(conditions, ["carries-an-address", "adds-an-address-or-becomes-a-copy"]);
    let vwc = find(objects, "ValidatingWebhookConfiguration", "edgegate");
    let hook = &vwc["webhooks"][0];
    assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
    assert_eq!(hook["sideEffects"], "None");
    assert!(hook["timeoutSeconds"].as_u64().is_some_and(|t| t <= 5), "{hook}");
    assert_eq!(
        hook["clientConfig"]["service"],
        json!({"name": "edgegate-webhook", "namespace": "edgegate-system", "path": "/validate", "port": 443})
    );
    assert_eq!(
        hook["rules"],
        json!([{"apiGroups": ["discovery.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["endpointslices"], "scope": "Namespaced"}])
    );
    // The objectSelector is exactly the binaries' default copy selector.
    let (key, value) = edgegate::core::selector::DEFAULT_COPY_SELECTOR.split_once('=').expect("k=v");
    assert_eq!(hook["objectSelector"], json!({"matchLabels": {key: value}}));
    assert_eq!(
        hook["namespaceSelector"],
        json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "edgegate-system"]}]})
    );
    let service = find(objects, "Service", "edgegate-webhook");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["port"] == 443 && p["targetPort"] == "https"))
    );
}

/// Every `--flag` a container passes is a flag of that binary, and every env var it sets is one
/// the binary reads.
fn assert_args_match(deployment: &Value, command: clap::Command) {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let longs: Vec<String> = command.get_arguments().filter_map(|a| a.get_long().map(str::to_owned)).collect();
    let envs: Vec<String> =
        command.get_arguments().filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned())).collect();
    for arg in container["args"].as_array().expect("args") {
        let flag = arg.as_str().unwrap_or_default().trim_start_matches("--").split('=').next().unwrap_or_default();
        assert!(longs.iter().any(|l| l == flag), "{} passes --{flag}, which it does not have", command.get_name());
    }
    for env in container["env"].as_array().into_iter().flatten() {
        let name = env["name"].as_str().unwrap_or_default();
        assert!(envs.iter().any(|e| e == name), "{} is given env {name}, which it does not read", command.get_name());
    }
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert!(container["resources"]["requests"].is_object() && container["resources"]["limits"].is_object());
    assert!(container["readinessProbe"].is_object() && container["livenessProbe"].is_object());
}

/// The webhook pod keeps serving through a preStop sleep, then drains for `--shutdown-grace`;
/// both must end before the kubelet's SIGKILL.
fn assert_webhook_shutdown_fits(deployment: &Value) {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let sleep = container["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().expect("a preStop sleep");
    let grace = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--shutdown-grace="))
        .and_then(|g| g.strip_suffix('s'))
        .and_then(|g| g.parse::<u64>().ok())
        .expect("--shutdown-grace=Ns");
    let kill_after = pod["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds");
    assert!(sleep >= 1 && sleep + grace < kill_after, "preStop {sleep}s + grace {grace}s within {kill_after}s");
}

fn rules_of(role: &Value) -> Vec<(String, String, Vec<String>)> {
    role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            let strings = |v: &Value| {
                v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect::<Vec<_>>()
            };
            let (groups, resources) = (strings(&r["apiGroups"]), strings(&r["resources"]));
            assert_eq!((groups.len(), resources.len()), (1, 1), "one group and resource per rule: {r}");
            (groups[0].clone(), resources[0].clone(), strings(&r["verbs"]))
        })
        .collect()
}

fn expected(rules: &[Rule]) -> Vec<(String, String, Vec<String>)> {
    rules
        .iter()
        .map(|r| (r.group.to_owned(), r.resource.to_owned(), r.verbs.iter().map(|v| (*v).to_owned()).collect()))
        .collect()
}

/// Whether a render watches or enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Observe,
    Enforce,
}

/// The env value a container sets for `name`.
fn env<'a>(deployment: &'a Value, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == name))
        .map_or(&Value::Null, |e| &e["value"])
}

/// Observe: the webhook warns and is ignored when unreachable, the pruner dry-runs. Enforce: it
/// refuses and fails closed, the pruner deletes. Every webhook configuration in the render agrees.
fn assert_mode(objects: &[Value], mode: Mode) {
    let (policy, webhook_mode, dry_run) = match mode {
        Mode::Observe => ("Ignore", "warn", "true"),
        Mode::Enforce => ("Fail", "deny", "false"),
    };
    for config in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration"))) {
        assert_eq!(config["webhooks"][0]["failurePolicy"], policy, "{mode:?}: {}", config["kind"]);
        assert_eq!(config["metadata"]["labels"]["edgegate.datumapis.com/enforces"], "true");
    }
    if let Some(webhook) =
        objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "edgegate-webhook")
    {
        assert_eq!(env(webhook, "EDGEGATE_MODE"), webhook_mode, "{mode:?}");
    }
    if let Some(deleter) = deleter(objects) {
        assert_eq!(env(deleter, "EDGEGATE_DRY_RUN"), dry_run, "{mode:?}: {}", deleter["metadata"]["name"]);
        assert_eq!(deleter["metadata"]["labels"]["edgegate.datumapis.com/enforces"], "true");
    }
}

/// The one Deployment that deletes copies: edgegate-pruner, or, with components/producer (which
/// removes it), edgegate-producer with `--prune`; none where nothing deletes (a Karmada hub's
/// render: its binaries run on the host).
fn deleter(objects: &[Value]) -> Option<&Value> {
    let deployment = |name: &str| objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name);
    match (deployment("edgegate-pruner"), deployment("edgegate-producer")) {
        (Some(_), Some(_)) => panic!("edgegate-pruner and edgegate-producer both delete copies"),
        (Some(pruner), None) => Some(pruner),
        (None, Some(producer)) => {
            let args = &producer["spec"]["template"]["spec"]["containers"][0]["args"];
            assert!(args.as_array().is_some_and(|a| a.iter().any(|a| a == "--prune")), "the producer prunes: {args}");
            Some(producer)
        }
        (None, None) => None,
    }
}

/// What an install needs to serve from its first minute: every workload's image is pullable, and
/// every webhook configuration gets its CA from the one certificate source the render has — a
/// caBundle equal to the Secret the webhook mounts, or cert-manager's injection from the
/// Certificate that issues that Secret.
/// `edgegate render-check` on `objects`: (passed, what it printed).
fn render_check(objects: &[Value]) -> (bool, String) {
    let docs: Vec<String> = objects.iter().map(Value::to_string).collect();
    // Tests render at once: a name of its own for each.
    static RENDERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RENDERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = std::env::temp_dir().join(format!("edgegate-render-{}-{n}.yaml", std::process::id()));
    std::fs::write(&file, docs.join("\n---\n")).expect("write render");
    let out = Command::new(edgegate_system_tests::helpers::binary("edgegate"))
        .args(["render-check", &file.display().to_string()])
        .output()
        .expect("edgegate runs");
    let _ = std::fs::remove_file(&file);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

fn assert_installable(objects: &[Value]) {
    let (passed, said) = render_check(objects);
    assert!(passed, "edgegate render-check: {said}");
    for o in objects {
        let kind = &o["kind"];
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/part-of"], "edgegate",
            "{kind} {}: the uninstall finds it",
            o["metadata"]["name"]
        );
    }
    for deployment in objects.iter().filter(|o| o["kind"] == "Deployment") {
        let image = &deployment["spec"]["template"]["spec"]["containers"][0]["image"];
        // The tag is the release this checkout will be (Cargo's version), so the two cannot drift.
        let tagged = format!("ghcr.io/datum-cloud/edgegate:v{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(image.as_str(), Some(tagged.as_str()), "{}", deployment["metadata"]["name"]);
    }
    let certificates: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Certificate").collect();
    let secret = objects.iter().find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "edgegate-webhook-tls");
    assert!(
        certificates.is_empty() != secret.is_none(),
        "exactly one certificate source (cert-manager or a Secret), not {} and {secret:?}",
        certificates.len()
    );
    for config in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("WebhookConfiguration"))) {
        let kind = config["kind"].as_str().unwrap_or_default();
        if let Some(from) = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].as_str() {
            assert_eq!(from, "edgegate-system/edgegate-webhook", "{kind}");
            let cert = find(objects, "Certificate", "edgegate-webhook");
            assert_eq!(cert["spec"]["secretName"], "edgegate-webhook-tls");
        } else if keeps_its_ca_bundle(objects).is_some_and(|name| config["metadata"]["name"] == name) {
            // components/ca-keeper: the webhook writes the CA of the certificate it mounts.
            find(objects, "Certificate", "edgegate-webhook");
        } else {
            let strip = |v: &Value| v.as_str().unwrap_or_default().split_whitespace().collect::<String>();
            let bundle = strip(&config["webhooks"][0]["clientConfig"]["caBundle"]);
            let secret = secret.unwrap_or_else(|| panic!("{kind} has no CA: neither injected nor a Secret's"));
            assert!(
                !bundle.is_empty() && bundle == strip(&secret["data"]["ca.crt"]),
                "{kind}: caBundle is the Secret's CA"
            );
        }
    }
    if let Some(webhook) =
        objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "edgegate-webhook")
    {
        assert_eq!(webhook["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"], "edgegate-webhook-tls");
    }
}

/// The webhook configurations the webhook keeps the caBundle of itself (`EDGEGATE_CA_BUNDLE_FOR`), if any.
fn keeps_its_ca_bundle(objects: &[Value]) -> Option<&str> {
    let webhook = objects.iter().find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "edgegate-webhook")?;
    let env = webhook["spec"]["template"]["spec"]["containers"][0]["env"].as_array()?;
    env.iter().find(|e| e["name"] == "EDGEGATE_CA_BUNDLE_FOR")?["value"].as_str()
}

/// A user's kustomization of these lines, rendered.
fn compose(name: &str, resources: &[&str], components: &[&str]) -> Vec<Value> {
    render(&kustomization(&format!("deploy-{name}"), resources, components))
}

fn assert_common(objects: &[Value]) {
    assert_webhook_invariants(objects);
    assert_workloads(objects);
}

/// The workloads, their flags, identities, roles, budgets and policies.
fn assert_workloads(objects: &[Value]) {
    assert_args_match(find(objects, "Deployment", "edgegate-webhook"), edgegate_webhook::args::Args::command());
    assert_webhook_shutdown_fits(find(objects, "Deployment", "edgegate-webhook"));
    assert_eq!(rules_of(find(objects, "ClusterRole", "edgegate-webhook")), expected(WEBHOOK));
    assert_eq!(rules_of(find(objects, "ClusterRole", "edgegate-pruner")), expected(PRUNER));
    let lease = find(objects, "Role", "edgegate-pruner-lease");
    assert_eq!(lease["metadata"]["namespace"], "edgegate-system");
    assert_eq!(rules_of(lease), expected(&[PRUNER_LEASE]));
    // The pruner's calls are granted to whichever Deployment deletes.
    let deleter = deleter(objects).expect("a Deployment that deletes copies");
    let deleter_name = deleter["metadata"]["name"].as_str().expect("name");
    let bindings: &[(&str, &str, &str)] = if deleter_name == "edgegate-pruner" {
        assert_args_match(deleter, edgegate_pruner::args::Args::command());
        &[
            ("ClusterRoleBinding", "edgegate-pruner", "edgegate-pruner"),
            ("RoleBinding", "edgegate-pruner-lease", "edgegate-pruner"),
        ]
    } else {
        assert_args_match(deleter, edgegate_producer::args::Args::command());
        let binding = find(objects, "ClusterRoleBinding", "edgegate-producer-prune");
        assert_eq!(binding["roleRef"]["name"], "edgegate-pruner");
        &[("ClusterRoleBinding", "edgegate-producer-prune", "edgegate-producer")]
    };
    for (kind, name, sa) in [("ClusterRoleBinding", "edgegate-webhook", "edgegate-webhook")].iter().chain(bindings) {
        let binding = find(objects, kind, name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "edgegate-system"}])
        );
        let deployment = find(objects, "Deployment", sa);
        assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], *sa);
    }
    for name in ["edgegate-webhook", deleter_name] {
        find(objects, "PodDisruptionBudget", name);
    }
    find(objects, "NetworkPolicy", "edgegate");
    // No role anywhere grants more than the code uses: no wildcards, no secrets.
    for role in objects.iter().filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role") {
        let text = role.to_string();
        assert!(!text.contains("\"*\"") && !text.contains("secrets"), "{text}");
    }
    for o in objects.iter().filter(|o| o["metadata"]["namespace"].is_string()) {
        assert_eq!(o["metadata"]["namespace"], "edgegate-system", "{} {}", o["kind"], o["metadata"]["name"]);
    }
}

#[test]
fn base_renders_with_the_crd_and_its_invariants() {
    let objects = render(&repo().join("deploy/base"));
    assert_common(&objects);
    assert_mode(&objects, Mode::Observe);
    let crd = find(&objects, "CustomResourceDefinition", "edgereachabilities.networking.datumapis.com");
    let kept: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/crd/edgereachabilities.yaml")).expect("crd"),
    )
    .expect("crd parses");
    assert_eq!(crd["spec"], kept["spec"], "deploy/base carries deploy/crd unchanged");
}

#[test]
fn the_two_install_steps_watch_then_enforce() {
    let observe = render(&repo().join("deploy/overlays/observe"));
    assert_common(&observe);
    assert_installable(&observe);
    assert_mode(&observe, Mode::Observe);
    let enforce = render(&repo().join("deploy/overlays/enforce"));
    assert_common(&enforce);
    assert_installable(&enforce);
    assert_mode(&enforce, Mode::Enforce);
    // The same objects; only what enforcement changes differs.
    let names = |o: &[Value]| o.iter().map(|o| format!("{} {}", o["kind"], o["metadata"]["name"])).collect::<Vec<_>>();
    assert_eq!(names(&observe), names(&enforce));
    let cert = find(&enforce, "Certificate", "edgegate-webhook");
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!(["edgegate-webhook.edgegate-system.svc", "edgegate-webhook.edgegate-system.svc.cluster.local"])
    );
    assert_eq!(find(&enforce, "Issuer", "edgegate-ca")["spec"]["ca"]["secretName"], "edgegate-ca");
}

/// Every combination docs/deploy.md suggests: each optional component added to either step, in
/// the order the docs give (features, then the certificate source and enforcement, which act on
/// what the features added, then the image), and the dev overlay.
#[test]
fn every_documented_combination_is_installable() {
    for mode in ["observe", "enforce"] {
        for extra in [
            vec!["components/producer"],
            vec!["components/monitoring"],
            vec!["components/trim"],
            vec!["components/without-crd"],
            vec!["components/producer", "components/monitoring", "components/trim"],
            vec!["components/producer", "components/producer-milo"],
        ] {
            let mut components = extra.clone();
            components.push("components/cert-manager");
            if mode == "enforce" {
                components.push("components/enforce");
            }
            components.push("components/images");
            let name = format!("{mode}-{}", extra.join("-").replace("components/", ""));
            let objects = compose(&name, &["base"], &components);
            assert_common(&objects);
            assert_installable(&objects);
            assert_mode(&objects, if mode == "observe" { Mode::Observe } else { Mode::Enforce });
            assert_eq!(has(&objects, "CustomResourceDefinition"), !extra.contains(&"components/without-crd"), "{name}");
        }
    }
    let dev = dev_overlay();
    assert_common(&dev);
    assert_installable(&dev);
    assert_mode(&dev, Mode::Enforce);
    // The dev certificate source, watching, with trim: both configurations get its CA.
    let observe_dev =
        compose("observe-dev-trim", &["base"], &["components/trim", "components/dev-certs", "components/images"]);
    assert_installable(&observe_dev);
    assert_mode(&observe_dev, Mode::Observe);
    assert!(has(&observe_dev, "MutatingWebhookConfiguration"));
}

/// The orders that render without an error into a broken install, each named by
/// `edgegate render-check` with the order that avoids it (docs/deploy.md runs it before apply).
#[test]
fn render_check_names_each_wrong_component_order() {
    for (name, components, problem) in [
        (
            "trim-after-cert-manager",
            vec!["components/cert-manager", "components/trim", "components/enforce", "components/images"],
            "MutatingWebhookConfiguration edgegate has no CA source",
        ),
        (
            "policy-after-enforce",
            vec!["components/cert-manager", "components/enforce", "components/policy", "components/images"],
            "ValidatingAdmissionPolicyBinding edgegate only",
        ),
        (
            "producer-after-images",
            vec!["components/cert-manager", "components/images", "components/producer"],
            "Deployment edgegate-producer runs image \"edgegate\"",
        ),
        (
            "milo-before-producer",
            vec!["components/cert-manager", "components/producer-milo", "components/producer", "components/images"],
            "components/producer-milo is listed but changed no producer",
        ),
        (
            "sharded-before-producer",
            vec![
                "components/cert-manager",
                "components/producer-sharded",
                "components/producer",
                "components/producer-milo",
                "components/images",
            ],
            "components/producer-sharded is listed but changed no producer",
        ),
    ] {
        let (passed, said) = render_check(&compose(&format!("wrong-{name}"), &["base"], &components));
        println!("{name}: {said}");
        assert!(!passed && said.contains(problem), "{name}: {said}");
    }
}

/// components/policy: the API server's own engine with edgegate's rules instead of the webhook
/// configuration (never both enforcing), watching until components/enforce; its policy is what
/// `edgegate policy` prints, and its match conditions are the webhook configuration's.
#[test]
fn the_policy_component_replaces_the_webhook_configuration() {
    let kept = std::fs::read_to_string(repo().join("deploy/components/policy/policy.yaml")).expect("policy.yaml");
    let generated = edgegate::core::policy::policy_yaml().expect("policy renders");
    assert_eq!(
        kept,
        format!("# Generated by `edgegate policy` from src/core/policy.rs.\n{generated}"),
        "deploy/components/policy/policy.yaml is stale: run `cargo run -q --bin edgegate -- policy > deploy/components/policy/policy.yaml`"
    );
    let squash = |v: &Value| v.as_str().unwrap_or_default().split_whitespace().collect::<Vec<_>>().join(" ");
    let conditions = |list: &Value| -> Vec<(String, String)> {
        list.as_array().into_iter().flatten().map(|c| (squash(&c["name"]), squash(&c["expression"]))).collect()
    };
    let webhook = conditions(
        &find(&render(&repo().join("deploy/base")), "ValidatingWebhookConfiguration", "edgegate")["webhooks"][0]["matchConditions"],
    );
    let shared = conditions(&serde_json::to_value(edgegate::core::policy::webhook_match_conditions()).expect("json"));
    assert_eq!(webhook, shared, "the webhook configuration's matchConditions are the policy's");

    for (name, enforce) in [("observe-policy", false), ("enforce-policy", true)] {
        let mut components = vec!["components/policy", "components/cert-manager"];
        components.extend(enforce.then_some("components/enforce"));
        components.push("components/images");
        let objects = compose(name, &["base"], &components);
        assert!(!has(&objects, "ValidatingWebhookConfiguration"), "{name}: two enforcing engines");
        let policy = find(&objects, "ValidatingAdmissionPolicy", "edgegate");
        let binding = find(&objects, "ValidatingAdmissionPolicyBinding", "edgegate");
        let (failure, actions) = if enforce { ("Fail", json!(["Deny"])) } else { ("Ignore", json!(["Warn", "Audit"])) };
        assert_eq!(policy["spec"]["failurePolicy"], failure, "{name}");
        assert_eq!(binding["spec"]["validationActions"], actions, "{name}");
        for o in [policy, binding] {
            assert_eq!(
                o["metadata"]["labels"]["edgegate.datumapis.com/enforces"], "true",
                "{name}: emergency off finds it"
            );
            assert_eq!(o["metadata"]["labels"]["app.kubernetes.io/part-of"], "edgegate", "{name}: uninstall finds it");
        }
        assert_eq!(env(find(&objects, "Deployment", "edgegate-pruner"), "EDGEGATE_EXACT_SPELLING"), "true", "{name}");
        assert_workloads(&objects);
        assert_installable(&objects);
        assert_mode(&objects, if enforce { Mode::Enforce } else { Mode::Observe });
    }
}

/// components/ca-keeper after components/cert-manager: no configuration is injected any more, the
/// webhook keeps both (with trim) itself, and may read and patch exactly those two.
#[test]
fn the_ca_keeper_takes_the_ca_bundles_over_from_the_injector() {
    for (name, enforce) in [("observe-ca-keeper", None), ("enforce-ca-keeper", Some("components/enforce"))] {
        let mut components = vec!["components/trim", "components/cert-manager", "components/ca-keeper"];
        components.extend(enforce);
        components.push("components/images");
        let objects = compose(name, &["base"], &components);
        assert_common(&objects);
        assert_installable(&objects);
        assert_mode(&objects, if enforce.is_some() { Mode::Enforce } else { Mode::Observe });
        assert_eq!(keeps_its_ca_bundle(&objects), Some("edgegate"), "{name}");
        for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
            let config = find(&objects, kind, "edgegate");
            assert!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null(), "{name}: {kind}");
        }
        assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-webhook-ca-bundle")), expected(WEBHOOK_CA_BUNDLE));
        assert_eq!(
            find(&objects, "ClusterRoleBinding", "edgegate-webhook-ca-bundle")["subjects"],
            json!([{"kind": "ServiceAccount", "name": "edgegate-webhook", "namespace": "edgegate-system"}])
        );
    }
}

#[test]
fn the_webhook_mounts_its_certificate_where_its_flags_point() {
    let objects = dev_overlay();
    let webhook = &find(&objects, "Deployment", "edgegate-webhook")["spec"]["template"]["spec"];
    let mount = webhook["containers"][0]["volumeMounts"][0]["mountPath"].as_str().unwrap_or_default().to_owned();
    let args = webhook["containers"][0]["args"].to_string();
    assert!(
        args.contains(&format!("--tls-cert={mount}/tls.crt")) && args.contains(&format!("--tls-key={mount}/tls.key")),
        "{args}"
    );
}

/// Sizing from the measured figures, and nothing that stalls a drain or a rollout.
#[test]
fn sizing_priority_spread_and_disruption_budgets() {
    let plain = compose("sizing", &["base"], &["components/cert-manager", "components/images"]);
    let objects =
        compose("sizing-producer", &["base"], &["components/producer", "components/cert-manager", "components/images"]);
    let mib = |q: &Value| {
        let q = q.as_str().unwrap_or_default();
        q.strip_suffix("Mi").and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| panic!("memory {q} in Mi"))
    };
    // (name, measured MiB at the largest hub measured: docs/performance.md, docs/producer.md; the
    // producer prunes too, so it holds the pruner's copies besides its own 80 MiB)
    for (objects, name, measured) in [
        (&objects, "edgegate-webhook", 74),
        (&plain, "edgegate-pruner", 178),
        (&objects, "edgegate-producer", 80 + 178),
    ] {
        let resources = &find(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["resources"];
        let (request, limit) = (mib(&resources["requests"]["memory"]), mib(&resources["limits"]["memory"]));
        assert!(
            request >= measured && limit >= 2 * measured,
            "{name}: request {request}Mi, limit {limit}Mi vs {measured} MiB measured"
        );
        let pdb = find(objects, "PodDisruptionBudget", name);
        assert_eq!(
            pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow",
            "{name}: an unready pod never stalls a drain"
        );
    }
    let webhook = &find(&objects, "Deployment", "edgegate-webhook")["spec"]["template"]["spec"];
    assert_eq!(webhook["priorityClassName"], "edgegate-webhook");
    assert!(find(&objects, "PriorityClass", "edgegate-webhook")["value"].as_u64().is_some_and(|v| v < 1_000_000_000));
    let keys: Vec<&str> = webhook["topologySpreadConstraints"]
        .as_array()
        .expect("spread")
        .iter()
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert_eq!(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
    // Metrics only from namespaces that say they scrape; DNS only to cluster DNS.
    for name in ["edgegate", "edgegate-producer"] {
        let policy = find(&objects, "NetworkPolicy", name).to_string();
        assert!(policy.contains("edgegate.datumapis.com/scrape") && policy.contains("kube-dns"), "{policy}");
    }
}

#[test]
fn karmada_hub_overlay_registers_the_webhook_by_url_with_exact_rbac() {
    let objects = render(&repo().join("deploy/overlays/karmada-hub/hub"));
    let vwc = find(&objects, "ValidatingWebhookConfiguration", "edgegate");
    let hook = &vwc["webhooks"][0];
    assert_eq!(hook["clientConfig"], json!({"url": "https://edgegate-webhook.edgegate-system.svc:443/validate"}));
    assert_mode(&objects, Mode::Observe);
    let enforcing = compose("karmada-hub-enforce", &["overlays/karmada-hub/hub"], &["components/enforce"]);
    assert_mode(&enforcing, Mode::Enforce);
    assert!(hook["timeoutSeconds"].as_u64().is_some_and(|t| t <= 5));
    let (key, value) = edgegate::core::selector::DEFAULT_COPY_SELECTOR.split_once('=').expect("k=v");
    assert_eq!(hook["objectSelector"], json!({"matchLabels": {key: value}}));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-webhook")), expected(WEBHOOK));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-pruner")), expected(PRUNER));
    assert_eq!(rules_of(find(&objects, "Role", "edgegate-pruner-lease")), expected(&[PRUNER_LEASE]));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-webhook-ca-bundle")), expected(WEBHOOK_CA_BUNDLE));
    for rule in WEBHOOK_CA_BUNDLE {
        assert_eq!(
            rule.names,
            [vwc["metadata"]["name"].as_str().unwrap_or_default()],
            "the role names this configuration"
        );
    }
    find(&objects, "CustomResourceDefinition", "edgereachabilities.networking.datumapis.com");
    assert!(!has(&objects, "Deployment"), "no Pods run on karmada-apiserver");
}

#[test]
fn karmada_host_overlay_runs_the_binaries_against_the_hub() {
    let objects = render(&repo().join("deploy/overlays/karmada-hub/host"));
    assert_installable(&objects);
    assert_mode(&objects, Mode::Observe);
    assert_mode(
        &compose("karmada-host-enforce", &["overlays/karmada-hub/host"], &["components/enforce"]),
        Mode::Enforce,
    );
    assert!(
        !has(&objects, "ClusterRole") && !has(&objects, "ValidatingWebhookConfiguration"),
        "hub objects stay on the hub"
    );
    for (name, command) in [
        ("edgegate-webhook", edgegate_webhook::args::Args::command()),
        ("edgegate-pruner", edgegate_pruner::args::Args::command()),
    ] {
        let deployment = find(&objects, "Deployment", name);
        assert_args_match(deployment, command);
        let pod = &deployment["spec"]["template"]["spec"];
        let args = pod["containers"][0]["args"].to_string();
        assert!(args.contains("--kubeconfig=/etc/edgegate/hub/kubeconfig"), "{args}");
        let mounts = pod["containers"][0]["volumeMounts"].as_array().expect("mounts");
        let hub = mounts.iter().find(|m| m["name"] == "hub").expect("hub kubeconfig mounted");
        assert_eq!(hub["mountPath"], "/etc/edgegate/hub");
        let volume = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "hub")
            .cloned()
            .expect("hub volume");
        assert_eq!(volume["secret"]["secretName"], format!("{name}-hub-kubeconfig"));
        assert_eq!(pod["automountServiceAccountToken"], false);
    }
    let webhook_args =
        find(&objects, "Deployment", "edgegate-webhook")["spec"]["template"]["spec"]["containers"][0]["args"]
            .to_string();
    assert!(webhook_args.contains("--ca-bundle-for=edgegate"), "{webhook_args}");
    let cert = find(&objects, "Certificate", "edgegate-webhook");
    assert!(cert["spec"]["dnsNames"].to_string().contains("edgegate-webhook.edgegate-system.svc"));
    let service = find(&objects, "Service", "edgegate-webhook");
    assert_eq!(service["metadata"]["namespace"], "edgegate-system");
}

/// The producer on a Karmada hub: its ServiceAccount and exact roles on karmada-apiserver
/// (components/karmada-producer-hub), its Pod in the host cluster with the hub's kubeconfig, no
/// identity and no roles there, egress to karmada-apiserver's port
/// (components/karmada-producer-host); edgegate's namespace on the hub is not propagated to the
/// members.
#[test]
fn karmada_overlays_carry_the_producer_each_its_half() {
    use edgegate::runtime::rbac::{PRODUCER_HUB, PRODUCER_LEASE};
    let hub = compose("karmada-producer-hub", &["overlays/karmada-hub/hub"], &["components/karmada-producer-hub"]);
    let ns = find(&hub, "Namespace", "edgegate-system");
    assert_eq!(ns["metadata"]["labels"]["namespace.karmada.io/skip-auto-propagation"], "true");
    find(&hub, "ServiceAccount", "edgegate-producer");
    assert_eq!(rules_of(find(&hub, "ClusterRole", "edgegate-producer")), expected(PRODUCER_HUB));
    assert_eq!(rules_of(find(&hub, "Role", "edgegate-producer-lease")), expected(&[PRODUCER_LEASE]));
    assert_eq!(find(&hub, "ClusterRoleBinding", "edgegate-producer-prune")["roleRef"]["name"], "edgegate-pruner");
    find(&hub, "ClusterRole", "edgegate-pruner");
    assert!(!has(&hub, "Deployment"), "no Pods run on karmada-apiserver");

    let components = [
        "components/producer",
        "components/producer-milo",
        "components/karmada-producer-host",
        "components/enforce",
        "components/images",
    ];
    let host = compose("karmada-producer-host", &["overlays/karmada-hub/host"], &components);
    let pod = &find(&host, "Deployment", "edgegate-producer")["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].to_string();
    assert!(
        args.contains("--kubeconfig=/etc/edgegate/hub/kubeconfig") && args.contains("--milo-kubeconfig="),
        "{args}"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert!(pod["serviceAccountName"].is_null(), "no identity in the host cluster");
    let volumes = pod["volumes"].to_string();
    assert!(
        volumes.contains("edgegate-producer-hub-kubeconfig") && volumes.contains("edgegate-producer-milo"),
        "{volumes}"
    );
    let egress = find(&host, "NetworkPolicy", "edgegate-producer")["spec"]["egress"][0]["ports"].to_string();
    assert!(egress.contains("5443"), "{egress}");
    for kind in ["ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"] {
        assert!(
            !host.iter().any(|o| o["kind"] == kind
                && o["metadata"]["name"].as_str().unwrap_or_default().starts_with("edgegate-producer")),
            "the producer's {kind} belongs on the hub"
        );
    }
    assert!(
        !host.iter().any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "edgegate-pruner"),
        "the producer prunes: no pruner beside it"
    );
    let (passed, said) = render_check(&host);
    assert!(passed, "{said}");
}

#[test]
fn producer_component_adds_the_producer_with_exact_rbac() {
    use edgegate::runtime::rbac::{PRODUCER_HUB, PRODUCER_LEASE, PRODUCER_PROJECT};
    let objects = compose("producer", &["overlays/enforce"], &["components/producer"]);
    // Added after the overlay's components/images, the producer keeps the bare name, and after its
    // components/enforce it only dry-runs its deletions: the docs say to list components/producer
    // before components/enforce and components/images last in one kustomization, and this is why.
    let producer = find(&objects, "Deployment", "edgegate-producer");
    assert_eq!(producer["spec"]["template"]["spec"]["containers"][0]["image"], "edgegate");
    assert_eq!(env(producer, "EDGEGATE_DRY_RUN"), "true");
    let (passed, said) = render_check(&objects);
    assert!(!passed && said.contains("list components/producer before components/enforce"), "{said}");
    let objects = compose(
        "producer-ordered",
        &["base"],
        &["components/producer", "components/cert-manager", "components/enforce", "components/images"],
    );
    assert_common(&objects);
    assert_mode(&objects, Mode::Enforce);
    let (passed, said) = render_check(&objects);
    assert!(passed, "{said}");
    let producer = find(&objects, "Deployment", "edgegate-producer");
    let spec = &producer["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], "edgegate-producer-projects");
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-producer")), expected(PRODUCER_HUB));
    assert_eq!(rules_of(find(&objects, "Role", "edgegate-producer-lease")), expected(&[PRODUCER_LEASE]));
    // The roles of the other sides are not the hub's: they grant nothing there.
    let not_hubs = ["edgegate-producer-project", "edgegate-producer-milo"];
    assert!(
        !objects.iter().any(|o| not_hubs.iter().any(|n| o["metadata"]["name"] == *n)),
        "another side's role on the hub"
    );
    // Each project's side (deploy/project): its identity and the read grant bound to it.
    let project = render(&repo().join("deploy/project"));
    assert_eq!(rules_of(find(&project, "ClusterRole", "edgegate-producer-project")), expected(PRODUCER_PROJECT));
    let binding = find(&project, "ClusterRoleBinding", "edgegate-producer-project");
    assert_eq!(binding["subjects"][0]["name"], "edgegate-producer");
    assert!(find(&project, "ServiceAccount", "edgegate-producer")["metadata"]["namespace"] == "edgegate-system");
    // The producer deletes, on its own Lease (so it must not run without election); no pruner.
    assert!(!objects.iter().any(|o| o["metadata"]["name"] == "edgegate-pruner"
        && (o["kind"] == "Deployment" || o["kind"] == "PodDisruptionBudget")));
    let args = spec["containers"][0]["args"].to_string();
    assert!(args.contains("--lease-name=edgegate-producer") && !args.contains("--no-leader-election"), "{args}");
    assert!(args.contains("--prune"), "{args}");

    // With Milo: projects discovered there, Milo's kubeconfig mounted from its Secret.
    let objects = compose(
        "producer-milo",
        &["base"],
        &[
            "components/producer",
            "components/producer-milo",
            "components/cert-manager",
            "components/enforce",
            "components/images",
        ],
    );
    assert_common(&objects);
    let producer = find(&objects, "Deployment", "edgegate-producer");
    assert_args_match(producer, edgegate_producer::args::Args::command());
    let spec = &producer["spec"]["template"]["spec"];
    let args = spec["containers"][0]["args"].to_string();
    assert!(
        args.contains("--milo-kubeconfig=/etc/edgegate/milo/kubeconfig") && !args.contains("--projects-dir"),
        "{args}"
    );
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], "edgegate-producer-milo");
    assert_eq!(spec["containers"][0]["volumeMounts"][0]["mountPath"], "/etc/edgegate/milo");
    // Milo's side (deploy/milo): both roles at its root, bound to one user.
    use edgegate::runtime::rbac::PRODUCER_MILO;
    let milo = render(&repo().join("deploy/milo"));
    assert_eq!(rules_of(find(&milo, "ClusterRole", "edgegate-producer-milo")), expected(PRODUCER_MILO));
    assert_eq!(rules_of(find(&milo, "ClusterRole", "edgegate-producer-project")), expected(PRODUCER_PROJECT));
    for role in ["edgegate-producer-milo", "edgegate-producer-project"] {
        let binding = find(&milo, "ClusterRoleBinding", role);
        assert_eq!(binding["roleRef"]["name"], role);
        assert_eq!(
            binding["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "edgegate-producer"}])
        );
    }
    assert_eq!(milo.len(), 4, "roles and bindings only: nothing namespaced, nothing of the hub's");

    // docs/producer.md's own kustomization over it, pasted in a clone: the subject replaced.
    let docs = std::fs::read_to_string(repo().join("docs/producer.md")).expect("docs/producer.md");
    let heredoc = docs.split("cat > my/milo/kustomization.yaml <<'EOF'\n").nth(1).expect("the kustomization in docs");
    let text = heredoc.split("\nEOF\n").next().expect("its end");
    let clone = edgegate_system_tests::docs::clone();
    std::fs::create_dir_all(clone.path().join("my/milo")).expect("my/milo");
    std::fs::write(clone.path().join("my/milo/kustomization.yaml"), format!("{text}\n")).expect("write");
    let mine = render(&clone.path().join("my/milo"));
    for role in ["edgegate-producer-milo", "edgegate-producer-project"] {
        let subjects = &find(&mine, "ClusterRoleBinding", role)["subjects"];
        assert_eq!(
            subjects,
            &json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "my-producers"}])
        );
    }
}

/// docs/deploy.md's two kustomizations for the producer on a Karmada hub, pasted in a clone, are
/// the compositions the tests run (`karmada_overlays_carry_the_producer_each_its_half` above;
/// producer_e2e.rs runs the host's producer), and pass render-check.
#[test]
fn the_documented_karmada_producer_kustomizations_are_the_tested_ones() {
    let clone = edgegate_system_tests::docs::clone();
    let block = edgegate_system_tests::docs::sh_block("deploy.md", "### The producer on a Karmada hub");
    edgegate_system_tests::docs::paste(clone.path(), std::path::Path::new("/dev/null"), &block);
    let hub = render(&clone.path().join("my/karmada-hub"));
    let tested = compose("karmada-pasted-hub", &["overlays/karmada-hub/hub"], &["components/karmada-producer-hub"]);
    assert_eq!(hub, tested, "my/karmada-hub");
    let host = render(&clone.path().join("my/karmada-host"));
    let components =
        ["components/producer", "components/producer-milo", "components/karmada-producer-host", "components/images"];
    let tested = compose("karmada-pasted-host", &["overlays/karmada-hub/host"], &components);
    assert_eq!(host, tested, "my/karmada-host");
    for (side, objects) in [("hub", &hub), ("host", &host)] {
        let (passed, said) = render_check(objects);
        assert!(passed, "{side}: {said}");
    }
}

/// docs/sharding.md's kustomization, pasted in a clone: four sharing replicas, set where a server-side
/// apply keeps them, and nothing render-check would name.
#[test]
fn the_documented_sharded_kustomization_renders_four_replicas() {
    let docs = std::fs::read_to_string(repo().join("docs/sharding.md")).expect("docs/sharding.md");
    let block = docs.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).expect("the kustomization");
    let clone = edgegate_system_tests::docs::clone();
    std::fs::create_dir_all(clone.path().join("my/edgegate")).expect("my/edgegate");
    std::fs::write(clone.path().join("my/edgegate/kustomization.yaml"), block).expect("write");
    deploy_dev_certs();
    let objects = render(&clone.path().join("my/edgegate"));
    let producer = find(&objects, "StatefulSet", "edgegate-producer");
    assert_eq!(producer["spec"]["replicas"], 4);
    let (passed, said) = render_check(&objects);
    assert!(passed, "{said}");
}

/// components/producer-sharded makes the producer a StatefulSet of three sharing replicas, listed
/// before or after components/enforce: the components that patch the producer select it by group,
/// so it deletes (not dry-runs) either way, and runs a pinned image.
#[test]
fn producer_sharded_is_a_statefulset_whatever_the_order() {
    let last = ["components/producer", "components/producer-milo", "components/enforce", "components/producer-sharded"];
    let first =
        ["components/producer", "components/producer-sharded", "components/producer-milo", "components/enforce"];
    for (name, order) in [("sharded-last", last), ("sharded-first", first)] {
        let components: Vec<&str> =
            ["components/cert-manager"].into_iter().chain(order).chain(["components/images"]).collect();
        let objects = compose(name, &["base"], &components);
        assert!(!objects.iter().any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "edgegate-producer"));
        let producer = find(&objects, "StatefulSet", "edgegate-producer");
        assert_eq!(producer["spec"]["replicas"], 3, "{name}");
        assert_eq!(producer["spec"]["podManagementPolicy"], "Parallel", "{name}");
        assert_eq!(env(producer, "EDGEGATE_SHARD"), "true", "{name}");
        assert_eq!(env(producer, "EDGEGATE_DRY_RUN"), "false", "{name}: components/enforce reached it");
        let args = producer["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(args.contains("--milo-kubeconfig="), "{name}: components/producer-milo reached it: {args}");
        assert_ne!(producer["spec"]["template"]["spec"]["containers"][0]["image"], "edgegate", "{name}");
        let budget = find(&objects, "PodDisruptionBudget", "edgegate-producer");
        assert_eq!(budget["spec"]["selector"]["matchLabels"], producer["spec"]["selector"]["matchLabels"]);
        let (passed, said) = render_check(&objects);
        assert!(passed, "{name}: {said}");
    }
}

#[test]
fn monitoring_component_adds_rules_monitors_and_the_dashboard() {
    let objects =
        compose("monitoring", &["base"], &["components/monitoring", "components/cert-manager", "components/images"]);
    assert_common(&objects);
    let rule = find(&objects, "PrometheusRule", "edgegate");
    assert_eq!(rule["metadata"]["namespace"], "edgegate-system");
    let groups: Vec<&str> =
        rule["spec"]["groups"].as_array().expect("groups").iter().filter_map(|g| g["name"].as_str()).collect();
    assert_eq!(
        groups,
        ["edgegate-webhook", "edgegate-api-server", "edgegate-hub", "edgegate-pruner", "edgegate-producer"]
    );
    for name in ["edgegate-webhook", "edgegate-pruner", "edgegate-producer"] {
        let monitor = find(&objects, "PodMonitor", name);
        assert_eq!(monitor["spec"]["jobLabel"], "app.kubernetes.io/name");
        assert_eq!(monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], name);
        assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["port"], "admin");
    }
    let dashboard = find(&objects, "ConfigMap", "edgegate-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value =
        serde_json::from_str(dashboard["data"]["edgegate.json"].as_str().expect("dashboard")).expect("JSON");
    assert_eq!(json["uid"], "edgegate");
}

/// docs/deploy.md's digest pin, pasted into a user's kustomization that lists `components/images`
/// last (as the docs say), reaches every Deployment: `ghcr.io/datum-cloud/edgegate@sha256:…`, no
/// tag. The parent's `images:` runs after its components, so it must name the image as the
/// component left it (`ghcr.io/datum-cloud/edgegate`); the pin 0.1.0 documented named `edgegate`
/// and changed nothing.
#[test]
fn the_documented_digest_pin_reaches_every_deployment() {
    let docs = std::fs::read_to_string(repo().join("docs/deploy.md")).expect("docs/deploy.md");
    let block = docs
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.contains("digest: sha256:"))
        .expect("docs/deploy.md has a yaml block pinning a digest");
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let pin: String = block
        .lines()
        .map(|l| match l.split_once("digest: sha256:") {
            Some((indent, _)) => format!("{indent}digest: {digest}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let pinned = format!("ghcr.io/datum-cloud/edgegate@{digest}");
    let renders = [
        (
            "pin-enforce",
            vec!["base"],
            vec!["components/producer", "components/cert-manager", "components/enforce", "components/images"],
        ),
        ("pin-karmada-host", vec!["overlays/karmada-hub/host"], vec![]),
    ];
    for (name, resources, components) in renders {
        let objects = render(&kustomization_with(name, &resources, &components, &pin));
        let deployments: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Deployment").collect();
        assert!(deployments.len() >= 2, "{name}: the Deployments");
        for d in deployments {
            let image = &d["spec"]["template"]["spec"]["containers"][0]["image"];
            assert_eq!(image.as_str(), Some(pinned.as_str()), "{name}: {}", d["metadata"]["name"]);
        }
    }
}
