//! EndpointSlice builders for tests and benchmarks.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::core::slice::{Endpoint, Slice};

use crate::core::selector::DEFAULT_COPY_SELECTOR;

/// An EndpointSlice with one endpoint per address, labelled as a copy by the default selector.
pub fn copy(namespace: &str, name: &str, addresses: &[&str]) -> Slice {
    let mut slice = not_copy(namespace, name, addresses);
    let (key, value) = DEFAULT_COPY_SELECTOR.split_once('=').unwrap_or_default();
    slice.metadata.labels = Some(BTreeMap::from([(key.to_owned(), value.to_owned())]));
    slice
}

/// The same slice without the copy label.
pub fn not_copy(namespace: &str, name: &str, addresses: &[&str]) -> Slice {
    let address_type = match addresses.first().map(|a| a.parse::<std::net::IpAddr>()) {
        Some(Ok(std::net::IpAddr::V4(_))) => "IPv4",
        Some(Err(_)) => "FQDN",
        _ => "IPv6",
    };
    Slice {
        metadata: Box::new(ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        }),
        address_type: address_type.to_owned(),
        endpoints: addresses.iter().map(|a| Endpoint { addresses: vec![(*a).to_owned()] }).collect(),
    }
}

/// `slice` with `deletionTimestamp` set and no finalizer left: what the UPDATE removing its last
/// finalizer sends.
pub fn terminating(mut slice: Slice) -> Slice {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    slice.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    slice
}
