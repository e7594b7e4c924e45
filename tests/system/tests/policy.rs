//! edgegate's ValidatingAdmissionPolicy mode (`edgegate policy`, deploy/components/policy) on a
//! real kube-apiserver: the decision table's rows answered by the API server itself, with the
//! policy as deploy/ renders it with components/enforce (applied unchanged, no hand patches).

use edgegate_system_tests::helpers::*;
use edgegate_system_tests::pod::{Render, kustomization_with};

const SCOPE: &str = "policy";

/// deploy/'s policy mode as the docs install it (the base, components/policy, then
/// components/enforce: failurePolicy Fail, Deny), its objects applied unchanged. It judges every
/// copy of the API server, which only this test writes to.
fn enforce_policy(cp: &ControlPlane) {
    let render = Render::of(&kustomization_with("policy", &["base"], &["components/policy", "components/enforce"], ""));
    let policy = render.get("ValidatingAdmissionPolicy", "edgegate");
    assert_eq!(policy["spec"]["failurePolicy"], "Fail", "enforcing, as rendered");
    assert_eq!(
        render.get("ValidatingAdmissionPolicyBinding", "edgegate")["spec"]["validationActions"],
        json!(["Deny"])
    );
    render.apply_but_admission(cp);
}

fn refused(r: &Result<(), String>) -> bool {
    r.as_ref().is_err_and(|e| e.contains("is not carried"))
}

async fn patch_copy(client: &Client, ns: &str, name: &str, patch: serde_json::Value) -> Result<(), String> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.map(|_| ()).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_mode_answers_the_decision_table() {
    let cp = shared();
    let client = cp.client().await;
    install_crd(&client).await;
    let scope = [("edgegate-e2e", SCOPE)];
    for ns in ["pol-none", "pol-named", "pol-empty", "pol-big", "pol-update"] {
        namespace(&client, ns, &scope).await;
    }
    set_record(&client, "pol-named", &["fd20:0:d::1", "FD20:0:D:0::2"]).await;
    set_record(&client, "pol-empty", &[]).await;
    let big: Vec<String> = (0..8192).map(|i| format!("fd20:d:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)).collect();
    set_record(&client, "pol-big", &big.iter().map(String::as_str).collect::<Vec<_>>()).await;

    // Copies written before enforcement, for the UPDATE rows: unnamed by the record set below.
    let with_finalizer = |name: &str| {
        let mut s = slice(SCOPE, name, true, &["fd20:0:d::9"]);
        s.metadata.finalizers = Some(vec!["example.com/propagation".into()]);
        s
    };
    for s in [
        slice(SCOPE, "relabelled", true, &["fd20:0:d::9"]),
        slice(SCOPE, "uncopied", true, &["fd20:0:d::9"]),
        with_finalizer("leaving"),
        with_finalizer("gaining"),
    ] {
        create(&client, "pol-update", &s, false).await.expect("before enforcement");
    }
    set_record(&client, "pol-update", &["fd20:0:d::1"]).await;

    enforce_policy(cp);
    let took = eventually(Duration::from_secs(60), "the policy in force", async || {
        refused(&create(&client, "pol-empty", &slice(SCOPE, "probe", true, &["fd20:0:d::1"]), true).await)
    })
    .await;
    eprintln!("policy in force {took:?} after it was applied");

    let last_named: Vec<String> =
        (0..999).map(|i| format!("fd20:e:{:x}::{:x}", i / 1000 + 1, i % 1000 + 1)).chain([big[8191].clone()]).collect();
    let last_named: Vec<&str> = last_named.iter().map(String::as_str).collect();
    let creates: [(&str, &str, EndpointSlice, bool); 8] = [
        ("no record", "pol-none", slice(SCOPE, "c1", true, &["fd20:0:d::9"]), true),
        ("the record names it", "pol-named", slice(SCOPE, "c2", true, &["fd20:0:d::9", "fd20:0:d::1"]), true),
        ("the record names none", "pol-named", slice(SCOPE, "c3", true, &["fd20:0:d::9"]), false),
        ("an empty record", "pol-empty", slice(SCOPE, "c4", true, &["fd20:0:d::1"]), false),
        ("not a copy", "pol-empty", slice(SCOPE, "c5", false, &["fd20:0:d::1"]), true),
        ("a copy without endpoints", "pol-empty", slice(SCOPE, "c6", true, &[]), true),
        (
            "1,000 endpoints, 8,192-address record, the last named",
            "pol-big",
            slice(SCOPE, "c7", true, &last_named),
            true,
        ),
        // Exact strings: the record's FD20:0:D:0::2 is this address, but not this spelling. The
        // webhook admits it; this mode refuses it, hence `edgegate audit` before choosing it.
        ("the record spells it otherwise", "pol-named", slice(SCOPE, "c8", true, &["fd20:0:d::2"]), false),
    ];
    for (row, ns, s, admitted) in creates {
        let r = create(&client, ns, &s, false).await;
        assert_eq!(r.is_ok(), admitted, "{row}: {r:?}");
        if !admitted {
            assert!(refused(&r), "{row}: refused as the webhook refuses: {r:?}");
        }
    }
    let r = create(&client, "pol-named", &slice(SCOPE, "c9", true, &["fd20:0:d::9", "fd20:0:d::a"]), false).await;
    let message = r.expect_err("refused");
    assert!(
        message.contains(
            "EndpointSlice pol-named/c9 is not carried: EdgeReachability in pol-named names none of its addresses (fd20:0:d::9, fd20:0:d::a)"
        ),
        "the webhook's words: {message}"
    );

    // UPDATEs of copies the record does not name.
    let r = patch_copy(&client, "pol-update", "relabelled", json!({"metadata": {"labels": {"claimed": "yes"}}})).await;
    assert!(r.is_ok(), "an UPDATE that adds no address: {r:?}");
    let endpoints = json!({"endpoints": [{"addresses": ["fd20:0:d::9"]}, {"addresses": ["fd20:0:d::8"]}]});
    let r = patch_copy(&client, "pol-update", "relabelled", endpoints.clone()).await;
    assert!(refused(&r), "an UPDATE that adds an unnamed address: {r:?}");
    // No copy any more (the label goes), with a new address: what is no copy passes.
    let mut uncopied = endpoints.clone();
    uncopied["metadata"] = json!({"labels": {edgegate_system_tests::helpers::COPY_LABEL: null}});
    let r = patch_copy(&client, "pol-update", "uncopied", uncopied).await;
    assert!(r.is_ok(), "an UPDATE that makes the slice no copy: {r:?}");
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "pol-update");
    for name in ["leaving", "gaining"] {
        api.delete(name, &DeleteParams::default()).await.expect("delete: terminating");
    }
    let r = patch_copy(&client, "pol-update", "gaining", endpoints.clone()).await;
    assert!(refused(&r), "a terminating copy that gains an unnamed address: {r:?}");
    // The API server deletes the copy with this UPDATE, whatever else it says.
    let mut last_finalizer = endpoints;
    last_finalizer["metadata"] = json!({"finalizers": null});
    let r = patch_copy(&client, "pol-update", "leaving", last_finalizer).await;
    assert!(r.is_ok(), "the last finalizer leaving a terminating copy, in an UPDATE that adds an address: {r:?}");
    assert!(!exists(&client, "pol-update", "leaving").await, "deleted with it");
    let r = patch_copy(&client, "pol-update", "gaining", json!({"metadata": {"finalizers": null}})).await;
    assert!(r.is_ok(), "and the other's: {r:?}");
}
