//! deploy/components/monitoring, proven: the alerts pass `promtool check rules` and their unit
//! tests (tests/monitoring/alerts-test.yaml: each alert fires on its case and stays quiet on
//! another), every dashboard expression parses, and every metric the rules and the dashboard name
//! is exported by a live binary, so a renamed metric cannot silently break an alert.

use std::collections::BTreeSet;
use std::process::Command;

use edgegate_system_tests::helpers::*;

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
    let cp = shared();
    let client = cp.client().await;
    install_crd(&client).await;
    let webhook = start_webhook(cp, &cp.kubeconfig);
    // The pruner runs as a Karmada hub's does: on a ServiceAccount token that expires.
    namespace(&client, "monitoring", &[]).await;
    let token = cp.service_account_kubeconfig("monitoring", "edgegate-pruner", Some("cluster-admin"), 90 * 86400).await;
    // --exact-spelling, as components/policy sets it: an alert reads the gauges it adds.
    let pruner = start_pruner(cp, "monitoring", &token, &["--no-leader-election", "--exact-spelling"]);
    let port = free_port();
    let producer = Process {
        child: spawn_guarded(
            &binary("edgegate-producer"),
            &[
                format!("--kubeconfig={}", cp.kubeconfig.display()),
                format!("--project-kubeconfig={}", cp.kubeconfig.display()),
                format!("--listen=127.0.0.1:{port}"),
                "--no-leader-election".to_owned(),
            ],
            &cp.dir.join(format!("producer-{port}.log")),
        ),
        port,
        log: cp.dir.join(format!("producer-{port}.log")),
    };
    let ca = dev_certs().join("ca.crt");
    until_ready("webhook ready", &webhook, Some(&ca)).await;
    // One review, so the review counter has a series (its labels come from the reviews).
    let review = Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(&ca)
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", repo().join("tests/fixtures/copy-create.json").display()))
        .arg(format!("https://127.0.0.1:{}/validate", webhook.port))
        .output()
        .expect("curl");
    assert!(String::from_utf8_lossy(&review.stdout).contains("\"allowed\""), "a review is answered");
    // The spelling gauges are set once the pruner's caches are whole, not at once.
    eventually(Duration::from_secs(30), "the pruner counts spellings", async || {
        metrics(&pruner).contains("edgegate_prune_noncanonical_addresses{")
    })
    .await;
    let mut scrapes = String::new();
    for (what, url, ca) in [
        ("webhook", format!("https://127.0.0.1:{}/metrics", webhook.port), Some(&ca)),
        ("pruner", format!("http://127.0.0.1:{}/metrics", pruner.port), None),
        ("producer", format!("http://127.0.0.1:{}/metrics", producer.port), None),
    ] {
        eventually(Duration::from_secs(30), what, async || http_status(&url, ca.map(PathBuf::as_path)) == 200).await;
        let mut cmd = Command::new("curl");
        cmd.args(["-s", &url]);
        if let Some(ca) = ca {
            cmd.arg("--cacert").arg(ca);
        }
        scrapes.push_str(&String::from_utf8_lossy(&cmd.output().expect("curl").stdout));
    }
    let expiry = scrapes
        .lines()
        .find_map(|l| l.strip_prefix("edgegate_hub_token_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("the pruner exports its token's expiry");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
    let days = (expiry - now) / 86400.0;
    eprintln!("the pruner's hub token expires in {days:.2} days");
    assert!((89.0..=90.1).contains(&days), "{days} days");
    let names = names_used();
    assert!(names.len() >= 12, "{names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !exported(&scrapes, n)).collect();
    assert!(missing.is_empty(), "named by the alerts or the dashboard, exported by no binary: {missing:?}");
}
