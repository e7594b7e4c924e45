//! The project control plane's objects the producer reads, lean: only the fields the answer uses
//! (upstream's field names, `networking.datumapis.com/v1alpha`), the rest skipped unparsed.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};

use super::crd::{GROUP, VERSION};
use super::slice::{lean_metadata, null_as_empty};

/// An HTTPProxy: only its rules' backends.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpProxy {
    #[serde(default, deserialize_with = "bare_metadata")]
    pub metadata: Box<ObjectMeta>,
    #[serde(default)]
    pub spec: HttpProxySpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpProxySpec {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub backends: Vec<Backend>,
}

/// One backend; exactly one form is set upstream. `endpoint` and `connector` backends carry no
/// workload address and are not read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    pub network_service: Option<BackendRef>,
    pub instance: Option<BackendRef>,
}

/// `{name, port}`; ports are not consulted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendRef {
    #[serde(default)]
    pub name: String,
}

/// A NetworkService: only its interface selector.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkService {
    #[serde(default, deserialize_with = "bare_metadata")]
    pub metadata: Box<ObjectMeta>,
    #[serde(default)]
    pub spec: NetworkServiceSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkServiceSpec {
    pub network_interfaces: Option<InterfaceSelection>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceSelection {
    pub selector: Option<LabelSelector>,
}

/// A NetworkInterface: its labels (in the metadata), addresses and phase. `externalAddresses`
/// are never recorded, so they are not read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkInterface {
    #[serde(default, deserialize_with = "labelled_metadata")]
    pub metadata: Box<ObjectMeta>,
    #[serde(default)]
    pub spec: NetworkInterfaceSpec,
    #[serde(default)]
    pub status: NetworkInterfaceStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkInterfaceSpec {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub addresses: Vec<InterfaceAddress>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceAddress {
    /// An address, possibly with a prefix length (`fd20:0:2::1:0:0/128`).
    #[serde(default)]
    pub address: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkInterfaceStatus {
    pub phase: Option<String>,
}

/// What the answer reads of a project object's metadata: its name, namespace, version and
/// deletion, and (an interface's, which selectors match) its labels. Annotations (a kubectl
/// last-applied-configuration is a copy of the whole object), managed fields and the rest are
/// skipped while decoding, never held: at thousands of projects they would be most of the memory.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProjectMetadata {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(default)]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

/// The same without labels, skipped while decoding too.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BareProjectMetadata {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

fn labelled_metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<ObjectMeta>, D::Error> {
    let meta = Option::<ProjectMetadata>::deserialize(d)?;
    Ok(Box::new(meta.map_or_else(ObjectMeta::default, |m| ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        labels: m.labels,
        ..ObjectMeta::default()
    })))
}

fn bare_metadata<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<ObjectMeta>, D::Error> {
    let meta = Option::<BareProjectMetadata>::deserialize(d)?;
    Ok(Box::new(meta.map_or_else(ObjectMeta::default, |m| ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })))
}

/// The phase of an interface a workload holds; only those are served.
pub const BOUND: &str = "Bound";

impl NetworkInterface {
    pub fn is_bound(&self) -> bool {
        self.status.phase.as_deref() == Some(BOUND)
    }
}

/// A Namespace, lean: the producer needs only its name and UID (the UID names the hub namespace).
/// Watched as this type, 10,000 namespaces cost their names and UIDs, not their managed fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamespaceMeta {
    #[serde(default, deserialize_with = "lean_metadata")]
    pub metadata: Box<ObjectMeta>,
}

/// The label other controllers put on each hub namespace, naming the project it belongs to:
/// `cluster-<project>`, with `/` in the project's name spelled `_` ([`cluster_label`]).
pub const UPSTREAM_CLUSTER_LABEL: &str = "meta.datumapis.com/upstream-cluster-name";

/// The value of [`UPSTREAM_CLUSTER_LABEL`] on the hub namespaces of `project`.
pub fn cluster_label(project: &str) -> String {
    format!("cluster-{}", project.replace('/', "_"))
}

static_resource!(NamespaceMeta, k8s_openapi::ClusterResourceScope, "", "v1", "Namespace", "namespaces");

static_resource!(HttpProxy, NamespaceResourceScope, GROUP, VERSION, "HTTPProxy", "httpproxies");
static_resource!(NetworkService, NamespaceResourceScope, GROUP, VERSION, "NetworkService", "networkservices");
static_resource!(NetworkInterface, NamespaceResourceScope, GROUP, VERSION, "NetworkInterface", "networkinterfaces");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_upstream_shapes_and_skips_the_rest() {
        let proxy: HttpProxy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "managedFields": [{"manager": "x"}]},
            "spec": {"hostnames": ["a.example"], "rules": [{"matches": [{"path": {"value": "/"}}], "backends": [
                {"networkService": {"name": "web", "port": 8080}},
                {"instance": {"name": "vm-1", "port": 80}},
                {"endpoint": "https://example.com"},
                {"connector": {"name": "c"}},
            ]}]},
        }))
        .expect("proxy");
        let backends = &proxy.spec.rules[0].backends;
        assert_eq!(backends[0].network_service.as_ref().map(|r| r.name.as_str()), Some("web"));
        assert_eq!(backends[1].instance.as_ref().map(|r| r.name.as_str()), Some("vm-1"));
        assert_eq!(backends[2], Backend::default());
        assert!(proxy.metadata.managed_fields.is_none());
        let interface: NetworkInterface = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "i", "labels": {"app": "web"}},
            "spec": {"addresses": [{"address": "fd20::1/128"}], "externalAddresses": [{"address": "203.0.113.1"}]},
            "status": {"phase": "Bound"},
        }))
        .expect("interface");
        assert!(interface.is_bound());
        assert_eq!(interface.spec.addresses[0].address, "fd20::1/128");
    }

    /// What the answer never reads is not held: a proxy keeps no labels or annotations, an
    /// interface its labels only (selectors match them), however large a kubectl
    /// last-applied-configuration annotation is.
    #[test]
    fn annotations_and_unread_labels_are_not_held() {
        let meta = serde_json::json!({"name": "web", "namespace": "a", "resourceVersion": "7",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(10_000)},
            "managedFields": [{"manager": "kubectl"}]});
        let proxy: HttpProxy = serde_json::from_value(serde_json::json!({"metadata": meta})).expect("proxy");
        assert_eq!((proxy.metadata.labels.as_ref(), proxy.metadata.annotations.as_ref()), (None, None));
        assert_eq!(proxy.metadata.resource_version.as_deref(), Some("7"));
        let interface: NetworkInterface = serde_json::from_value(serde_json::json!({"metadata": meta})).expect("nic");
        assert_eq!(interface.metadata.labels.as_ref().map(|l| l.len()), Some(1));
        assert_eq!(interface.metadata.annotations, None);
        assert!(interface.metadata.managed_fields.is_none());
    }
}
