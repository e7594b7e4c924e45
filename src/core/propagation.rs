//! Which Karmada propagation policy takes each copy, and whether that is the fleet-wide one.
//!
//! Karmada binds a resource template to exactly one (Cluster)PropagationPolicy and sends it only
//! where that policy places it. The copies must all reach every edge (an edge falls back to other
//! locations' copies), so one fleet-wide policy should take them all: a narrower policy that also
//! selects them, say one picking EndpointSlices by `networking.datumapis.com/location`, silently
//! sends each copy to its own location only. The choice below is Karmada's:
//!
//! 1. a PropagationPolicy of the copy's namespace before any ClusterPropagationPolicy;
//! 2. then the higher `spec.priority` (explicit, default 0);
//! 3. then the closer match (implicit): by name, over by label selector, over by kind alone;
//! 4. then the name first in byte order.
//!
//! A copy already bound keeps its policy (Karmada records it in the copy's
//! `propagationpolicy.karmada.io/…` or `clusterpropagationpolicy.karmada.io/name` annotations or
//! labels) until a policy with `preemption: Always` and a higher priority takes it; the report
//! names both the policy that holds a copy and the one a new copy would get.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};

use super::slice::Slice;

const CLUSTER: &str = "ClusterPropagationPolicy";
const NAMESPACED: &str = "PropagationPolicy";
/// Copies named per policy in the report, at most.
const EXAMPLES: usize = 5;

/// A policy by kind, namespace and name, spelled `ClusterPropagationPolicy/NAME` or
/// `PropagationPolicy/NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyRef {
    /// `None` for a ClusterPropagationPolicy.
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{NAMESPACED}/{ns}/{}", self.name),
            None => write!(f, "{CLUSTER}/{}", self.name),
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{0:?} names no policy: write ClusterPropagationPolicy/NAME or PropagationPolicy/NAMESPACE/NAME")]
    Ref(String),
    #[error("{kind} {name:?}: {reason}")]
    Object { kind: String, name: String, reason: String },
}

impl FromStr for PolicyRef {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let named = |p: &&str| !p.is_empty();
        match parts.as_slice() {
            [kind, name] if kind.eq_ignore_ascii_case(CLUSTER) && named(name) => {
                Ok(PolicyRef { namespace: None, name: (*name).to_owned() })
            }
            [kind, ns, name] if kind.eq_ignore_ascii_case(NAMESPACED) && named(ns) && named(name) => {
                Ok(PolicyRef { namespace: Some((*ns).to_owned()), name: (*name).to_owned() })
            }
            _ => Err(PolicyError::Ref(s.to_owned())),
        }
    }
}

/// One (Cluster)PropagationPolicy: what Karmada's choice reads of it.
#[derive(Clone, Debug)]
pub struct Policy {
    pub id: PolicyRef,
    pub priority: i32,
    pub preempts: bool,
    selectors: Vec<ResourceSelector>,
}

#[derive(Clone, Debug)]
struct ResourceSelector {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: Option<String>,
    /// `Some(None)`: a label selector Karmada cannot parse, which matches nothing.
    labels: Option<Option<Selector>>,
}

/// How closely a policy's selectors match a resource: Karmada's implicit priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Closeness {
    Kind,
    Labels,
    Name,
}

/// The API object, as far as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object {
    kind: Option<String>,
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: Spec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    deletion_timestamp: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    priority: Option<i32>,
    preemption: Option<String>,
    #[serde(default)]
    resource_selectors: Vec<SelectorObject>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SelectorObject {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    namespace: Option<String>,
    name: Option<String>,
    label_selector: Option<LabelSelector>,
}

impl Policy {
    /// A policy from its API object (kind `PropagationPolicy` or `ClusterPropagationPolicy`);
    /// `None` for one being deleted, which Karmada no longer binds anything to.
    pub fn from_object(object: serde_json::Value) -> Result<Option<Policy>, PolicyError> {
        let fail = |kind: &str, name: &str, reason: String| PolicyError::Object {
            kind: kind.to_owned(),
            name: name.to_owned(),
            reason,
        };
        let object: Object = serde_json::from_value(object).map_err(|e| fail("policy", "?", e.to_string()))?;
        let kind = object.kind.unwrap_or_default();
        let name = object.metadata.name.unwrap_or_default();
        let namespace = match kind.as_str() {
            CLUSTER => None,
            NAMESPACED => {
                Some(object.metadata.namespace.ok_or_else(|| fail(&kind, &name, "it has no namespace".into()))?)
            }
            _ => return Err(fail(&kind, &name, "not a PropagationPolicy or ClusterPropagationPolicy".into())),
        };
        if name.is_empty() {
            return Err(fail(&kind, &name, "it has no name".into()));
        }
        if object.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let selectors = object
            .spec
            .resource_selectors
            .into_iter()
            .map(|s| ResourceSelector {
                api_version: s.api_version,
                kind: s.kind,
                namespace: s.namespace.filter(|n| !n.is_empty()),
                name: s.name.filter(|n| !n.is_empty()),
                labels: s.label_selector.map(|l| Selector::try_from(l).ok()),
            })
            .collect();
        Ok(Some(Policy {
            id: PolicyRef { namespace, name },
            priority: object.spec.priority.unwrap_or(0),
            preempts: object.spec.preemption.as_deref() == Some("Always"),
            selectors,
        }))
    }

    /// How closely this policy selects `copy`, if it does.
    fn closeness(&self, copy: &Slice) -> Option<Closeness> {
        if self.id.namespace.as_deref().is_some_and(|ns| ns != copy.namespace()) {
            return None;
        }
        let labels = copy.metadata.labels.clone().unwrap_or_default();
        self.selectors.iter().filter_map(|s| s.closeness(copy, &labels)).max()
    }
}

impl ResourceSelector {
    fn closeness(&self, copy: &Slice, labels: &BTreeMap<String, String>) -> Option<Closeness> {
        let same_type = self.api_version == "discovery.k8s.io/v1" && self.kind == "EndpointSlice";
        if !same_type || self.namespace.as_deref().is_some_and(|ns| ns != copy.namespace()) {
            return None;
        }
        match (&self.name, &self.labels) {
            (Some(name), _) => (name == copy.name()).then_some(Closeness::Name),
            (None, None) => Some(Closeness::Kind),
            (None, Some(selector)) => selector.as_ref().is_some_and(|s| s.matches(labels)).then_some(Closeness::Labels),
        }
    }
}

/// The policy Karmada binds a new `copy` to, if any.
pub fn chosen<'a>(policies: &'a [Policy], copy: &Slice) -> Option<&'a Policy> {
    let best = |namespaced: bool| {
        policies
            .iter()
            .filter(|p| p.id.namespace.is_some() == namespaced)
            .filter_map(|p| p.closeness(copy).map(|c| (p, c)))
            // Highest priority, then closest, then the first name (the greatest of the reversed name).
            .max_by(|(a, ca), (b, cb)| {
                (a.priority, ca, std::cmp::Reverse(&a.id.name)).cmp(&(b.priority, cb, std::cmp::Reverse(&b.id.name)))
            })
            .map(|(p, _)| p)
    };
    best(true).or_else(|| best(false))
}

/// The policy Karmada has bound `copy` to, as the copy records it.
pub fn bound(copy: &Slice) -> Option<PolicyRef> {
    let meta = &copy.metadata;
    let get = |key: &str| {
        let from = |map: &Option<BTreeMap<String, String>>| map.as_ref().and_then(|m| m.get(key)).cloned();
        from(&meta.annotations).or_else(|| from(&meta.labels)).filter(|v| !v.is_empty())
    };
    if let Some(name) = get("clusterpropagationpolicy.karmada.io/name") {
        return Some(PolicyRef { namespace: None, name });
    }
    let name = get("propagationpolicy.karmada.io/name")?;
    let namespace = get("propagationpolicy.karmada.io/namespace").unwrap_or_else(|| copy.namespace().to_owned());
    Some(PolicyRef { namespace: Some(namespace), name })
}

/// The propagation part of the audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Propagation {
    /// The fleet-wide policy as named (`--fleet-policy`), if it was.
    pub fleet: Option<String>,
    /// Every policy that selects, holds or would take a copy, by name.
    pub policies: Vec<Capture>,
    /// Copies no policy holds or would take: Karmada sends them nowhere.
    pub unpropagated: usize,
    /// What is wrong, one sentence each; empty when every copy goes where the fleet-wide one sends it.
    pub findings: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capture {
    pub policy: String,
    /// Copies its resource selectors select, whether it takes them or not.
    pub selects: usize,
    /// Copies recorded as bound to it.
    pub holds: usize,
    /// Copies a new copy of which it would take.
    pub would_take: usize,
    /// The namespaces of those copies.
    pub namespaces: Vec<String>,
    /// Up to five of them, `namespace/name`.
    pub examples: Vec<String>,
}

/// Which policies hold and would take `copies` (copies only), against the `fleet` policy.
pub fn propagation(policies: &[Policy], copies: &[&Slice], fleet: Option<&PolicyRef>) -> Propagation {
    let mut captures: BTreeMap<PolicyRef, (Capture, BTreeSet<String>)> = BTreeMap::new();
    let mut unpropagated = 0;
    for copy in copies {
        let holder = bound(copy);
        let taker = chosen(policies, copy).map(|p| p.id.clone());
        if holder.is_none() && taker.is_none() {
            unpropagated += 1;
        }
        let selecting = policies.iter().filter(|p| p.closeness(copy).is_some()).map(|p| p.id.clone());
        let involved: BTreeSet<PolicyRef> = selecting.clone().chain(holder.clone()).chain(taker.clone()).collect();
        let selecting: BTreeSet<PolicyRef> = selecting.collect();
        for policy in involved {
            let (capture, namespaces) = captures.entry(policy.clone()).or_default();
            capture.selects += usize::from(selecting.contains(&policy));
            capture.holds += usize::from(holder.as_ref() == Some(&policy));
            capture.would_take += usize::from(taker.as_ref() == Some(&policy));
            namespaces.insert(copy.namespace().to_owned());
            if capture.examples.len() < EXAMPLES {
                capture.examples.push(format!("{}/{}", copy.namespace(), copy.name()));
            }
        }
    }
    let policies: Vec<Capture> = captures
        .into_iter()
        .map(|(id, (capture, namespaces))| Capture {
            policy: id.to_string(),
            namespaces: namespaces.into_iter().collect(),
            ..capture
        })
        .collect();
    let findings = findings(&policies, unpropagated, fleet);
    Propagation { fleet: fleet.map(ToString::to_string), policies, unpropagated, findings }
}

fn findings(policies: &[Capture], unpropagated: usize, fleet: Option<&PolicyRef>) -> Vec<String> {
    let mut findings = Vec::new();
    let Some(fleet) = fleet.map(ToString::to_string) else {
        if policies.len() > 1 {
            let names: Vec<&str> = policies.iter().map(|c| c.policy.as_str()).collect();
            findings.push(format!(
                "{} policies select or hold copies ({}), and Karmada binds each copy to one: name the fleet-wide \
                 one with --fleet-policy",
                names.len(),
                names.join(", ")
            ));
        }
        return findings;
    };
    // With no copy at all there is nothing to say of it.
    if unpropagated + policies.len() > 0 && !policies.iter().any(|c| c.policy == fleet) {
        findings.push(format!("{fleet} selects, holds and would take no copy: does it exist, and select the copies?"));
    }
    for other in policies.iter().filter(|c| c.policy != fleet && c.holds + c.would_take > 0) {
        findings.push(format!(
            "{} holds {} and would take {} copies instead of {fleet} (in {}; e.g. {}): Karmada sends them only \
             where it places them",
            other.policy,
            other.holds,
            other.would_take,
            other.namespaces.join(", "),
            other.examples.join(", ")
        ));
    }
    if unpropagated > 0 {
        findings.push(format!("{unpropagated} copies are taken by no policy: Karmada sends them nowhere"));
    }
    findings
}

impl Propagation {
    /// The report for a person.
    pub fn text(&self) -> String {
        let mut out = format!(
            "propagation: fleet-wide policy {}\n",
            self.fleet.as_deref().unwrap_or("not named (--fleet-policy)")
        );
        for c in &self.policies {
            out.push_str(&format!(
                "  {}: selects {}, holds {}, would take {} copies, in {} namespaces\n",
                c.policy,
                c.selects,
                c.holds,
                c.would_take,
                c.namespaces.len()
            ));
        }
        for finding in &self.findings {
            out.push_str(&format!("  problem: {finding}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(kind: &str, ns: Option<&str>, name: &str, priority: i32, selectors: serde_json::Value) -> Policy {
        let mut object = json!({"apiVersion": "policy.karmada.io/v1alpha1", "kind": kind,
            "metadata": {"name": name}, "spec": {"priority": priority, "resourceSelectors": selectors}});
        if let Some(ns) = ns {
            object["metadata"]["namespace"] = json!(ns);
        }
        Policy::from_object(object).expect("valid").expect("not deleting")
    }

    fn by_kind() -> serde_json::Value {
        json!([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice"}])
    }

    fn by_label(key: &str) -> serde_json::Value {
        json!([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "labelSelector": {"matchExpressions": [{"key": key, "operator": "Exists"}]}}])
    }

    fn copy(ns: &str, name: &str, extra: &[(&str, &str)]) -> Slice {
        let mut labels = BTreeMap::from([
            ("networking.datumapis.com/vpc-endpointslice-projection".to_owned(), "true".to_owned()),
            ("networking.datumapis.com/location".to_owned(), "dfw".to_owned()),
        ]);
        labels.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns, "labels": labels},
            "addressType": "IPv6", "endpoints": []}))
        .expect("slice")
    }

    const COPIES: &str = "networking.datumapis.com/vpc-endpointslice-projection";
    const LOCATION: &str = "networking.datumapis.com/location";

    fn chosen_name(policies: &[Policy], copy: &Slice) -> Option<String> {
        chosen(policies, copy).map(|p| p.id.to_string())
    }

    #[test]
    fn karmadas_choice() {
        let fleet = || policy(CLUSTER, None, "edgegate-copies", 0, by_label(COPIES));
        let c = copy("ns-a", "s1", &[]);
        let cases: Vec<(&str, Vec<Policy>, Option<&str>)> = vec![
            ("the fleet-wide one alone", vec![fleet()], Some("ClusterPropagationPolicy/edgegate-copies")),
            ("none", vec![], None),
            (
                "another kind is not selected",
                vec![policy(CLUSTER, None, "deployments", 9, json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]))],
                None,
            ),
            (
                "a namespace's policy before any cluster one, whatever their priorities",
                vec![fleet(), policy(NAMESPACED, Some("ns-a"), "by-location", -5, by_label(LOCATION))],
                Some("PropagationPolicy/ns-a/by-location"),
            ),
            (
                "another namespace's policy does not take it",
                vec![fleet(), policy(NAMESPACED, Some("ns-b"), "by-location", 5, by_label(LOCATION))],
                Some("ClusterPropagationPolicy/edgegate-copies"),
            ),
            (
                "higher explicit priority first",
                vec![fleet(), policy(CLUSTER, None, "zz-location", 1, by_kind())],
                Some("ClusterPropagationPolicy/zz-location"),
            ),
            (
                "same priority: by label over by kind",
                vec![fleet(), policy(CLUSTER, None, "a-all-slices", 0, by_kind())],
                Some("ClusterPropagationPolicy/edgegate-copies"),
            ),
            (
                "same priority, same closeness: the first name",
                vec![fleet(), policy(CLUSTER, None, "by-location", 0, by_label(LOCATION))],
                Some("ClusterPropagationPolicy/by-location"),
            ),
            (
                "by name over by label",
                vec![
                    fleet(),
                    policy(
                        CLUSTER,
                        None,
                        "zz-one",
                        0,
                        json!([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "name": "s1",
                            "labelSelector": {"matchLabels": {"nothing": "matches"}}}]),
                    ),
                ],
                Some("ClusterPropagationPolicy/zz-one"),
            ),
            (
                "a selector's namespace narrows a cluster policy",
                vec![
                    fleet(),
                    policy(
                        CLUSTER,
                        None,
                        "a-elsewhere",
                        0,
                        json!([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "namespace": "ns-b"}]),
                    ),
                ],
                Some("ClusterPropagationPolicy/edgegate-copies"),
            ),
            (
                "a label selector that does not parse matches nothing",
                vec![
                    fleet(),
                    policy(
                        CLUSTER,
                        None,
                        "a-broken",
                        3,
                        json!([{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                            "labelSelector": {"matchExpressions": [{"key": "k", "operator": "Sideways"}]}}]),
                    ),
                ],
                Some("ClusterPropagationPolicy/edgegate-copies"),
            ),
        ];
        for (case, policies, want) in cases {
            assert_eq!(chosen_name(&policies, &c).as_deref(), want, "{case}");
        }
    }

    #[test]
    fn a_policy_being_deleted_takes_nothing_and_bad_objects_are_named() {
        let deleting = json!({"kind": CLUSTER, "metadata": {"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(Policy::from_object(deleting).expect("valid").is_none());
        let no_ns = json!({"kind": NAMESPACED, "metadata": {"name": "x"}});
        let e = Policy::from_object(no_ns).expect_err("no namespace").to_string();
        assert!(e.contains("PropagationPolicy \"x\": it has no namespace"), "{e}");
        let other = json!({"kind": "Deployment", "metadata": {"name": "x"}});
        assert!(Policy::from_object(other).is_err());
    }

    #[test]
    fn references_parse_and_print_alike() {
        for text in ["ClusterPropagationPolicy/edgegate-copies", "PropagationPolicy/ns-a/by-location"] {
            assert_eq!(text.parse::<PolicyRef>().expect("parses").to_string(), text);
        }
        for bad in ["", "edgegate-copies", "ClusterPropagationPolicy/", "PropagationPolicy/x", "Deployment/a/b"] {
            assert!(bad.parse::<PolicyRef>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_copy_records_the_policy_that_holds_it() {
        let held = copy("ns-a", "s1", &[("clusterpropagationpolicy.karmada.io/name", "edgegate-copies")]);
        assert_eq!(bound(&held).map(|p| p.to_string()).as_deref(), Some("ClusterPropagationPolicy/edgegate-copies"));
        let held = copy(
            "ns-a",
            "s1",
            &[("propagationpolicy.karmada.io/name", "p"), ("propagationpolicy.karmada.io/namespace", "ns-a")],
        );
        assert_eq!(bound(&held).map(|p| p.to_string()).as_deref(), Some("PropagationPolicy/ns-a/p"));
        assert_eq!(bound(&copy("ns-a", "s1", &[])), None);
    }

    #[test]
    fn findings_name_every_policy_but_the_fleet_wide_one() {
        let fleet_ref: PolicyRef = "ClusterPropagationPolicy/edgegate-copies".parse().expect("ref");
        let policies = vec![
            policy(CLUSTER, None, "edgegate-copies", 0, by_label(COPIES)),
            policy(NAMESPACED, Some("ns-a"), "by-location", 0, by_label(LOCATION)),
        ];
        let (a, b) = (copy("ns-a", "s1", &[]), copy("ns-b", "s2", &[]));
        let report = propagation(&policies, &[&a, &b], Some(&fleet_ref));
        assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
        assert!(report.findings[0].starts_with("PropagationPolicy/ns-a/by-location holds 0 and would take 1 copies"));
        assert!(report.findings[0].contains("e.g. ns-a/s1"), "{}", report.findings[0]);

        // Clean: the fleet-wide one takes them all.
        let report = propagation(&policies[..1], &[&a, &b], Some(&fleet_ref));
        assert!(report.findings.is_empty(), "{:?}", report.findings);
        assert_eq!(report.policies[0].would_take, 2);

        // Named but absent, and copies nobody takes; no copies at all: nothing to say.
        let report = propagation(&[], &[&a], Some(&fleet_ref));
        assert_eq!(report.unpropagated, 1);
        assert_eq!(report.findings.len(), 2, "{:?}", report.findings);
        assert!(propagation(&policies, &[], Some(&fleet_ref)).findings.is_empty());

        // Unnamed: two policies selecting copies are a finding (even when one takes them all), one
        // policy is not.
        assert_eq!(propagation(&policies, &[&a, &b], None).findings.len(), 1);
        assert_eq!(propagation(&policies, &[&a], None).findings.len(), 1);
        assert!(propagation(&policies[..1], &[&a, &b], None).findings.is_empty());

        // A copy bound to another policy than a new one would get: both counted, once per copy.
        let held = copy("ns-b", "s3", &[("propagationpolicy.karmada.io/name", "old")]);
        let report = propagation(&policies[..1], &[&held], Some(&fleet_ref));
        let old = report.policies.iter().find(|c| c.policy == "PropagationPolicy/ns-b/old").expect("old");
        assert_eq!((old.selects, old.holds, old.would_take, old.examples.len()), (0, 1, 0, 1));
        assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    }
}
