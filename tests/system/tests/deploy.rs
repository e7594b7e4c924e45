//! deploy/ says what the README claims: every overlay renders with kustomize, and the rendered
//! manifests hold the invariants the webhook's safety and the least-privilege RBAC depend on.

use std::path::Path;
use std::process::Command;

use clap::CommandFactory;
use edgegate::runtime::rbac::{PRUNER, PRUNER_LEASE, Rule, WEBHOOK};
use edgegate_system_tests::helpers::repo;
use serde_json::{Value, json};

/// `kubectl kustomize DIR` (or `kustomize build DIR`), parsed into objects.
fn render(dir: &Path) -> Vec<Value> {
    let kustomize = std::env::var("EDGEGATE_KUSTOMIZE").unwrap_or_else(|_| "kubectl kustomize".to_owned());
    let mut words = kustomize.split_whitespace();
    let program = words.next().unwrap_or("kubectl");
    let out =
        Command::new(program).args(words).arg(dir).output().expect("kustomize runs (kubectl or EDGEGATE_KUSTOMIZE)");
    assert!(out.status.success(), "rendering {} failed: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_saphyr::from_multiple::<Value>(&text).expect("rendered YAML parses")
}

fn dev_overlay() -> Vec<Value> {
    let certs = repo().join("deploy/overlays/dev/certs");
    if !certs.join("tls.crt").exists() {
        let status = Command::new(repo().join("certs/dev-certs.sh")).arg(&certs).output().expect("dev-certs.sh");
        assert!(status.status.success());
    }
    render(&repo().join("deploy/overlays/dev"))
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered manifests"))
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
    assert_eq!(hook["failurePolicy"], "Fail");
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
    assert_eq!(container["image"], "ghcr.io/datum-cloud/edgegate:v0.1.0");
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

fn assert_common(objects: &[Value]) {
    assert_webhook_invariants(objects);
    assert_args_match(find(objects, "Deployment", "edgegate-webhook"), edgegate_webhook::args::Args::command());
    assert_args_match(find(objects, "Deployment", "edgegate-pruner"), edgegate_pruner::args::Args::command());
    assert_webhook_shutdown_fits(find(objects, "Deployment", "edgegate-webhook"));
    assert_eq!(rules_of(find(objects, "ClusterRole", "edgegate-webhook")), expected(WEBHOOK));
    assert_eq!(rules_of(find(objects, "ClusterRole", "edgegate-pruner")), expected(PRUNER));
    let lease = find(objects, "Role", "edgegate-pruner-lease");
    assert_eq!(lease["metadata"]["namespace"], "edgegate-system");
    assert_eq!(rules_of(lease), expected(&[PRUNER_LEASE]));
    for (kind, name, sa) in [
        ("ClusterRoleBinding", "edgegate-webhook", "edgegate-webhook"),
        ("ClusterRoleBinding", "edgegate-pruner", "edgegate-pruner"),
        ("RoleBinding", "edgegate-pruner-lease", "edgegate-pruner"),
    ] {
        let binding = find(objects, kind, name);
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa, "namespace": "edgegate-system"}])
        );
        let deployment = find(objects, "Deployment", sa);
        assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], sa);
    }
    for name in ["edgegate-webhook", "edgegate-pruner"] {
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
    let crd = find(&objects, "CustomResourceDefinition", "edgereachabilities.networking.datumapis.com");
    let kept: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("deploy/crd/edgereachabilities.yaml")).expect("crd"),
    )
    .expect("crd parses");
    assert_eq!(crd["spec"], kept["spec"], "deploy/base carries deploy/crd unchanged");
}

#[test]
fn with_cert_manager_injects_the_ca_and_issues_the_service_certificate() {
    let objects = render(&repo().join("deploy/overlays/with-cert-manager"));
    assert_common(&objects);
    let vwc = find(&objects, "ValidatingWebhookConfiguration", "edgegate");
    assert_eq!(vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"], "edgegate-system/edgegate-webhook");
    let cert = find(&objects, "Certificate", "edgegate-webhook");
    assert_eq!(cert["spec"]["secretName"], "edgegate-webhook-tls");
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!(["edgegate-webhook.edgegate-system.svc", "edgegate-webhook.edgegate-system.svc.cluster.local"])
    );
    let issuer = find(&objects, "Issuer", "edgegate-ca");
    assert_eq!(issuer["spec"]["ca"]["secretName"], "edgegate-ca");
}

#[test]
fn dev_overlay_carries_the_ca_bundle_and_the_secret() {
    let objects = dev_overlay();
    assert_common(&objects);
    let secret = find(&objects, "Secret", "edgegate-webhook-tls");
    let bundle =
        find(&objects, "ValidatingWebhookConfiguration", "edgegate")["webhooks"][0]["clientConfig"]["caBundle"].clone();
    let strip = |v: &Value| v.as_str().unwrap_or_default().split_whitespace().collect::<String>();
    assert!(!strip(&bundle).is_empty());
    assert_eq!(strip(&bundle), strip(&secret["data"]["ca.crt"]));
    // The webhook mounts that Secret where its --tls-cert/--tls-key point.
    let webhook = &find(&objects, "Deployment", "edgegate-webhook")["spec"]["template"]["spec"];
    assert_eq!(webhook["volumes"][0]["secret"]["secretName"], "edgegate-webhook-tls");
    let mount = webhook["containers"][0]["volumeMounts"][0]["mountPath"].as_str().unwrap_or_default().to_owned();
    let args = webhook["containers"][0]["args"].to_string();
    assert!(
        args.contains(&format!("--tls-cert={mount}/tls.crt")) && args.contains(&format!("--tls-key={mount}/tls.key")),
        "{args}"
    );
}

#[test]
fn without_crd_component_leaves_the_crd_out() {
    let dir = repo().join("target/deploy-test/without-crd");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../../deploy/base]\ncomponents: [../../../deploy/components/without-crd]\n",
    )
    .expect("write");
    let objects = render(&dir);
    assert!(!has(&objects, "CustomResourceDefinition"));
    assert_common(&objects);

    let trim = repo().join("target/deploy-test/trim");
    std::fs::create_dir_all(&trim).expect("mkdir");
    std::fs::write(
        trim.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../../deploy/base]\ncomponents: [../../../deploy/components/trim]\n",
    )
    .expect("write");
    let objects = render(&trim);
    let mwc = find(&objects, "MutatingWebhookConfiguration", "edgegate");
    assert_eq!(mwc["webhooks"][0]["clientConfig"]["service"]["path"], "/mutate");
    assert_eq!(mwc["webhooks"][0]["sideEffects"], "None");
}

#[test]
fn karmada_hub_overlay_registers_the_webhook_by_url_with_exact_rbac() {
    let objects = render(&repo().join("deploy/overlays/karmada-hub/hub"));
    let vwc = find(&objects, "ValidatingWebhookConfiguration", "edgegate");
    let hook = &vwc["webhooks"][0];
    assert_eq!(hook["clientConfig"], json!({"url": "https://edgegate-webhook.edgegate-system.svc:443/validate"}));
    assert_eq!(hook["failurePolicy"], "Fail");
    assert!(hook["timeoutSeconds"].as_u64().is_some_and(|t| t <= 5));
    let (key, value) = edgegate::core::selector::DEFAULT_COPY_SELECTOR.split_once('=').expect("k=v");
    assert_eq!(hook["objectSelector"], json!({"matchLabels": {key: value}}));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-webhook")), expected(WEBHOOK));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-pruner")), expected(PRUNER));
    assert_eq!(rules_of(find(&objects, "Role", "edgegate-pruner-lease")), expected(&[PRUNER_LEASE]));
    let ca_role = find(&objects, "ClusterRole", "edgegate-webhook-ca-bundle");
    let rule = edgegate::runtime::rbac::WEBHOOK_CA_BUNDLE;
    assert_eq!(
        ca_role["rules"],
        json!([{"apiGroups": [rule.group], "resources": [rule.resource], "resourceNames": rule.names, "verbs": rule.verbs}])
    );
    assert_eq!(rule.names, [vwc["metadata"]["name"].as_str().unwrap_or_default()], "the role names this configuration");
    find(&objects, "CustomResourceDefinition", "edgereachabilities.networking.datumapis.com");
    assert!(!has(&objects, "Deployment"), "no Pods run on karmada-apiserver");
}

#[test]
fn karmada_host_overlay_runs_the_binaries_against_the_hub() {
    let objects = render(&repo().join("deploy/overlays/karmada-hub/host"));
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

#[test]
fn producer_component_adds_the_producer_with_exact_rbac() {
    use edgegate::runtime::rbac::{PRODUCER_HUB, PRODUCER_LEASE, PRODUCER_PROJECT};
    let objects = render(&repo().join("deploy/overlays/with-producer"));
    assert_common(&objects);
    let producer = find(&objects, "Deployment", "edgegate-producer");
    assert_args_match(producer, edgegate_producer::args::Args::command());
    let spec = &producer["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"][0]["secret"]["secretName"], "edgegate-producer-projects");
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-producer")), expected(PRODUCER_HUB));
    assert_eq!(rules_of(find(&objects, "ClusterRole", "edgegate-producer-project")), expected(PRODUCER_PROJECT));
    assert_eq!(rules_of(find(&objects, "Role", "edgegate-producer-lease")), expected(&[PRODUCER_LEASE]));
}

#[test]
fn monitoring_component_adds_rules_monitors_and_the_dashboard() {
    let objects = render(&repo().join("deploy/overlays/with-monitoring"));
    assert_common(&objects);
    let rule = find(&objects, "PrometheusRule", "edgegate");
    assert_eq!(rule["metadata"]["namespace"], "edgegate-system");
    assert!(rule["spec"]["groups"].as_array().is_some_and(|g| g.len() == 3));
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
