//! The API calls each binary makes, as RBAC rules: the one list that deploy/'s roles are generated
//! from (`edgegate rbac`), and that the tests check the code's calls against.

/// One RBAC rule: these verbs on this resource of this API group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub group: &'static str,
    pub resource: &'static str,
    /// Only these objects, when not empty (RBAC `resourceNames`).
    pub names: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

/// `edgegate-webhook --kubernetes`: one list and a watch of records.
pub const WEBHOOK: &[Rule] = &[Rule {
    group: "networking.datumapis.com",
    resource: "edgereachabilities",
    names: &[],
    verbs: &["list", "watch"],
}];

/// `edgegate-webhook --ca-bundle-for edgegate`: its webhook configurations (the validating one,
/// and the mutating one of components/trim), read and patched.
pub const WEBHOOK_CA_BUNDLE: &[Rule] = &[
    Rule {
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        names: &["edgegate"],
        verbs: &["get", "patch"],
    },
    Rule {
        group: "admissionregistration.k8s.io",
        resource: "mutatingwebhookconfigurations",
        names: &["edgegate"],
        verbs: &["get", "patch"],
    },
];

/// `edgegate-pruner`: records listed and watched, and each read once more right before a DELETE
/// (`get`); copies listed, watched and deleted; an Event per deletion (kube's recorder patches a
/// repeated event into a series); and its Lease (read, created, and renewed, taken over or
/// released by a replace with the resourceVersion it read). Leases are namespaced; see
/// [`PRUNER_LEASE`].
pub const PRUNER: &[Rule] = &[
    Rule {
        group: "networking.datumapis.com",
        resource: "edgereachabilities",
        names: &[],
        verbs: &["get", "list", "watch"],
    },
    Rule { group: "discovery.k8s.io", resource: "endpointslices", names: &[], verbs: &["list", "watch", "delete"] },
    Rule { group: "events.k8s.io", resource: "events", names: &[], verbs: &["create", "patch"] },
];

/// The pruner's Lease rule, granted in its own namespace only.
pub const PRUNER_LEASE: Rule =
    Rule { group: "coordination.k8s.io", resource: "leases", names: &[], verbs: &["get", "create", "update"] };

/// `edgegate-producer` on the hub: records read, created and server-side applied (never deleted),
/// hub namespaces listed and watched (never created), Warning Events. Its Lease: [`PRODUCER_LEASE`].
pub const PRODUCER_HUB: &[Rule] = &[
    Rule {
        group: "networking.datumapis.com",
        resource: "edgereachabilities",
        names: &[],
        verbs: &["get", "list", "watch", "create", "patch"],
    },
    Rule { group: "", resource: "namespaces", names: &[], verbs: &["list", "watch"] },
    Rule { group: "events.k8s.io", resource: "events", names: &[], verbs: &["create", "patch"] },
];

/// The producer's Lease rule, granted in its own namespace only: as the pruner's, and, sharing
/// (`--shard`), every Lease there listed and watched (the members' and the buckets' fences).
pub const PRODUCER_LEASE: Rule = Rule {
    group: "coordination.k8s.io",
    resource: "leases",
    names: &[],
    verbs: &["get", "list", "watch", "create", "update"],
};

/// `edgegate-producer` at Milo's root (`--milo-kubeconfig`): its projects listed and watched.
/// With [`PRODUCER_PROJECT`] granted for every project, the one read grant on Milo.
pub const PRODUCER_MILO: &[Rule] =
    &[Rule { group: "resourcemanager.miloapis.com", resource: "projects", names: &[], verbs: &["list", "watch"] }];

/// `edgegate-producer` in each project control plane: read only, the five kinds it watches.
pub const PRODUCER_PROJECT: &[Rule] = &[
    Rule { group: "networking.datumapis.com", resource: "httpproxies", names: &[], verbs: &["get", "list", "watch"] },
    Rule {
        group: "networking.datumapis.com",
        resource: "networkservices",
        names: &[],
        verbs: &["get", "list", "watch"],
    },
    Rule {
        group: "networking.datumapis.com",
        resource: "networkinterfaces",
        names: &[],
        verbs: &["get", "list", "watch"],
    },
    Rule { group: "discovery.k8s.io", resource: "endpointslices", names: &[], verbs: &["get", "list", "watch"] },
    Rule { group: "", resource: "namespaces", names: &[], verbs: &["get", "list", "watch"] },
];

/// Does any of `rules` allow `verb` on `group`/`resource` (any object of it)?
pub fn allows(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| r.group == group && r.resource == resource && r.names.is_empty() && r.verbs.contains(&verb))
}

/// A ClusterRole (or, with a namespace, a Role) granting `rules`, as YAML.
pub fn role_yaml(kind: &str, name: &str, namespace: Option<&str>, rules: &[Rule]) -> String {
    let mut out = format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\n");
    if let Some(ns) = namespace {
        out.push_str(&format!("  namespace: {ns}\n"));
    }
    out.push_str("rules:\n");
    for r in rules {
        let quoted = |items: &[&str]| items.iter().map(|v| format!("\"{v}\"")).collect::<Vec<_>>().join(", ");
        out.push_str(&format!("  - apiGroups: [\"{}\"]\n    resources: [\"{}\"]\n", r.group, r.resource));
        if !r.names.is_empty() {
            out.push_str(&format!("    resourceNames: [{}]\n", quoted(r.names)));
        }
        out.push_str(&format!("    verbs: [{}]\n", quoted(r.verbs)));
    }
    out
}

/// The name Milo's IAM gives a group's permissions: the group itself, the core group
/// `core.miloapis.com` (as Milo registers namespaces).
fn iam_service(group: &str) -> &str {
    if group.is_empty() { "core.miloapis.com" } else { group }
}

/// An IAM `Role` (`iam.miloapis.com/v1alpha1`) granting `rules` as Milo's IAM names permissions
/// (`{service}/{resource}.{verb}`), as YAML: the same calls as [`role_yaml`], for a Milo that
/// authorizes through its IAM webhook.
pub fn iam_role_yaml(name: &str, namespace: &str, rules: &[Rule]) -> String {
    let mut out = format!(
        "apiVersion: iam.miloapis.com/v1alpha1\nkind: Role\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  launchStage: Beta\n  includedPermissions:\n"
    );
    for r in rules {
        for verb in r.verbs {
            out.push_str(&format!("    - {}/{}.{verb}\n", iam_service(r.group), r.resource));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IAM permissions name no objects: a rule limited to some would become a grant on all of
    /// them in [`iam_role_yaml`].
    #[test]
    fn the_rules_granted_through_iam_name_no_objects() {
        assert!(PRODUCER_MILO.iter().chain(PRODUCER_PROJECT).all(|r| r.names.is_empty()));
        let role = iam_role_yaml("r", "ns", PRODUCER_PROJECT);
        assert!(role.contains("    - core.miloapis.com/namespaces.watch\n"), "{role}");
        assert!(role.contains("    - networking.datumapis.com/httpproxies.get\n"), "{role}");
    }
}
