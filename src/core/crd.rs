//! The EdgeReachability resource, exactly as the project control plane writes it on the hub.
//!
//! Two types share one spec: kube's `CustomResource` derive produces the CRD (schema, names,
//! printer columns) in [`schema`], and [`EdgeReachability`] is what edgegate reads. They differ in
//! one way that matters: upstream both `spec` and `spec.addresses` are optional, but the derived
//! type requires `spec`, so one record written without it would fail the whole list of a watch.
//! The reading type defaults a missing `spec`; the CRD is the derived one with `spec` made optional.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "networking.datumapis.com";
pub const VERSION: &str = "v1alpha";
pub const KIND: &str = "EdgeReachability";
pub const PLURAL: &str = "edgereachabilities";

/// Most addresses one record may name (the producer's schema limit).
pub const MAX_RECORD_ADDRESSES: usize = 8192;

/// The addresses a project namespace serves through an HTTPProxy.
///
/// `addresses` missing means the same as `addresses: []` — nothing in this namespace is served.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EdgeReachabilitySpec {
    /// Served workload addresses: IPv4, IPv6 or FQDN strings, each without a prefix length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8192))]
    pub addresses: Option<Vec<String>>,
}

/// One namespace's record (always named `default`), as edgegate reads it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EdgeReachability {
    #[serde(default = "api_version", skip_deserializing)]
    api_version: String,
    #[serde(default = "kind", skip_deserializing)]
    kind: String,
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: EdgeReachabilitySpec,
}

fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

fn kind() -> String {
    KIND.to_owned()
}

impl EdgeReachability {
    pub fn new(metadata: ObjectMeta, spec: EdgeReachabilitySpec) -> Self {
        EdgeReachability { api_version: api_version(), kind: kind(), metadata, spec }
    }

    /// The record's address entries as written, in order; none when `spec` or `addresses` is absent.
    pub fn entries(&self) -> &[String] {
        self.spec.addresses.as_deref().unwrap_or_default()
    }

    /// A reference to the record `name` in `namespace`: what the pruner's and the producer's
    /// Events are about.
    pub fn reference(namespace: &str, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
        k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version()),
            kind: Some(kind()),
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }
}

static_resource!(EdgeReachability, NamespaceResourceScope, GROUP, VERSION, KIND, PLURAL);

/// The derived resource, used only to generate the CRD.
mod schema {
    use kube::CustomResource;

    #[derive(CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, schemars::JsonSchema)]
    #[kube(
        group = "networking.datumapis.com",
        version = "v1alpha",
        kind = "EdgeReachability",
        plural = "edgereachabilities",
        namespaced,
        printcolumn = r#"{"name":"Addresses","type":"integer","jsonPath":".spec.addresses.length()"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )]
    pub struct Spec {
        #[serde(flatten)]
        pub inner: super::EdgeReachabilitySpec,
    }
}

/// The CustomResourceDefinition, with `spec` optional as upstream has it.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = schema::EdgeReachability::crd();
    crd.spec.names.list_kind = Some(format!("{KIND}List"));
    for version in &mut crd.spec.versions {
        if let Some(root) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            root.description = Some(
                "The workload addresses a project namespace serves; EndpointSlice copies naming none of them are not carried to the edges."
                    .to_owned(),
            );
            if let Some(required) = root.required.as_mut() {
                required.retain(|field| field != "spec");
            }
            if root.required.as_ref().is_some_and(Vec::is_empty) {
                root.required = None;
            }
        }
    }
    crd
}

/// The CRD as YAML, the text `edgegate crd` prints and `deploy/crd/` keeps.
pub fn crd_yaml() -> Result<String, serde_saphyr::ser_error::Error> {
    serde_saphyr::to_string(&crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_records_as_the_producer_writes_them() {
        let full: EdgeReachability = serde_saphyr::from_str(
            "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\n\
             metadata: {name: default, namespace: ns-a}\nspec: {addresses: [fd00::7, 10.0.3.7]}\n",
        )
        .expect("full record");
        assert_eq!(full.entries(), ["fd00::7", "10.0.3.7"]);
        for partial in ["spec: {}\n", ""] {
            let text = format!(
                "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\n\
                 metadata: {{name: default, namespace: ns-a}}\n{partial}"
            );
            let record: EdgeReachability = serde_saphyr::from_str(&text).expect("partial record");
            assert!(record.entries().is_empty());
        }
        let written = serde_json::to_value(&full).expect("serialises");
        assert_eq!(written["apiVersion"], "networking.datumapis.com/v1alpha");
        assert_eq!(written["kind"], "EdgeReachability");
    }

    #[test]
    fn crd_matches_the_upstream_contract() {
        let crd = serde_json::to_value(crd()).expect("crd serialises");
        assert_eq!(crd["metadata"]["name"], "edgereachabilities.networking.datumapis.com");
        assert_eq!(crd["spec"]["names"]["kind"], "EdgeReachability");
        assert_eq!(crd["spec"]["names"]["plural"], "edgereachabilities");
        assert_eq!(crd["spec"]["names"]["listKind"], "EdgeReachabilityList");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha");
        let root = &version["schema"]["openAPIV3Schema"];
        assert_eq!(root["properties"]["spec"]["properties"]["addresses"]["maxItems"], 8192);
        assert!(root.get("required").is_none(), "spec is optional upstream: {root}");
        assert_eq!(version["additionalPrinterColumns"][0]["name"], "Addresses");
        assert_eq!(version["additionalPrinterColumns"][0]["jsonPath"], ".spec.addresses.length()");
        assert_eq!(version["additionalPrinterColumns"][1]["name"], "Age");
        assert!(version.get("subresources").is_none_or(serde_json::Value::is_null));
    }
}
