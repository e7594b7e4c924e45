//! Writers that feed a [`RecordStore`](crate::index::store::RecordStore): record files on disk (the
//! embedded default) or a watch on the hub's EdgeReachability resources.

pub mod budget;
pub mod files;
pub mod follow;
pub mod kubernetes;

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::crd::EdgeReachability;
use crate::core::record::Record;

/// Normalise one resource into the record the store keeps.
pub fn record_of(resource: &EdgeReachability) -> Record {
    #[cfg(debug_assertions)]
    panic_if_asked(resource.metadata.namespace.as_deref().unwrap_or_default());
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

/// Names a record namespace whose delivery panics the watch handler that delivers it.
#[cfg(debug_assertions)]
pub const PANIC_ON_RECORD: &str = "EDGEGATE_TEST_PANIC_ON_RECORD";

/// The tests' way to kill a watch task from inside (the webhook suite asserts that the process
/// then exits rather than serve a view that stopped changing). Debug builds only: a release
/// binary never reads the variable.
#[cfg(debug_assertions)]
fn panic_if_asked(namespace: &str) {
    if std::env::var_os(PANIC_ON_RECORD).is_some_and(|asked| asked == namespace) {
        panic!("{PANIC_ON_RECORD}={namespace}: a record of that namespace was delivered");
    }
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
