//! A release, as scripts/release.sh makes it, and the smoke test docs/deploy.md gives operators.
//!
//! The release is packaged from the debug binaries this test run already built (`--bin-dir`), with
//! the same script and so the same packaging code as a real release; building release binaries
//! here would add their own build (5 min 12 s on a 2-core machine) to CI's budget; packaging the
//! stripped debug binaries takes about 30 s. `--skip-min-version`: the dry-run on
//! Kubernetes 1.30 needs its own kube-apiserver build (about 15 minutes cold) and is not in CI;
//! here each manifest is dry-run on the test API server (1.36) instead.

use std::process::{Command, Output};

use edgegate_system_tests::helpers::*;

const BINARIES: [&str; 4] = ["edgegate", "edgegate-webhook", "edgegate-pruner", "edgegate-producer"];
const IMAGE: &str = "ghcr.io/datum-cloud/edgegate";
const HOOK: &str = "copies.edgegate.networking.datumapis.com";

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_packages_what_it_pins_and_installs() {
    let version = env!("CARGO_PKG_VERSION");
    let tmp = tempfile::tempdir().expect("tempdir");
    // The test profile's binaries without their debug info (objcopy --strip-debug: a fifth of
    // the size, so a fifth of the compression), as a release's carry none; copied now, so cargo
    // relinking them meanwhile cannot change what is packaged.
    let bins = tmp.path().join("bin");
    std::fs::create_dir(&bins).expect("mkdir");
    for b in BINARIES {
        let stripped = run_bounded(Command::new("objcopy").arg("--strip-debug").arg(binary(b)).arg(bins.join(b)), 120);
        assert!(stripped.status.success(), "objcopy --strip-debug {b}: {}", text(&stripped));
    }
    let dist = tmp.path().join("dist");
    let started = Instant::now();
    let out = run_bounded(
        Command::new(repo().join("scripts/release.sh"))
            .arg(version)
            .arg("--bin-dir")
            .arg(&bins)
            .arg("--test-build")
            .arg("--out")
            .arg(&dist)
            .arg("--skip-min-version")
            // arm64 (a cross build), SBOMs and signatures need tools CI does not build (cosign,
            // cargo-cyclonedx, Debian's Rust): scripts/release.sh checks them in a release.
            .args(["--platforms", "amd64", "--skip-sbom", "--skip-sign"]),
        // Cold: the image builder and crane are compiled and the packages fetched first.
        1500,
    );
    let said = text(&out);
    assert!(out.status.success(), "release.sh failed:\n{said}");
    eprintln!("scripts/release.sh {version} (debug binaries) in {:?}:\n{said}", started.elapsed());

    // Every file the docs name, and the checksums hold for all of them.
    // Every install path docs/deploy.md names, and whether it enforces (release.sh's list).
    let paths = [
        ("observe", false),
        ("enforce", true),
        ("producer", true),
        ("producer-milo", true),
        ("producer-milo-sharded", true),
        ("monitoring", true),
        ("producer-milo-monitoring", true),
        ("karmada-hub-observe", false),
        ("karmada-hub-enforce", true),
        ("karmada-host-observe", false),
        ("karmada-host-enforce", true),
        ("karmada-hub-producer", true),
        ("karmada-host-producer", true),
        ("milo-grant", false),
        ("project-grant", false),
    ];
    let mut expected: Vec<String> = paths.iter().map(|(p, _)| format!("edgegate-{p}-{version}.yaml")).collect();
    expected.extend(BINARIES.iter().map(|b| format!("{b}-{version}-linux-amd64.tar.gz")));
    expected.extend([format!("edgegate-image-{version}.oci.tar"), format!("edgegate-{version}-release.txt")]);
    let sums = std::fs::read_to_string(dist.join(format!("edgegate-{version}-SHA256SUMS"))).expect("SHA256SUMS");
    for file in &expected {
        assert!(dist.join(file).is_file(), "{file} missing from {}", dist.display());
        assert!(sums.lines().any(|l| l.ends_with(&format!("  {file}"))), "{file} not in SHA256SUMS:\n{sums}");
    }
    let check = run_bounded(
        Command::new("sha256sum").arg("-c").arg(format!("edgegate-{version}-SHA256SUMS")).current_dir(&dist),
        120,
    );
    assert!(check.status.success(), "sha256sum -c:\n{}", text(&check));

    // Every manifest's Deployments run the image by the digest of the layout's index (index.json,
    // what `crane push --index` pushes), which lists the one platform asked for.
    let layout = tmp.path().join("layout");
    std::fs::create_dir(&layout).expect("mkdir");
    let untar = run_bounded(
        Command::new("tar")
            .arg("-xf")
            .arg(dist.join(format!("edgegate-image-{version}.oci.tar")))
            .arg("-C")
            .arg(&layout),
        120,
    );
    assert!(untar.status.success(), "untar the layout: {}", text(&untar));
    let summed = run_bounded(Command::new("sha256sum").arg(layout.join("index.json")), 30);
    let digest =
        format!("sha256:{}", String::from_utf8_lossy(&summed.stdout).split_whitespace().next().unwrap_or_default());
    assert!(digest.len() == 71, "sha256sum index.json: {}", text(&summed));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json"))
            .expect("index.json is JSON");
    let platforms: Vec<String> = index["manifests"]
        .as_array()
        .expect("the index lists manifests")
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or("?"),
                m["platform"]["architecture"].as_str().unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(platforms, ["linux/amd64"], "the index's platforms");
    let pinned = format!("{IMAGE}@{digest}");
    let notes = std::fs::read_to_string(dist.join(format!("edgegate-{version}-release.txt"))).expect("release notes");
    assert!(notes.contains(&pinned), "the release notes name {pinned}:\n{notes}");
    for (path, enforcing) in paths {
        let manifest = std::fs::read_to_string(dist.join(format!("edgegate-{path}-{version}.yaml"))).expect("manifest");
        let images: Vec<&str> = manifest.lines().filter_map(|l| l.trim().strip_prefix("image: ")).collect();
        let workloads = manifest.lines().filter(|l| *l == "kind: Deployment" || *l == "kind: StatefulSet").count();
        assert_eq!(images.len(), workloads, "{path}: one image per workload");
        assert!(images.iter().all(|i| *i == pinned), "{path}: {images:?}, not {pinned}");
        // Each step is what its name says: the webhook configuration fails closed and the
        // webhook refuses only where the path enforces.
        let (policy, mode) = if enforcing { ("Fail", "deny") } else { ("Ignore", "warn") };
        let webhook_configurations = manifest.matches("kind: ValidatingWebhookConfiguration").count();
        assert_eq!(manifest.matches(&format!("failurePolicy: {policy}")).count(), webhook_configurations, "{path}");
        let modes: Vec<&str> = manifest
            .split("- name: EDGEGATE_MODE\n")
            .skip(1)
            .filter_map(|rest| rest.lines().next()?.trim().strip_prefix("value: "))
            .collect();
        // Only the webhook's container says its mode, and every path with workloads runs one.
        assert!(modes.iter().all(|m| *m == mode) && modes.len() == usize::from(workloads > 0), "{path}: {modes:?}");
        eprintln!("{path}: {workloads} workloads on {pinned}");
    }

    // Each binary's glibc floor, stated in the notes, is what objdump reads from its binary.
    for b in BINARIES {
        let dynamic = run_bounded(Command::new("objdump").arg("-T").arg(bins.join(b)), 120);
        let floor = String::from_utf8_lossy(&dynamic.stdout)
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .filter_map(|w| w.strip_prefix("GLIBC_"))
            .filter_map(|v| v.split('.').map(|n| n.parse::<u32>().ok()).collect::<Option<Vec<u32>>>())
            .max()
            .expect("GLIBC_ versions");
        let floor = floor.iter().map(u32::to_string).collect::<Vec<_>>().join(".");
        let line = format!("{b}-{version}-linux-amd64.tar.gz: glibc >= {floor} ");
        assert!(notes.contains(&line), "the notes state {line:?}:\n{notes}");
    }

    // Each manifest, server-side dry-run on the test API server (cert-manager's kinds as
    // stand-ins; the namespace exists, as after the manifest's own Namespace was applied).
    let cp = shared();
    let client = cp.client().await;
    cert_manager_stand_ins(cp).await;
    // components/monitoring's kinds, as stand-ins too.
    for (kind, plural) in [("PodMonitor", "podmonitors"), ("PrometheusRule", "prometheusrules")] {
        stand_in_crd(&client, "monitoring.coreos.com", kind, plural).await;
    }
    namespace(&client, "edgegate-system", &[]).await;
    let kubectl = |args: &[&str]| {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&cp.kubeconfig).args(args);
        cmd
    };
    for (path, _) in paths {
        let file = dist.join(format!("edgegate-{path}-{version}.yaml"));
        let file = file.to_str().expect("utf-8 path");
        let started = Instant::now();
        let applied = run_bounded(&mut kubectl(&["apply", "--server-side", "--dry-run=server", "-f", file]), 120);
        assert!(applied.status.success(), "{path}: server-side dry-run:\n{}", text(&applied));
        let objects = String::from_utf8_lossy(&applied.stdout).lines().count();
        eprintln!("{path}: {objects} objects accepted (server-side dry-run) in {:?}", started.elapsed());
    }

    // The CLI from its archive, with nothing of this environment (env -i): edgegate audit
    // against the test API server.
    install_crd(&client).await;
    let unpacked = tmp.path().join("cli");
    std::fs::create_dir(&unpacked).expect("mkdir");
    let untar = run_bounded(
        Command::new("tar")
            .arg("-xzf")
            .arg(dist.join(format!("edgegate-{version}-linux-amd64.tar.gz")))
            .arg("-C")
            .arg(&unpacked),
        120,
    );
    assert!(untar.status.success(), "{}", text(&untar));
    assert!(unpacked.join("LICENSE").is_file(), "the archive carries LICENSE");
    // The operator's command, with the operator's (admin) kubeconfig.
    let audit = run_bounded(
        Command::new("env")
            .arg("-i")
            .arg(unpacked.join("edgegate"))
            .arg("audit")
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig),
        120,
    );
    let said = text(&audit);
    assert!(audit.status.success(), "edgegate audit from the archive, under env -i:\n{said}");
    eprintln!("edgegate audit from the archive under env -i:\n{said}");
    let version_said = run_bounded(Command::new("env").arg("-i").arg(unpacked.join("edgegate")).arg("--version"), 30);
    assert!(String::from_utf8_lossy(&version_said.stdout).contains(version), "{}", text(&version_said));
}

/// docs/deploy.md's smoke test, as written there, with NAMESPACE replaced: its ```sh block that
/// creates a copy with a server-side dry-run. Returns kubectl's output (stdout, then stderr) and
/// whether it succeeded.
fn smoke(cp: &ControlPlane, namespace: &str) -> (bool, String) {
    let docs = std::fs::read_to_string(repo().join("docs/deploy.md")).expect("docs/deploy.md");
    let command = docs
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(b, _)| b))
        .find(|b| b.contains("create --dry-run=server"))
        .expect("docs/deploy.md gives the smoke test as a sh block")
        .replace("NAMESPACE", namespace);
    let out = run_bounded(Command::new("sh").arg("-c").arg(&command).env("KUBECONFIG", &cp.kubeconfig), 60);
    (out.status.success(), text(&out))
}

/// A webhook judging the test API server's records, in `mode` (`deny` or `warn`). With the admin
/// kubeconfig and flags of the test's: what is tested is the smoke command's answer in each state
/// of the webhook, not the webhook's install (every other suite runs it as installed).
fn webhook(cp: &ControlPlane, mode: &str) -> Process {
    let certs = dev_certs();
    let port = free_port();
    let log = cp.dir.join(format!("smoke-webhook-{port}.log"));
    let args = [
        "--kubernetes".to_owned(),
        format!("--kubeconfig={}", cp.kubeconfig.display()),
        format!("--listen=127.0.0.1:{port}"),
        format!("--tls-cert={}", certs.join("tls.crt").display()),
        format!("--tls-key={}", certs.join("tls.key").display()),
        format!("--mode={mode}"),
        "--shutdown-grace=1s".to_owned(),
    ];
    let child = spawn_guarded(&binary("edgegate-webhook"), &args, &log);
    Process { child, port, log }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_smoke_test_tells_a_working_path_from_a_broken_one() {
    let cp = shared();
    let client = cp.client().await;
    install_crd(&client).await;
    let refusal = |ns: &str| {
        format!(
            "EndpointSlice {ns}/edgegate-smoke-test is not carried: EdgeReachability in {ns} names none of its addresses (fd00:ed9e::1)"
        )
    };
    for (scope, mode, policy) in [("smoke-enforcing", "deny", "Fail"), ("smoke-watching", "warn", "Ignore")] {
        namespace(&client, scope, &[("edgegate-e2e", scope)]).await;
        set_record(&client, scope, &["fd00:10::1"]).await;
        let served = webhook(cp, mode);
        until_ready(scope, &served, Some(&dev_certs().join("ca.crt"))).await;
        register_webhook_at(&client, scope, &format!("https://127.0.0.1:{}/validate", served.port), policy, 5).await;

        // The whole path works: edgegate's own answer comes back. (The API server's webhook
        // cache and the webhook's record watch follow within moments.)
        let mut answer = (false, String::new());
        let took =
            eventually(Duration::from_secs(20), &format!("{scope}: edgegate answers the smoke test"), async || {
                answer = smoke(cp, scope);
                answer.1.contains(&refusal(scope))
            })
            .await;
        let (passed, said) = &answer;
        eprintln!("{scope}, webhook serving ({took:?}):\n{said}");
        if mode == "deny" {
            assert!(!passed, "{said}");
            assert!(
                said.contains(&format!("admission webhook \"{HOOK}\" denied the request: {}", refusal(scope))),
                "{said}"
            );
        } else {
            assert!(passed, "{said}");
            assert!(said.contains(&format!("Warning: {}", refusal(scope))), "{said}");
            assert!(said.contains("endpointslice.discovery.k8s.io/edgegate-smoke-test"), "{said}");
        }

        // Broken: nothing serves at the webhook's address.
        drop(served);
        let (passed, said) = smoke(cp, scope);
        eprintln!("{scope}, no webhook serving:\n{said}");
        if mode == "deny" {
            assert!(!passed && said.contains(&format!("failed calling webhook \"{HOOK}\"")), "{said}");
        } else {
            assert!(passed && !said.contains("Warning:"), "watching, failing open says nothing: {said}");
        }
    }
}

/// cert-manager's Issuer and Certificate served on `cp` by stand-in CRDs that accept any spec,
/// established: what a render with components/cert-manager needs to be applied without
/// cert-manager.
async fn cert_manager_stand_ins(cp: &ControlPlane) {
    let client = cp.client().await;
    stand_in_crd(&client, "cert-manager.io", "Issuer", "issuers").await;
    stand_in_crd(&client, "cert-manager.io", "Certificate", "certificates").await;
    let established = run_bounded(
        Command::new("kubectl").arg("--kubeconfig").arg(&cp.kubeconfig).args([
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/issuers.cert-manager.io",
            "crd/certificates.cert-manager.io",
        ]),
        90,
    );
    assert!(established.status.success(), "{}", text(&established));
}

/// docs/upgrading.md: 0.1.0's production render applied as its docs said (client-side), then
/// 0.2.0's enforce overlay with `apply --server-side`, on a control plane of this test's own (its
/// webhook configuration would catch the other tests' copies). The fields 0.2.0 dropped go (kubectl
/// moves the client-side owner's fields to the server-side apply), nothing of 0.1.0 is left that
/// the new render lacks, and the hub still enforces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_0_1_0_applied_server_side_leaves_nothing_of_it_behind() {
    let cp = ControlPlane::own();
    cert_manager_stand_ins(&cp).await;
    let kubectl = |args: &[&str]| {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&cp.kubeconfig).args(args);
        cmd
    };

    // 0.1.0, as its docs installed it: kubectl apply -k deploy/overlays/with-cert-manager (its
    // render, kept in tests/fixtures: the commit may not be in a shallow clone).
    let old_render = repo().join("tests/fixtures/v0.1.0-with-cert-manager.yaml");
    let applied = run_bounded(&mut kubectl(&["apply", "-f", old_render.to_str().expect("utf-8")]), 120);
    assert!(applied.status.success(), "0.1.0 client-side:\n{}", text(&applied));
    let before = run_bounded(&mut kubectl(&["get", "validatingwebhookconfiguration", "edgegate", "-o", "json"]), 30);
    let before: serde_json::Value = serde_json::from_slice(&before.stdout).expect("vwc json");
    eprintln!("0.1.0 matchConditions: {}", before["webhooks"][0]["matchConditions"]);

    // 0.2.0, as docs/upgrading.md says: the enforce overlay, server-side. Without
    // --force-conflicts it stops on fields 0.1.0's client-side apply owns and 0.2.0 changes.
    let new_overlay = repo().join("deploy/overlays/enforce");
    let new_overlay = new_overlay.to_str().expect("utf-8");
    let refused = run_bounded(&mut kubectl(&["apply", "--server-side", "-k", new_overlay]), 120);
    let said = text(&refused);
    eprintln!("0.2.0 server-side without --force-conflicts:\n{said}");
    assert!(!refused.status.success() && said.contains("conflicts with \"kubectl-client-side-apply\""), "{said}");
    let applied = run_bounded(&mut kubectl(&["apply", "--server-side", "--force-conflicts", "-k", new_overlay]), 120);
    assert!(applied.status.success(), "0.2.0 server-side:\n{}", text(&applied));

    let get = |kind: &str, name: &str, namespaced: bool| {
        let mut args = vec!["get", kind, name, "-o", "json"];
        if namespaced {
            args.extend(["-n", "edgegate-system"]);
        }
        let out = run_bounded(&mut kubectl(&args), 30);
        assert!(out.status.success(), "{kind} {name}: {}", text(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let vwc = get("validatingwebhookconfiguration", "edgegate", false);
    let hook = &vwc["webhooks"][0];
    let conditions: Vec<&str> = hook["matchConditions"]
        .as_array()
        .expect("matchConditions")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        conditions,
        ["carries-an-address", "adds-an-address-or-becomes-a-copy"],
        "0.1.0's not-terminating is gone"
    );
    assert_eq!(hook["failurePolicy"], "Fail", "still enforcing");
    let policy = get("networkpolicy", "edgegate", true);
    assert_eq!(
        policy["spec"]["ingress"][0]["ports"],
        json!([{"port": 8443, "protocol": "TCP"}]),
        "the metrics port is no longer open to every namespace"
    );
    let webhook = get("deployment", "edgegate-webhook", true);
    assert!(webhook["spec"]["template"]["spec"]["affinity"].is_null(), "0.1.0's anti-affinity is gone");
    let container = &webhook["spec"]["template"]["spec"]["containers"][0];
    let mode = container["env"].as_array().into_iter().flatten().find(|e| e["name"] == "EDGEGATE_MODE");
    assert_eq!(mode.map(|e| &e["value"]), Some(&json!("deny")), "the webhook refuses");
    assert_eq!(container["image"], format!("{IMAGE}:v{}", env!("CARGO_PKG_VERSION")));
    eprintln!(
        "0.1.0 (client-side) -> 0.2.0 (server-side): matchConditions {conditions:?}, failurePolicy {}, NetworkPolicy ingress {}",
        hook["failurePolicy"], policy["spec"]["ingress"]
    );
}
