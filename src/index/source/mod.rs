//! Writers that feed a [`RecordStore`](crate::index::store::RecordStore): record files on disk (the
//! embedded default) or a watch on the hub's EdgeReachability resources.

pub mod files;
pub mod follow;
pub mod kubernetes;

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::crd::EdgeReachability;
use crate::core::record::Record;

/// Normalise one resource into the record the store keeps.
pub fn record_of(resource: &EdgeReachability) -> Record {
    let record = Record::from_entries(resource.entries().iter().map(String::as_str));
    for bad in record.invalid() {
        tracing::warn!(
            namespace = resource.metadata.namespace.as_deref().unwrap_or_default(),
            name = resource.metadata.name.as_deref().unwrap_or_default(),
            entry = %bad.entry,
            error = %bad.error,
            "record entry is no address; skipped for matching"
        );
    }
    record
}

/// Add a record to a snapshot being built; a second `default` for one namespace (possible only
/// with files) is merged, since every doubt resolves toward keeping what is published.
pub(crate) fn merge_into(snapshot: &mut HashMap<String, Arc<Record>>, namespace: &str, record: Arc<Record>) {
    match snapshot.get_mut(namespace) {
        Some(existing) => {
            tracing::warn!(namespace, "two records for one namespace; using the union of their addresses");
            *existing = Arc::new(existing.union(&record));
        }
        None => {
            snapshot.insert(namespace.to_owned(), record);
        }
    }
}
