//! The parts of a `discovery.k8s.io/v1` EndpointSlice that edgegate judges.
//!
//! Decoding a full `k8s_openapi` EndpointSlice (managed fields, conditions, target references,
//! hints…) costs more than judging it. [`Slice`] keeps only the metadata edgegate reads and each
//! endpoint's addresses, in order; serde skips everything else without allocating. It is a
//! `kube::Resource`, so the pruner watches copies as this type too.

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer, Serialize};

/// An EndpointSlice as edgegate sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slice {
    /// Boxed: `ObjectMeta` is 360 bytes, and a review moves its slice several times while decoding.
    #[serde(default, deserialize_with = "lean_metadata")]
    pub metadata: Box<ObjectMeta>,
    /// Required, as in the API: an object without it is no EndpointSlice.
    pub address_type: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub endpoints: Vec<Endpoint>,
}

/// One endpoint: only its addresses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub addresses: Vec<String>,
}

impl Slice {
    /// Every address the slice carries, as spelled, in order.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.endpoints.iter().flat_map(|e| e.addresses.iter().map(String::as_str))
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
}

static_resource!(Slice, NamespaceResourceScope, "discovery.k8s.io", "v1", "EndpointSlice", "endpointslices");

/// The metadata fields edgegate reads; the rest (managed fields above all) is skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMetadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    /// Set once the copy is being deleted: an UPDATE of it adds nothing, and the pruner leaves it.
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
}

pub(crate) fn lean_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<Box<ObjectMeta>, D::Error> {
    let lean = Option::<LeanMetadata>::deserialize(d)?;
    Ok(Box::new(
        lean.map(|m| ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            annotations: m.annotations,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            ..ObjectMeta::default()
        })
        .unwrap_or_default(),
    ))
}

pub(crate) fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_matters_and_skips_the_rest() {
        let slice: Slice = serde_json::from_value(serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "s", "namespace": "n", "uid": "u", "resourceVersion": "7",
                "labels": {"a": "b"},
                "deletionTimestamp": "2026-12-03T09:00:00Z", "finalizers": ["example.com/hold"],
                "managedFields": [{"manager": "cell", "fieldsV1": {"f:endpoints": {}}}],
            },
            "addressType": "IPv6",
            "endpoints": [
                {"addresses": ["fd00::1"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "p"}},
                {"addresses": ["fd00::2", "fd00::3"], "zone": "z"},
            ],
            "ports": null,
        }))
        .expect("parses");
        assert_eq!(slice.addresses().collect::<Vec<_>>(), ["fd00::1", "fd00::2", "fd00::3"]);
        assert_eq!((slice.namespace(), slice.name()), ("n", "s"));
        assert_eq!(slice.metadata.uid.as_deref(), Some("u"));
        assert_eq!(slice.metadata.resource_version.as_deref(), Some("7"));
        assert!(slice.metadata.deletion_timestamp.is_some());
        assert_eq!(slice.metadata.finalizers.as_deref(), Some(&["example.com/hold".to_owned()][..]));
        assert!(slice.metadata.managed_fields.is_none());
    }

    #[test]
    fn an_object_without_address_type_is_no_slice() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
        assert!(serde_json::from_value::<Slice>(pod).is_err());
        let no_endpoints = serde_json::json!({"addressType": "IPv4", "endpoints": null});
        assert!(serde_json::from_value::<Slice>(no_endpoints).expect("parses").endpoints.is_empty());
    }
}
