//! deploy/components/monitoring, proven: the alerts pass `promtool check rules` and their unit
//! tests (tests/monitoring/alerts-test.yaml: each alert fires on its case and stays quiet on
//! another), every dashboard expression parses, and every metric the rules and the dashboard name
//! is exported by a live binary, so a renamed metric cannot silently break an alert; a panel that
//! reads a metric from some binaries reads it from every binary that exports it.

use std::collections::BTreeSet;
use std::process::Command;

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::pod::{Render, Rewrite, kustomization_with, run};
use edgegate_system_tests::shipped::add_project;

fn promtool() -> PathBuf {
    let out = Command::new(repo().join("tests/promtool/build.sh")).output().expect("tests/promtool/build.sh runs");
    assert!(out.status.success(), "building promtool failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn run_promtool(args: &[&str], dir: &Path) {
    let out = Command::new(promtool()).args(args).current_dir(dir).output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn monitoring(file: &str) -> String {
    std::fs::read_to_string(repo().join("deploy/components/monitoring").join(file)).expect("monitoring file")
}

/// The PrometheusRule's spec: a Prometheus rule file.
fn rule_file() -> serde_json::Value {
    let rule: serde_json::Value = serde_saphyr::from_str(&monitoring("prometheus-rule.yaml")).expect("rule parses");
    rule["spec"].clone()
}

fn dashboard_exprs() -> Vec<String> {
    let dashboard: serde_json::Value = serde_json::from_str(&monitoring("dashboard.json")).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    exprs
}

#[test]
fn alerts_pass_promtool_and_their_unit_tests() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rules.yaml"), rule_file().to_string()).expect("write rules");
    std::fs::copy(repo().join("tests/monitoring/alerts-test.yaml"), dir.path().join("alerts-test.yaml")).expect("copy");
    run_promtool(&["check", "rules", "rules.yaml"], dir.path());
    run_promtool(&["test", "rules", "alerts-test.yaml"], dir.path());
    // Every alert has a unit test, a severity, a summary and a description.
    let tests = std::fs::read_to_string(repo().join("tests/monitoring/alerts-test.yaml")).expect("tests");
    for group in rule_file()["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("alert");
            assert!(tests.contains(&format!("alertname: {name}")), "{name} has no unit test");
            assert!(rule["labels"]["severity"].is_string(), "{name} has no severity");
            for a in ["summary", "description"] {
                assert!(rule["annotations"][a].is_string(), "{name} has no {a}");
            }
        }
    }
}

#[test]
fn every_dashboard_expression_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rules: Vec<serde_json::Value> = dashboard_exprs()
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("dashboard:expr_{i}"), "expr": e.replace("$__rate_interval", "5m")}))
        .collect();
    assert!(rules.len() >= 8, "the dashboard has its panels");
    let file = json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(dir.path().join("dashboard-rules.yaml"), file.to_string()).expect("write");
    run_promtool(&["check", "rules", "dashboard-rules.yaml"], dir.path());
}

/// Each metric a dashboard expression reads, with the jobs its selector names (`job="a"`,
/// `job=~"a|b"`); none: every job.
fn dashboard_selections() -> Vec<(String, Option<Vec<String>>)> {
    let mut found = Vec::new();
    for expr in dashboard_exprs() {
        let mut rest = expr.as_str();
        while let Some(at) = rest.find("edgegate_") {
            let name: String =
                rest[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            rest = &rest[at + name.len()..];
            let selector = rest.strip_prefix('{').and_then(|r| r.split_once('}')).map_or("", |(s, _)| s);
            let jobs = selector.split(',').find_map(|m| {
                let m: String = m.chars().filter(|c| !c.is_whitespace()).collect();
                let value = m.strip_prefix("job=~").or_else(|| m.strip_prefix("job="));
                assert!(
                    value.is_some() || !m.starts_with("job"),
                    "{expr}: a job matcher this check cannot read ({m}): use job=\"a\" or job=~\"a|b\""
                );
                let value = value?.trim_matches('"').to_owned();
                assert!(
                    value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '|'),
                    "{expr}: only literal alternatives of jobs are read here"
                );
                Some(value.split('|').map(str::to_owned).collect())
            });
            found.push((name, jobs));
        }
    }
    found
}

/// Metrics a panel reads from one job on purpose, though another exports them too.
const ONE_JOBS_VIEW: &[&str] = &[];

/// Every `edgegate_*` name in the rules and the dashboard.
fn names_used() -> BTreeSet<String> {
    let text = format!("{}\n{}", monitoring("prometheus-rule.yaml"), monitoring("dashboard.json"));
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("edgegate_") {
        let name: String =
            rest[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        // Names in prose ("edgegate_record_addresses") count too: they must exist as well.
        names.insert(name);
    }
    names
}

/// Is `name` (a sample name as PromQL writes it) exported in `scrape`?
fn exported(scrape: &str, name: &str) -> bool {
    let family = ["_bucket", "_count", "_sum", "_total"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
    scrape.lines().any(|l| {
        l.starts_with(&format!("# TYPE {name} "))
            || l.starts_with(&format!("# TYPE {family} "))
            || l.starts_with(&format!("{name} "))
            || l.starts_with(&format!("{name}{{"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_alerts_and_dashboard_use_is_exported() {
    // The binaries as installed: the webhook and the pruner of overlays/dev, and the producer,
    // which prunes, with components/producer and components/policy (which sets --exact-spelling
    // on whichever prunes: an alert reads the gauges it adds), each under its own
    // ServiceAccount; the hub is its own producer's one project.
    let cp = ControlPlane::own();
    let plain = Render::of(&kustomization_with(
        "monitoring-plain",
        &["base"],
        &["components/dev-certs", "components/policy", "components/enforce", "components/images"],
        "",
    ));
    let render = Render::of(&kustomization_with(
        "monitoring",
        &["base"],
        &[
            "components/dev-certs",
            "components/producer",
            "components/policy",
            "components/enforce",
            "components/images",
        ],
        "",
    ));
    render.apply_but_admission(&cp);
    // The standalone pruner's Deployment and bindings, beside the producer's install.
    let pruner_parts = |o: &serde_json::Value| {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        name.starts_with("edgegate-pruner") && o["kind"] != "PodMonitor"
    };
    plain.apply(&cp, pruner_parts);
    add_project(&cp, "hub", &cp).await;
    let both = [Rewrite::ListenAddress, Rewrite::MountPath];
    let webhook = run(&cp, &render, "edgegate-webhook", 0, &both).await;
    let pruner = run(&cp, &plain, "edgegate-pruner", 0, &both).await;
    let producer = run(&cp, &render, "edgegate-producer", 0, &both).await;
    let ca = deploy_dev_certs().join("ca.crt");
    // One review, so the review counter has a series (its labels come from the reviews).
    let https = webhook.port("https");
    until_ready("webhook ready", &webhook.process, None).await;
    let review = Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(&ca)
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", repo().join("tests/fixtures/copy-create.json").display()))
        .arg(format!("https://localhost:{https}/validate"))
        .output()
        .expect("curl");
    assert!(String::from_utf8_lossy(&review.stdout).contains("\"allowed\""), "a review is answered");
    // The spelling gauges are set once the caches are whole, not at once.
    for (what, pod) in [("the pruner", &pruner), ("the producer", &producer)] {
        eventually(Duration::from_secs(30), &format!("{what} counts spellings"), async || {
            metrics(&pod.process).contains("edgegate_prune_noncanonical_addresses{")
        })
        .await;
    }
    // The pruner as a Karmada host runs it (overlays/karmada-hub/host): no credentials of its
    // own, the hub's through a kubeconfig of a ServiceAccount token that nothing renews (90
    // days, as docs/deploy.md makes it), mounted from the Secret the docs name; this one plane
    // plays host and hub. Its token's expiry is what an alert watches.
    let hub_kubeconfig = cp.service_account_kubeconfig("edgegate-system", "edgegate-pruner", None, 90 * 86400).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "edgegate-pruner-hub-kubeconfig", "namespace": "edgegate-system"},
        "stringData": {"kubeconfig": std::fs::read_to_string(&hub_kubeconfig).expect("kubeconfig")}});
    edgegate_system_tests::shipped::apply_objects(&cp, vec![secret]);
    let host = Render::of(&kustomization_with("monitoring-karmada-host", &["overlays/karmada-hub/host"], &[], ""));
    let karmada_pruner = run(&cp, &host, "edgegate-pruner", 0, &both).await;
    // The producer sharing its projects read from Milo (components/producer-milo and
    // components/producer-sharded): the buckets' series the ownership alert reads, discovery's,
    // and the expiry of Milo's credential, a token whose JWT says when (refused by this API
    // server, which is no Milo: only what the producer exports is looked at). Its render differs
    // from the one applied in the producer's workload and the Secret it mounts.
    let sharded = Render::of(&kustomization_with(
        "monitoring-sharded",
        &["base"],
        &[
            "components/dev-certs",
            "components/producer",
            "components/producer-milo",
            "components/producer-sharded",
            "components/enforce",
            "components/images",
        ],
        "",
    ));
    sharded.apply(&cp, |o| o["kind"] == "StatefulSet" && o["metadata"]["name"] == "edgegate-producer");
    let url_safe = |s: &str| base64(s.as_bytes()).replace('+', "-").replace('/', "_").replace('=', "");
    let jwt = format!("{}.{}.c2ln", url_safe(r#"{"alg":"RS256"}"#), url_safe(r#"{"exp":4102444800}"#));
    let milo = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: milo, cluster: {{server: '{}', certificate-authority-data: {}}}}}]\n\
         users: [{{name: producer, user: {{token: {jwt}}}}}]\n\
         contexts: [{{name: milo, context: {{cluster: milo, user: producer}}}}]\ncurrent-context: milo\n",
        cp.server,
        base64(&std::fs::read(cp.dir.join("ca.crt")).expect("CA")),
    );
    edgegate_system_tests::shipped::set_milo_kubeconfig(&cp, &milo).await;
    let sharing = run(&cp, &sharded, "edgegate-producer", 1, &both).await;
    let mut scrapes = String::new();
    for (what, pod) in [
        ("webhook", &webhook),
        ("pruner", &pruner),
        ("producer", &producer),
        ("sharing producer", &sharing),
        ("Karmada host's pruner", &karmada_pruner),
    ] {
        let url = format!("http://127.0.0.1:{}/metrics", pod.port("admin"));
        eventually(Duration::from_secs(30), what, async || http_status(&url, None) == 200).await;
        scrapes.push_str(&metrics(&pod.process));
    }
    let expiry = scrapes
        .lines()
        .find_map(|l| l.strip_prefix("edgegate_hub_token_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the pruner exports its token's expiry");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    let days = (expiry - now) / 86400.0;
    eprintln!("the Karmada host pruner's hub token expires in {days:.2} days");
    assert!((89.0..=90.1).contains(&days), "{days} days");
    assert!(
        !metrics(&pruner.process).contains("edgegate_hub_token_expiry_timestamp_seconds"),
        "in a Pod of the hub's own, the kubelet renews the token: no expiry to watch"
    );
    // What a panel reads from some jobs is exported by no other: a panel of deletions that read
    // only the pruner's missed the producer's.
    let jobs = [
        ("edgegate-webhook", &webhook),
        ("edgegate-pruner", &pruner),
        ("edgegate-producer", &producer),
        ("edgegate-producer", &sharing),
        ("edgegate-pruner", &karmada_pruner),
    ];
    for (name, selected) in dashboard_selections() {
        let Some(selected) = selected else { continue };
        for (job, pod) in &jobs {
            if !selected.iter().any(|s| s == job) && !ONE_JOBS_VIEW.contains(&name.as_str()) {
                assert!(
                    !exported(&metrics(&pod.process), &name),
                    "the dashboard reads {name} from {selected:?} only, but {job} exports it too"
                );
            }
        }
    }
    let names = names_used();
    assert!(names.len() >= 12, "{names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !exported(&scrapes, n)).collect();
    assert!(missing.is_empty(), "named by the alerts or the dashboard, exported by no binary: {missing:?}");
    cp.assert_nothing_refused();
}
