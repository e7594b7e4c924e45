//! The `edgegate` CLI: the CRD it prints is the one deploy/ ships, and `check` exits 0/1/2.

use std::path::{Path, PathBuf};
use std::process::Command;

use edgegate::core::audit::LARGE_COPY_ADDRESSES;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn edgegate(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_edgegate")).args(args).output().expect("edgegate runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn deploy_keeps_the_generated_crd() {
    let (code, printed) = edgegate(&["crd"]);
    assert_eq!(code, 0);
    let kept = std::fs::read_to_string(repo("deploy/crd/edgereachabilities.yaml")).expect("deploy/crd exists");
    assert_eq!(
        printed, kept,
        "deploy/crd/edgereachabilities.yaml is stale: run `cargo run -q --bin edgegate -- crd > deploy/crd/edgereachabilities.yaml`"
    );
}

#[test]
fn deploy_keeps_the_generated_roles() {
    let (code, printed) = edgegate(&["rbac"]);
    assert_eq!(code, 0);
    let kept = std::fs::read_to_string(repo("deploy/base/rbac/roles.yaml")).expect("roles");
    assert_eq!(
        printed, kept,
        "deploy/base/rbac/roles.yaml is stale: run `cargo run -q --bin edgegate -- rbac > deploy/base/rbac/roles.yaml`"
    );
}

#[test]
fn deploy_keeps_the_generated_ca_bundle_role() {
    let (code, printed) = edgegate(&["rbac", "--ca-bundle"]);
    assert_eq!(code, 0);
    let kept = std::fs::read_to_string(repo("deploy/base/ca-bundle/role.yaml")).expect("role");
    assert_eq!(
        printed, kept,
        "deploy/base/ca-bundle/role.yaml is stale: run `cargo run -q --bin edgegate -- rbac --ca-bundle > deploy/base/ca-bundle/role.yaml`"
    );
}

#[test]
fn check_exits_by_decision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let slice = repo("examples/copy-endpointslice.yaml");
    let slice = slice.to_str().unwrap_or_default();
    let served = repo("examples/records/edgereachability.yaml");

    let (code, out) = edgegate(&["check", "--record", served.to_str().unwrap_or_default(), "--slice", slice]);
    assert_eq!((code, out.trim()), (0, "allow: the record names fd20:0:2::1:0:0"));

    let empty = dir.path().join("empty.yaml");
    let text = std::fs::read_to_string(&served)
        .expect("record")
        .replace("- fd20:0:2::1:0:0", "")
        .replace("- fd20:0:2::1:0:1", "");
    std::fs::write(&empty, text.replace("addresses:", "addresses: []")).expect("write");
    let (code, out) = edgegate(&["check", "--record", empty.to_str().unwrap_or_default(), "--slice", slice]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with(
            "deny: EndpointSlice ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10/vpc-lab-1-web-6d5f9c7b8d-x2k4q is not carried"
        ),
        "{out}"
    );

    let (code, out) = edgegate(&["check", "--slice", slice]);
    assert_eq!(code, 0, "no record: {out}");

    let (code, out) = edgegate(&["check", "--record", "/nonexistent.yaml", "--slice", slice]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("/nonexistent.yaml"), "{out}");
}

#[test]
fn check_old_judges_an_update() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let copy = std::fs::read_to_string(repo("examples/copy-endpointslice.yaml")).expect("copy");
    let record = "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\nmetadata: {name: default, namespace: ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10}\nspec: {addresses: []}\n";
    std::fs::write(path("record.yaml"), record).expect("write");
    std::fs::write(path("old.yaml"), &copy).expect("write");
    let leaving = copy.replacen("metadata:\n", "metadata:\n  deletionTimestamp: \"2026-12-03T09:00:00Z\"\n", 1);
    std::fs::write(path("leaving.yaml"), leaving).expect("write");
    let grown = copy.replacen(r#"["fd20:0:2::1:0:0"]"#, r#"["fd20:0:2::1:0:0", "fd20:0:2::1:0:9"]"#, 1);
    assert_ne!(grown, copy, "the example copy lists fd20:0:2::1:0:0");
    std::fs::write(path("grown.yaml"), grown).expect("write");

    let check =
        |old: &str, new: &str| edgegate(&["check", "--record", &path("record.yaml"), "--old", old, "--slice", new]);
    let (code, out) = check(&path("old.yaml"), &path("leaving.yaml"));
    assert_eq!((code, out.trim()), (0, "allow: an UPDATE of a copy that adds no address it did not carry"));
    let (code, out) = check(&path("old.yaml"), &path("old.yaml"));
    assert_eq!((code, out.trim()), (0, "allow: an UPDATE of a copy that adds no address it did not carry"));
    let (code, out) = check(&path("old.yaml"), &path("grown.yaml"));
    assert_eq!(code, 1, "an UPDATE adding an unnamed address is refused: {out}");
    let (code, out) = check("/nonexistent-old.yaml", &path("old.yaml"));
    assert_eq!(code, 2, "{out}");
}

#[test]
fn deploy_keeps_the_generated_producer_roles() {
    for (flag, file) in [
        ("--producer", "deploy/components/producer/rbac/roles.yaml"),
        ("--milo", "deploy/milo/roles.yaml"),
        ("--project", "deploy/project/roles.yaml"),
        ("--milo-iam", "deploy/milo-iam/role.yaml"),
    ] {
        let (code, printed) = edgegate(&["rbac", flag]);
        assert_eq!(code, 0);
        let kept = std::fs::read_to_string(repo(file)).expect("roles");
        assert_eq!(printed, kept, "{file} is stale: run `cargo run -q --bin edgegate -- rbac {flag} > {file}`");
    }
    let (code, _) = edgegate(&["rbac", "--producer", "--milo"]);
    assert_eq!(code, 2, "one side at a time");
}

/// On a Karmada hub (offline here, from `--policies`), a policy other than the fleet-wide one that
/// takes copies is named and fails the audit: it would send them only where it places them.
#[test]
fn audit_names_a_policy_that_takes_copies_from_the_fleet_wide_one() {
    let path = |p: &str| repo(p).to_string_lossy().into_owned();
    let (records, copy) = (path("examples/records/edgereachability.yaml"), path("examples/copy-endpointslice.yaml"));
    let fleet = "--fleet-policy=ClusterPropagationPolicy/vpc-endpointslice-copies";
    let audit = |policies: &str, extra: &[&str]| {
        let mut args = vec!["audit", "--records", &records, "--slices", &copy, "--policies", policies];
        args.extend(extra);
        edgegate(&args)
    };
    let (code, out) = audit(&path("examples/karmada/fleet-wide-policy.yaml"), &[fleet]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("  ClusterPropagationPolicy/vpc-endpointslice-copies: selects 1, holds 0, would take 1 copies, in 1 namespaces\n"),
        "{out}"
    );

    let (code, out) = audit(&path("examples/karmada"), &[fleet]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "  problem: PropagationPolicy/ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10/by-location holds 0 and would take 1 copies instead of ClusterPropagationPolicy/vpc-endpointslice-copies"
        ),
        "{out}"
    );
    // Without --fleet-policy two policies selecting copies are the problem; in JSON the findings
    // are listed.
    let (code, out) = audit(&path("examples/karmada"), &["--output=json"]);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let findings = report["propagation"]["findings"].as_array().expect("findings");
    assert!(findings.len() == 1 && findings[0].as_str().is_some_and(|f| f.contains("--fleet-policy")), "{out}");
    // A bad reference or policy is an error, nothing printed.
    let (code, out) = audit(&path("examples/karmada"), &["--fleet-policy=vpc-endpointslice-copies"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("ClusterPropagationPolicy/NAME or PropagationPolicy/NAMESPACE/NAME"), "{out}");
    let (code, out) = audit(&copy, &[fleet]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("not a PropagationPolicy or ClusterPropagationPolicy"), "{out}");
}

#[test]
fn audit_offline_exits_by_what_would_be_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let served = repo("examples/records/edgereachability.yaml").to_string_lossy().into_owned();
    let copy = repo("examples/copy-endpointslice.yaml").to_string_lossy().into_owned();
    let (code, out) = edgegate(&["audit", "--records", &served, "--slices", &copy]);
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("the webhook would refuse 0, the pruner would delete 0\n"), "{out}");

    // `kubectl get -o yaml` lists: an empty record, and the copy inside a List.
    let ns = "ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10";
    let record = format!(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.datumapis.com/v1alpha\n  kind: EdgeReachability\n  metadata: {{name: default, namespace: {ns}}}\n  spec: {{addresses: []}}\n"
    );
    std::fs::write(path("records.yaml"), record).expect("write");
    std::fs::create_dir(path("slices")).expect("dir");
    let listed = std::fs::read_to_string(&copy).expect("copy").replace('\n', "\n  ");
    std::fs::write(path("slices/list.yaml"), format!("apiVersion: v1\nkind: List\nitems:\n- {listed}")).expect("write");
    let (code, out) = edgegate(&["audit", "--records", &path("records.yaml"), "--slices", &path("slices")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("{ns}: record empty; 1 copies, 0 without endpoints\n")), "{out}");
    assert!(out.contains("  would delete vpc-lab-1-web-6d5f9c7b8d-x2k4q (fd20:0:2::1:0:0)\n"), "{out}");

    let (code, out) =
        edgegate(&["audit", "--records", &path("records.yaml"), "--slices", &path("slices"), "--output", "json"]);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        report["summary"],
        serde_json::json!({
            "namespaces": 1, "records": 1, "copies": 1, "wouldRefuse": 1, "wouldDelete": 1,
            "noncanonicalRecordEntries": 0, "noncanonicalCopyAddresses": 0, "largeCopies": 0, "vapModeSafe": true
        })
    );
    let entry = &report["namespaces"][0];
    assert_eq!(entry["namespace"], ns);
    assert_eq!(entry["record"], serde_json::json!({"state": "empty", "addresses": 0, "invalid": 0}));
    assert_eq!((entry["copies"].as_u64(), entry["copiesWithoutEndpoints"].as_u64()), (Some(1), Some(0)));
    assert_eq!(
        entry["wouldDelete"],
        serde_json::json!([{"name": "vpc-lab-1-web-6d5f9c7b8d-x2k4q", "addresses": ["fd20:0:2::1:0:0"]}])
    );

    // Errors print no report and exit 2.
    let (code, out) = edgegate(&["audit", "--records", "/nonexistent", "--slices", &copy]);
    assert_eq!(code, 2, "{out}");
    assert!(!out.contains("summary"), "{out}");
    std::fs::write(path("bad.yaml"), "kind: [").expect("write");
    let (code, out) = edgegate(&["audit", "--records", &served, "--slices", &path("bad.yaml")]);
    assert_eq!(code, 2, "{out}");
}

#[test]
fn audit_offline_says_whether_the_policy_mode_is_safe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let ns = "ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10";
    // The webhook reads both entries as the copy's address; CEL's exact compare would not.
    let served = std::fs::read_to_string(repo("examples/records/edgereachability.yaml")).expect("record");
    let respelled =
        served.replace("- fd20:0:2::1:0:0", "- FD20:0:2::1:0:0").replace("- fd20:0:2::1:0:1", "- fd20:0:2:0:0:1:0:1");
    assert_ne!(respelled, served, "the example record lists both addresses");
    std::fs::write(path("records.yaml"), respelled).expect("write");
    // A second copy, large (one address more than the threshold), one address with a leading zero.
    let addresses: Vec<String> = (0..LARGE_COPY_ADDRESSES).map(|i| format!("\"fd20:0:2::1:0:{i:x}\"")).collect();
    let big = format!(
        "{{\"apiVersion\": \"discovery.k8s.io/v1\", \"kind\": \"EndpointSlice\", \"addressType\": \"IPv6\",
          \"metadata\": {{\"name\": \"big\", \"namespace\": \"{ns}\",
                        \"labels\": {{\"networking.datumapis.com/vpc-endpointslice-projection\": \"true\"}}}},
          \"endpoints\": [{{\"addresses\": [{}, \"fd20:0:2::1:0:0fff\"]}}]}}",
        addresses.join(", ")
    );
    std::fs::create_dir(path("slices")).expect("dir");
    std::fs::write(path("slices/big.json"), big).expect("write");
    std::fs::copy(repo("examples/copy-endpointslice.yaml"), path("slices/copy.yaml")).expect("copy");

    let (code, out) = edgegate(&["audit", "--records", &path("records.yaml"), "--slices", &path("slices")]);
    assert_eq!(code, 0, "nothing would be deleted, so the exit code does not change: {out}");
    assert!(
        out.contains(
            "ValidatingAdmissionPolicy mode (components/policy): NOT safe: 2 record entries and 1 copy addresses are not spelled canonically\n"
        ),
        "{out}"
    );
    assert!(out.contains(&format!("  record {ns}/default: FD20:0:2::1:0:0 (canonical: fd20:0:2::1:0:0)\n")), "{out}");
    assert!(out.contains(&format!("  copy {ns}/big: fd20:0:2::1:0:0fff (canonical: fd20:0:2::1:0:fff)\n")), "{out}");
    assert!(out.contains(&format!("  1 copies with {LARGE_COPY_ADDRESSES} or more endpoint addresses")), "{out}");

    let (code, out) =
        edgegate(&["audit", "--records", &path("records.yaml"), "--slices", &path("slices"), "--output", "json"]);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let summary = &report["summary"];
    assert_eq!(summary["vapModeSafe"], false);
    assert_eq!(
        (summary["noncanonicalRecordEntries"].as_u64(), summary["noncanonicalCopyAddresses"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(summary["largeCopies"], 1);
    let entry = &report["namespaces"][0];
    assert_eq!(
        entry["noncanonical"][1],
        serde_json::json!({"namespace": ns, "kind": "record", "name": "default", "spelled": "fd20:0:2:0:0:1:0:1", "canonical": "fd20:0:2::1:0:1"})
    );
    assert_eq!(entry["largeCopies"], serde_json::json!([{"name": "big", "addresses": LARGE_COPY_ADDRESSES + 1}]));

    // Spelled canonically, the same hub is safe.
    let (code, out) = edgegate(&[
        "audit",
        "--records",
        &repo("examples/records").to_string_lossy(),
        "--slices",
        &path("slices/copy.yaml"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ValidatingAdmissionPolicy mode (components/policy): safe: every record entry and copy address is spelled canonically\n"), "{out}");
}

#[test]
fn version_names_the_git_revision_it_was_built_from() {
    let (code, printed) = edgegate(&["--version"]);
    assert_eq!(code, 0);
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(repo(".")).output();
    match head {
        Ok(out) if out.status.success() && std::env::var_os("EDGEGATE_REVISION").is_none() => {
            let head = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let want = format!("edgegate {} (git {head})", env!("CARGO_PKG_VERSION"));
            assert_eq!(printed.trim(), want);
        }
        _ => assert!(printed.starts_with(&format!("edgegate {}", env!("CARGO_PKG_VERSION"))), "{printed}"),
    }
}

/// `--context` without `--kubeconfig` picks a context of the kubeconfig kubectl reads
/// ($KUBECONFIG), not the current one. Failed on the old code: the current context was audited
/// (its server dialled), the context asked for never named.
#[test]
fn audit_context_alone_picks_that_context_of_the_default_kubeconfig() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: here\n  cluster: {server: 'https://127.0.0.1:9'}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: current\n  context: {cluster: here, user: u}\n\
         current-context: current\n",
    )
    .expect("kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_edgegate"))
        .args(["audit", "--context", "elsewhere"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("edgegate runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("elsewhere") && said.contains("$KUBECONFIG"), "the context asked for named: {said}");
}

/// An empty render (a `kubectl kustomize` that failed, piped in) is no install: exit 2, saying so.
/// Failed on the old code: "ok: 0 objects", exit 0.
#[test]
fn render_check_refuses_an_empty_render() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("render.yaml");
    std::fs::write(&empty, "").expect("empty render");
    let (code, out) = edgegate(&["render-check", &empty.to_string_lossy()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("holds no object"), "{out}");
}
