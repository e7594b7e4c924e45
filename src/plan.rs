//! The prune plan: which published copies to delete, from the records and the copies as cached.
//!
//! A copy is deleted only where the decision would deny it: its namespace has a record, the
//! record is readable, the copy carries addresses and the record names none of them. No record,
//! an unreadable record or an unsynced cache of either kind: nothing. A copy already being deleted
//! (`deletionTimestamp` set) is not deleted again: it is only counted.

use crate::copies::CopyIndex;
use crate::decision::{Decision, decide};
use crate::record::RecordState;
use crate::selector::CopySelector;
use crate::slice::Slice;
use crate::store::RecordSource;

/// One copy to delete, with the preconditions that make sure it is the copy that was judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// The copy's addresses, none of which the record names.
    pub addresses: Vec<String>,
}

/// Which copies a pass considers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only this namespace: what a change of its record triggers.
    Namespace(String),
    /// Every namespace that has a record: the periodic resync.
    All,
}

/// What a pass would do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub deletions: Vec<Deletion>,
    /// Copies the record names none of that are already being deleted: left alone, and counted
    /// (`edgegate_prune_deletions_total{result="terminating"}`), so no second DELETE or Event.
    pub terminating: usize,
}

/// The plan for `copies` of one namespace under its record `state`.
pub fn plan_namespace<'a>(
    state: &RecordState,
    copies: impl IntoIterator<Item = &'a Slice>,
    selector: &CopySelector,
) -> Plan {
    let mut plan = Plan::default();
    if !matches!(state, RecordState::Present(_)) {
        return plan;
    }
    for copy in copies {
        if is_terminating(copy) {
            plan.terminating += usize::from(matches!(decide(state, copy, selector), Decision::Deny(_)));
        } else if let Some(deletion) = deletion(state, copy, selector) {
            plan.deletions.push(deletion);
        }
    }
    plan
}

fn is_terminating(copy: &Slice) -> bool {
    copy.metadata.deletion_timestamp.is_some()
}

/// The deletion of `copy`, if the decision denies it under `state` and it is not already being
/// deleted.
pub fn deletion(state: &RecordState, copy: &Slice, selector: &CopySelector) -> Option<Deletion> {
    if is_terminating(copy) {
        return None;
    }
    match decide(state, copy, selector) {
        Decision::Deny(denial) => Some(Deletion {
            namespace: denial.namespace.to_owned(),
            name: denial.name.to_owned(),
            uid: copy.metadata.uid.clone(),
            resource_version: copy.metadata.resource_version.clone(),
            addresses: denial.addresses.iter().map(|a| (*a).to_owned()).collect(),
        }),
        Decision::Allow(_) | Decision::Unavailable(_) => None,
    }
}

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
    use crate::copies::CopyWriter;
    use crate::fixtures::{copy, not_copy, terminating};
    use crate::record::Record;
    use crate::source::follow::WatchSink;
    use crate::store::RecordStore;

    fn present(entries: &[&str]) -> RecordState {
        RecordState::Present(Arc::new(Record::from_entries(entries.iter().copied())))
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.deletions.iter().map(|d| d.name.as_str()).collect()
    }

    /// The plan table of the pruner issue, row by row.
    #[test]
    fn plan_table() {
        let sel = CopySelector::default();
        let copies = [
            copy("ns", "served", &["fd00::1"]),
            copy("ns", "unserved", &["fd00::9"]),
            copy("ns", "half-served", &["fd00::9", "FD00:0::1"]),
            copy("ns", "empty", &[]),
            not_copy("ns", "lookalike", &["fd00::9"]),
            terminating(copy("ns", "leaving", &["fd00::9"])),
        ];
        let rows: Vec<(&str, RecordState, Vec<&str>)> = vec![
            ("no record", RecordState::Absent, vec![]),
            ("unreadable or unsynced", RecordState::Unavailable("not synced".into()), vec![]),
            ("empty record: every copy with endpoints", present(&[]), vec!["served", "unserved", "half-served"]),
            ("record names one of a copy's addresses: keep", present(&["fd00::1"]), vec!["unserved"]),
            ("record with only invalid entries", present(&["fd00::/64"]), vec!["served", "unserved", "half-served"]),
        ];
        for (row, state, want) in rows {
            let plan = plan_namespace(&state, &copies, &sel);
            assert_eq!(names(&plan), want, "row: {row}");
            // The terminating copy is never deleted again; it is counted where it would have been.
            assert_eq!(plan.terminating, usize::from(!want.is_empty()), "row: {row}");
        }
    }

    #[test]
    fn a_terminating_copy_is_not_deleted_again() {
        let leaving = terminating(copy("ns", "leaving", &["fd00::9"]));
        assert_eq!(deletion(&present(&[]), &leaving, &CopySelector::default()), None);
        let named = plan_namespace(&present(&["fd00::9"]), [&leaving], &CopySelector::default());
        assert_eq!(named, Plan::default(), "a named terminating copy is neither deleted nor counted");
    }

    #[test]
    fn deletions_carry_preconditions_and_addresses() {
        let mut c = copy("ns", "unserved", &["fd00::9", "fd00::a"]);
        c.metadata.uid = Some("uid-1".into());
        c.metadata.resource_version = Some("42".into());
        let got = plan_namespace(&present(&[]), [&c], &CopySelector::default());
        assert_eq!(
            got.deletions,
            [Deletion {
                namespace: "ns".into(),
                name: "unserved".into(),
                uid: Some("uid-1".into()),
                resource_version: Some("42".into()),
                addresses: vec!["fd00::9".into(), "fd00::a".into()],
            }]
        );
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
        let mut writer = crate::source::kubernetes::StoreWriter::new(
            Arc::clone(&records),
            crate::source::kubernetes::OnWatchError::Unsync,
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
