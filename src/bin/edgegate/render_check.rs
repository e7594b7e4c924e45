//! `edgegate render-check`: what a kustomization of deploy/ renders, checked before it is applied.
//! kustomize applies components in the order they are listed, each to what exists by then, so a
//! wrong order renders without an error into an install that breaks: a webhook configuration no
//! certificate source reaches (fails closed with no CA), a policy left at Warn while the pruner
//! deletes, an image nobody can pull. Each problem names the order that avoids it.

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;

/// The annotation cert-manager's CA injector fills a caBundle from.
const INJECT: &str = "cert-manager.io/inject-ca-from";

/// Read a render (`-`: standard input), print each problem; exit 0 when none, 1 when some, 2 when
/// the render cannot be read or holds nothing (a `kubectl kustomize` that failed into the pipe).
pub fn run(file: &Path) -> ExitCode {
    let objects = match read(file) {
        Ok(objects) if objects.is_empty() => {
            eprintln!("error: the render holds no object: did kustomize fail? (render-check reads its output)");
            return ExitCode::from(2);
        }
        Ok(objects) => objects,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let found = problems(&objects);
    for problem in &found {
        println!("problem: {problem}");
    }
    if found.is_empty() {
        println!("ok: {} objects, no problem found", objects.len());
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn read(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading standard input")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).context("parsing the render as YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Every problem found in `objects`, one sentence each.
pub fn problems(objects: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    ca_sources(objects, &mut found);
    enforcement(objects, &mut found);
    images(objects, &mut found);
    producer_components(objects, &mut found);
    found
}

fn of_kind<'a>(objects: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
    objects.iter().filter(move |o| o["kind"] == kind)
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// What runs Pods: Deployments, and the producer's StatefulSet (components/producer-sharded).
const WORKLOADS: [&str; 2] = ["Deployment", "StatefulSet"];

/// The workload named `name`, whichever of [`WORKLOADS`] it is.
fn workload<'a>(objects: &'a [Value], name: &str) -> Option<&'a Value> {
    WORKLOADS.iter().find_map(|kind| named(objects, kind, name))
}

/// Does the Deployment run the producer with `--prune` (or `EDGEGATE_PRUNE=true`)?
fn prunes(deployment: &Value) -> bool {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let flag = container["args"].as_array().into_iter().flatten().any(|a| a == "--prune" || a == "--prune=true");
    flag || setting(deployment, "EDGEGATE_PRUNE", "--prune") == Some("true")
}

/// The first container's env value `key`, or the value of `--flag=` among its args.
fn setting<'a>(deployment: &'a Value, key: &str, flag: &str) -> Option<&'a str> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let from_env = container["env"].as_array().into_iter().flatten().find(|e| e["name"] == key);
    let from_args = container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(flag).and_then(|rest| rest.strip_prefix('=')));
    from_args.or_else(|| from_env.and_then(|e| e["value"].as_str()))
}

/// Every edgegate webhook configuration has a CA source: cert-manager's injection, a caBundle of
/// its own, or the webhook keeping it (`--ca-bundle-for`, components/ca-keeper, a Karmada hub).
fn ca_sources(objects: &[Value], found: &mut Vec<String>) {
    let keeper = named(objects, "Deployment", "edgegate-webhook")
        .and_then(|d| setting(d, "EDGEGATE_CA_BUNDLE_FOR", "--ca-bundle-for"))
        .map(str::to_owned);
    // The keeper's own Role in a render without the Deployment: a Karmada hub's half.
    let keeper_elsewhere = named(objects, "Deployment", "edgegate-webhook").is_none()
        && of_kind(objects, "ClusterRole").any(|r| {
            r["rules"].as_array().into_iter().flatten().any(|rule| {
                rule["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r.as_str().is_some_and(|r| r.ends_with("webhookconfigurations")))
                    && rule["verbs"].as_array().into_iter().flatten().any(|v| v == "patch")
            })
        });
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        for config in of_kind(objects, kind) {
            let name = config["metadata"]["name"].as_str().unwrap_or_default();
            let injected = config["metadata"]["annotations"][INJECT].is_string();
            let bundled = config["webhooks"].as_array().is_some_and(|w| {
                !w.is_empty() && w.iter().all(|w| w["clientConfig"]["caBundle"].as_str().is_some_and(|b| !b.is_empty()))
            });
            let kept = keeper.as_deref() == Some(name) || keeper_elsewhere;
            if !(injected || bundled || kept) {
                found.push(format!(
                    "{kind} {name} has no CA source (no {INJECT} annotation, no caBundle, no --ca-bundle-for {name}): \
                     the API server cannot trust the webhook and, failing closed, refuses what it matches. \
                     List the component that adds it (components/trim) before the certificate source \
                     (components/cert-manager, components/dev-certs, components/ca-keeper)"
                ));
            }
        }
    }
}

/// Once the pruner deletes (components/enforce), whatever judges copies refuses them too.
fn enforcement(objects: &[Value], found: &mut Vec<String>) {
    // What deletes copies: the pruner, or the producer with --prune (components/producer).
    let deleters: Vec<(&str, &Value)> = [
        named(objects, "Deployment", "edgegate-pruner").map(|d| ("the pruner", d)),
        workload(objects, "edgegate-producer").filter(|d| prunes(d)).map(|d| ("the producer", d)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let deleting = |d: &Value| setting(d, "EDGEGATE_DRY_RUN", "--dry-run") == Some("false");
    if let Some(webhook) = named(objects, "Deployment", "edgegate-webhook")
        && setting(webhook, "EDGEGATE_MODE", "--mode") == Some("deny")
    {
        for (what, deployment) in deleters.iter().filter(|(_, d)| !deleting(d)) {
            let (kind, name) = (
                deployment["kind"].as_str().unwrap_or_default(),
                deployment["metadata"]["name"].as_str().unwrap_or_default(),
            );
            found.push(format!(
                "the webhook refuses but {what} ({kind} {name}) only dry-runs: list components/producer before components/enforce"
            ));
        }
    }
    let Some((what, _)) = deleters.iter().find(|(_, d)| deleting(d)) else {
        return; // only watching: nothing to be consistent with
    };
    let fix = "list components/policy and components/trim before components/enforce";
    if let Some(binding) = named(objects, "ValidatingAdmissionPolicyBinding", "edgegate") {
        let actions = &binding["spec"]["validationActions"];
        if !actions.as_array().is_some_and(|a| a.iter().any(|v| v == "Deny")) {
            found.push(format!(
                "{what} deletes but ValidatingAdmissionPolicyBinding edgegate only {actions}: unserved copies are still admitted; {fix}"
            ));
        }
    }
    for (kind, policy) in [
        ("ValidatingAdmissionPolicy", "/spec/failurePolicy"),
        ("ValidatingWebhookConfiguration", "/webhooks/0/failurePolicy"),
        ("MutatingWebhookConfiguration", "/webhooks/0/failurePolicy"),
    ] {
        if let Some(object) = named(objects, kind, "edgegate")
            && object.pointer(policy).and_then(Value::as_str) != Some("Fail")
        {
            found.push(format!(
                "{what} deletes but {kind} edgegate is not failurePolicy Fail: an unreachable judge admits unserved copies; {fix}"
            ));
        }
    }
    if let Some(webhook) = named(objects, "Deployment", "edgegate-webhook")
        && named(objects, "ValidatingWebhookConfiguration", "edgegate").is_some()
        && setting(webhook, "EDGEGATE_MODE", "--mode").is_some_and(|m| m != "deny")
    {
        found.push(format!("{what} deletes but the webhook only warns (EDGEGATE_MODE); {fix}"));
    }
}

/// components/producer-milo and components/producer-sharded annotate namespace edgegate-system
/// (by whatever name it ends with) `edgegate.datumapis.com/<component>: listed`, which they find
/// whatever their order: the render asked for them.
const LISTED: &str = "listed";

/// A producer component listed before components/producer patches nothing (kustomize says
/// nothing of a patch that matches no object): Milo's producer would wait for a Secret of
/// kubeconfigs, a sharing one run as one Deployment.
fn producer_components(objects: &[Value], found: &mut Vec<String>) {
    let producer = workload(objects, "edgegate-producer");
    let milo = producer.is_some_and(|p| setting(p, "EDGEGATE_MILO_KUBECONFIG", "--milo-kubeconfig").is_some());
    let sharded = producer.is_some_and(|p| p["kind"] == "StatefulSet");
    for (component, applied) in [("producer-milo", milo), ("producer-sharded", sharded)] {
        // Whatever the namespace is called by then (a kustomization's `namespace:` renames it).
        let mark = format!("edgegate.datumapis.com/{component}");
        let listed = of_kind(objects, "Namespace").any(|ns| ns["metadata"]["annotations"][&mark] == LISTED);
        if listed && !applied {
            found.push(format!(
                "components/{component} is listed but changed no producer: list it after components/producer \
                 (components/producer, components/producer-milo, components/producer-sharded)"
            ));
        }
    }
}

/// Every edgegate workload names a pullable image: components/images rewrites `edgegate` for what
/// was rendered before it.
fn images(objects: &[Value], found: &mut Vec<String>) {
    for workload in WORKLOADS.iter().flat_map(|kind| of_kind(objects, kind)) {
        let (kind, name) =
            (workload["kind"].as_str().unwrap_or_default(), workload["metadata"]["name"].as_str().unwrap_or_default());
        for container in workload["spec"]["template"]["spec"]["containers"].as_array().into_iter().flatten() {
            let image = container["image"].as_str().unwrap_or_default();
            if image == "edgegate" || image.starts_with("edgegate:") || image.starts_with("edgegate@") {
                found.push(format!(
                    "{kind} {name} runs image {image:?}, which no registry serves: list components/images last"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(name: &str, image: &str, env: Value) -> Value {
        json!({"kind": "Deployment", "metadata": {"name": name},
               "spec": {"template": {"spec": {"containers": [{"image": image, "env": env, "args": []}]}}}})
    }

    #[test]
    fn each_wrong_order_is_named() {
        let injected = json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "edgegate", "annotations": {INJECT: "x/y"}},
                               "webhooks": [{"failurePolicy": "Fail", "clientConfig": {}}]});
        let bare = json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "edgegate"},
                           "webhooks": [{"failurePolicy": "Fail", "clientConfig": {}}]});
        let pruner = deployment(
            "edgegate-pruner",
            "ghcr.io/x/edgegate:v1",
            json!([{"name": "EDGEGATE_DRY_RUN", "value": "false"}]),
        );
        let ok = vec![injected.clone(), pruner.clone()];
        assert_eq!(problems(&ok), Vec::<String>::new());
        let trim_late = vec![injected.clone(), bare, pruner.clone()];
        let found = problems(&trim_late);
        assert!(
            found.len() == 1 && found[0].contains("MutatingWebhookConfiguration edgegate has no CA source"),
            "{found:?}"
        );
        // What deletes, named as what deletes (not the field checked).
        let ignoring = json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "edgegate", "annotations": {INJECT: "x/y"}},
                               "webhooks": [{"failurePolicy": "Ignore", "clientConfig": {}}]});
        let found = problems(&[ignoring, pruner.clone()]);
        assert!(
            found.len() == 1
                && found[0].starts_with(
                    "the pruner deletes but ValidatingWebhookConfiguration edgegate is not failurePolicy Fail"
                ),
            "{found:?}"
        );
        let binding = json!({"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "edgegate"},
                              "spec": {"validationActions": ["Warn", "Audit"]}});
        let found = problems(&[injected.clone(), pruner.clone(), binding]);
        assert!(found.len() == 1 && found[0].contains("before components/enforce"), "{found:?}");
        let unpulled = deployment("edgegate-producer", "edgegate", json!([]));
        let found = problems(&[injected, pruner, unpulled]);
        assert!(found.len() == 1 && found[0].contains("components/images last"), "{found:?}");
    }

    /// components/producer-sharded makes the producer a StatefulSet: checked as its Deployment was.
    #[test]
    fn the_producers_statefulset_is_checked_as_its_deployment() {
        let webhook = deployment(
            "edgegate-webhook",
            "ghcr.io/x/edgegate:v1",
            json!([{"name": "EDGEGATE_MODE", "value": "deny"}]),
        );
        let mut producer =
            deployment("edgegate-producer", "edgegate", json!([{"name": "EDGEGATE_DRY_RUN", "value": "true"}]));
        producer["kind"] = json!("StatefulSet");
        producer["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--prune"]);
        let found = problems(&[webhook, producer]);
        assert!(found.len() == 2, "{found:?}");
        assert!(found[0].contains("the producer (StatefulSet edgegate-producer) only dry-runs"), "{found:?}");
        assert!(found[1].contains("StatefulSet edgegate-producer runs image \"edgegate\""), "{found:?}");
    }

    /// A producer component the render asked for (its mark on the namespace) that changed no
    /// producer was listed before components/producer.
    #[test]
    fn a_producer_component_listed_too_early_is_named() {
        let marked = |components: &[&str]| {
            let annotations: serde_json::Map<String, Value> =
                components.iter().map(|c| (format!("edgegate.datumapis.com/{c}"), json!("listed"))).collect();
            json!({"kind": "Namespace", "metadata": {"name": "edgegate-system", "annotations": annotations}})
        };
        let mut plain = deployment("edgegate-producer", "ghcr.io/x/edgegate:v1", json!([]));
        plain["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--projects-dir=/etc/edgegate/projects"]);
        let found = problems(&[marked(&["producer-milo", "producer-sharded"]), plain.clone()]);
        assert!(found.len() == 2, "{found:?}");
        assert!(found[0].starts_with("components/producer-milo is listed but changed no producer"), "{found:?}");
        assert!(found[1].starts_with("components/producer-sharded is listed but changed no producer"), "{found:?}");
        let mut both = plain;
        both["kind"] = json!("StatefulSet");
        both["spec"]["template"]["spec"]["containers"][0]["args"] =
            json!(["--milo-kubeconfig=/etc/edgegate/milo/kubeconfig"]);
        assert_eq!(problems(&[marked(&["producer-milo", "producer-sharded"]), both]), Vec::<String>::new());
    }

    #[test]
    fn a_watching_install_and_a_kept_bundle_pass() {
        let pruner = deployment(
            "edgegate-pruner",
            "ghcr.io/x/edgegate:v1",
            json!([{"name": "EDGEGATE_DRY_RUN", "value": "true"}]),
        );
        let webhook = deployment(
            "edgegate-webhook",
            "ghcr.io/x/edgegate:v1",
            json!([{"name": "EDGEGATE_CA_BUNDLE_FOR", "value": "edgegate"}]),
        );
        let bare = json!({"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "edgegate"},
                           "webhooks": [{"failurePolicy": "Ignore", "clientConfig": {}}]});
        assert_eq!(problems(&[pruner, webhook, bare]), Vec::<String>::new());
    }
}
