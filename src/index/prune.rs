//! The plan of a pruner pass over the cached records and copies: the core's plan for each
//! namespace in scope, and nothing at all unless both indexes are whole.

use super::copies::CopyIndex;
use super::store::RecordSource;
use crate::core::plan::{Plan, Scope, plan_namespace};
use crate::core::selector::CopySelector;

/// The plan of a pass over `scope`; nothing unless both caches are synced.
pub fn plan(records: &dyn RecordSource, copies: &CopyIndex, selector: &CopySelector, scope: &Scope) -> Plan {
    let mut plan = Plan::default();
    if !records.synced() || !copies.synced() {
        return plan;
    }
    let namespaces = match scope {
        Scope::Namespace(ns) => vec![ns.clone()],
        Scope::All => records.namespaces(),
    };
    for ns in &namespaces {
        let in_ns = copies.in_namespace(ns);
        let part = plan_namespace(&records.lookup(ns), in_ns.iter().map(AsRef::as_ref), selector);
        plan.deletions.extend(part.deletions);
        plan.terminating += part.terminating;
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::core::fixtures::copy;
    use crate::core::record::Record;
    use crate::index::copies::CopyWriter;
    use crate::index::source::follow::WatchSink;
    use crate::index::store::RecordStore;

    fn names(plan: &Plan) -> Vec<&str> {
        plan.deletions.iter().map(|d| d.name.as_str()).collect()
    }

    fn world(synced_copies: bool) -> (RecordStore, Arc<CopyIndex>) {
        let records = RecordStore::new("default");
        let mut snapshot = HashMap::new();
        snapshot.insert("withdrawn".to_owned(), Arc::new(Record::default()));
        records.replace_all(snapshot, 0);
        let copies = Arc::new(CopyIndex::default());
        let mut writer = CopyWriter::new(Arc::clone(&copies));
        writer.relist_started();
        writer.listed(copy("withdrawn", "a", &["fd00::1"]));
        writer.listed(copy("no-record", "b", &["fd00::2"]));
        if synced_copies {
            writer.relist_done();
        }
        (records, copies)
    }

    #[test]
    fn plan_over_scopes_and_sync() {
        let sel = CopySelector::default();
        let (records, copies) = world(true);
        assert_eq!(names(&plan(&records, &copies, &sel, &Scope::All)), ["a"]);
        assert_eq!(names(&plan(&records, &copies, &sel, &Scope::Namespace("withdrawn".into()))), ["a"]);
        assert_eq!(plan(&records, &copies, &sel, &Scope::Namespace("no-record".into())), Plan::default());
        // Record deleted: the namespace is back to no record; nothing is deleted.
        records.remove("withdrawn");
        assert_eq!(plan(&records, &copies, &sel, &Scope::All), Plan::default());

        let (records, unsynced_copies) = world(false);
        assert_eq!(plan(&records, &unsynced_copies, &sel, &Scope::All), Plan::default(), "copies not synced");
        let (records, copies) = world(true);
        records.set_synced(false);
        assert_eq!(plan(&records, &copies, &sel, &Scope::All), Plan::default(), "records not synced");
    }

    #[test]
    fn records_not_named_default_are_ignored() {
        let records = Arc::new(RecordStore::new("default"));
        let mut writer = crate::index::source::kubernetes::StoreWriter::new(
            Arc::clone(&records),
            crate::index::source::kubernetes::OnWatchError::Unsync,
        );
        writer.relist_started();
        let other: crate::EdgeReachability = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "other", "namespace": "ns"}, "spec": {"addresses": []}
        }))
        .expect("record");
        writer.listed(other);
        writer.relist_done();
        let copies = Arc::new(CopyIndex::default());
        let mut copy_writer = CopyWriter::new(Arc::clone(&copies));
        copy_writer.relist_started();
        copy_writer.listed(copy("ns", "a", &["fd00::1"]));
        copy_writer.relist_done();
        assert_eq!(plan(records.as_ref(), &copies, &CopySelector::default(), &Scope::All), Plan::default());
    }
}
