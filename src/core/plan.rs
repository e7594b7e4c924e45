//! The prune plan: which published copies to delete, from the records and the copies as cached.
//!
//! A copy is deleted only where the decision would deny it: its namespace has a record, the
//! record is readable, the copy carries addresses and the record names none of them. No record,
//! an unreadable record or an unsynced cache of either kind: nothing. A copy already being deleted
//! (`deletionTimestamp` set) is not deleted again: it is only counted.

use super::decision::{Decision, decide};
use super::record::RecordState;
use super::selector::CopySelector;
use super::slice::Slice;

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::fixtures::{copy, not_copy, terminating};
    use crate::core::record::Record;

    fn present(entries: &[&str]) -> RecordState {
        RecordState::Present(Arc::new(Record::from_entries(entries.iter().copied())))
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.deletions.iter().map(|d| d.name.as_str()).collect()
    }

    /// The plan table, row by row.
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
}
