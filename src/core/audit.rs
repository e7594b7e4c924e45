//! The audit: for every namespace, the state of its record and what the webhook would refuse and
//! the pruner would delete right now. The "would delete" list is the pruner's own plan
//! ([`plan_namespace`]); "would refuse" is the webhook's decision for each copy as if it were
//! published again (a CREATE).
//!
//! `--output json` prints [`Report`] as is: its field names are a stable interface.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::decision::{Decision, decide, is_copy};
use super::plan::plan_namespace;
use super::record::{Record, RecordState};
use super::selector::CopySelector;
use super::slice::Slice;

/// The whole audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// One entry per namespace that has a record or a copy, by name.
    pub namespaces: Vec<NamespaceReport>,
    pub summary: Summary,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceReport {
    pub namespace: String,
    pub record: RecordSummary,
    /// Copies in the namespace (by the copy selector).
    pub copies: usize,
    pub copies_without_endpoints: usize,
    /// Copies the webhook would refuse if they were published now.
    pub would_refuse: Vec<Judged>,
    /// Copies the pruner would delete now.
    pub would_delete: Vec<Judged>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSummary {
    /// `absent`, `empty` (no entries at all) or `present`.
    pub state: &'static str,
    /// Valid addresses the record names.
    pub addresses: usize,
    /// Entries that are no address (skipped for matching).
    pub invalid: usize,
}

/// A copy and the addresses none of which the record names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Judged {
    pub name: String,
    pub addresses: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub namespaces: usize,
    pub records: usize,
    pub copies: usize,
    pub would_refuse: usize,
    pub would_delete: usize,
}

/// Audit `copies` (anything the selector does not pick is ignored) against `records`, the
/// namespaces' records by namespace.
pub fn audit(records: &BTreeMap<String, Arc<Record>>, copies: &[Slice], selector: &CopySelector) -> Report {
    let mut by_namespace: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for copy in copies.iter().filter(|c| is_copy(c, selector)) {
        by_namespace.entry(copy.namespace()).or_default().push(copy);
    }
    let namespaces: BTreeSet<&str> = records.keys().map(String::as_str).chain(by_namespace.keys().copied()).collect();
    let mut report = Report::default();
    for ns in namespaces {
        let in_ns = by_namespace.get(ns).map(Vec::as_slice).unwrap_or_default();
        let state = records.get(ns).map_or(RecordState::Absent, |r| RecordState::Present(Arc::clone(r)));
        let would_refuse: Vec<Judged> = in_ns
            .iter()
            .filter_map(|c| match decide(&state, c, selector) {
                Decision::Deny(d) => Some(Judged { name: d.name.to_owned(), addresses: owned(&d.addresses) }),
                _ => None,
            })
            .collect();
        let would_delete: Vec<Judged> = plan_namespace(&state, in_ns.iter().copied(), selector)
            .deletions
            .into_iter()
            .map(|d| Judged { name: d.name, addresses: d.addresses })
            .collect();
        let record = match records.get(ns) {
            None => RecordSummary { state: "absent", addresses: 0, invalid: 0 },
            Some(r) if r.is_empty() && r.invalid().is_empty() => {
                RecordSummary { state: "empty", addresses: 0, invalid: 0 }
            }
            Some(r) => RecordSummary { state: "present", addresses: r.len(), invalid: r.invalid().len() },
        };
        report.summary.copies += in_ns.len();
        report.summary.would_refuse += would_refuse.len();
        report.summary.would_delete += would_delete.len();
        report.namespaces.push(NamespaceReport {
            namespace: ns.to_owned(),
            record,
            copies: in_ns.len(),
            copies_without_endpoints: in_ns.iter().filter(|c| c.addresses().next().is_none()).count(),
            would_refuse,
            would_delete,
        });
    }
    report.summary.namespaces = report.namespaces.len();
    report.summary.records = records.len();
    report
}

fn owned(addresses: &[&str]) -> Vec<String> {
    addresses.iter().map(|a| (*a).to_owned()).collect()
}

impl Report {
    /// The report for a person: a paragraph per namespace, then the summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for ns in &self.namespaces {
            let record = match ns.record.state {
                "present" => {
                    format!("present, {} addresses, {} invalid entries", ns.record.addresses, ns.record.invalid)
                }
                other => other.to_owned(),
            };
            out.push_str(&format!(
                "{}: record {record}; {} copies, {} without endpoints\n",
                ns.namespace, ns.copies, ns.copies_without_endpoints
            ));
            for (what, list) in [("would refuse", &ns.would_refuse), ("would delete", &ns.would_delete)] {
                for judged in list {
                    out.push_str(&format!("  {what} {} ({})\n", judged.name, judged.addresses.join(", ")));
                }
            }
        }
        let s = &self.summary;
        out.push_str(&format!(
            "summary: {} namespaces, {} records, {} copies; the webhook would refuse {}, the pruner would delete {}\n",
            s.namespaces, s.records, s.copies, s.would_refuse, s.would_delete
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::{copy, not_copy, terminating};

    #[test]
    fn audit_table() {
        let records: BTreeMap<String, Arc<Record>> = [
            ("named".to_owned(), Arc::new(Record::from_entries(["fd00::1"]))),
            ("empty".to_owned(), Arc::new(Record::from_entries([]))),
            ("bad".to_owned(), Arc::new(Record::from_entries(["fd00::/64"]))),
        ]
        .into();
        let copies = vec![
            copy("named", "served", &["fd00::1"]),
            copy("named", "unserved", &["fd00::9"]),
            copy("empty", "any", &["fd00::1"]),
            copy("empty", "bare", &[]),
            terminating(copy("empty", "leaving", &["fd00::2"])),
            copy("bad", "x", &["fd00::3"]),
            copy("none", "unrecorded", &["fd00::9"]),
            not_copy("empty", "plain", &["fd00::9"]),
        ];
        let report = audit(&records, &copies, &CopySelector::default());
        let names = |l: &[Judged]| l.iter().map(|j| j.name.clone()).collect::<Vec<_>>();
        let by: BTreeMap<&str, &NamespaceReport> =
            report.namespaces.iter().map(|n| (n.namespace.as_str(), n)).collect();
        assert_eq!(by.keys().copied().collect::<Vec<_>>(), ["bad", "empty", "named", "none"]);
        assert_eq!(by["named"].record, RecordSummary { state: "present", addresses: 1, invalid: 0 });
        assert_eq!(names(&by["named"].would_delete), ["unserved"]);
        assert_eq!(by["empty"].record.state, "empty");
        assert_eq!(names(&by["empty"].would_refuse), ["any", "leaving"]);
        assert_eq!(names(&by["empty"].would_delete), ["any"], "a terminating copy is not deleted again");
        assert_eq!((by["empty"].copies, by["empty"].copies_without_endpoints), (3, 1), "the non-copy is not counted");
        assert_eq!(by["bad"].record, RecordSummary { state: "present", addresses: 0, invalid: 1 });
        assert_eq!(names(&by["bad"].would_delete), ["x"]);
        assert_eq!(by["none"].record.state, "absent");
        assert!(by["none"].would_delete.is_empty() && by["none"].would_refuse.is_empty());
        assert_eq!(report.summary, Summary { namespaces: 4, records: 3, copies: 7, would_refuse: 4, would_delete: 3 });
        let text = report.text();
        assert!(
            text.contains("empty: record empty; 3 copies, 1 without endpoints\n  would refuse any (fd00::1)\n"),
            "{text}"
        );
        assert!(text.contains("  would delete unserved (fd00::9)\n"), "{text}");
        assert!(text.ends_with(
            "summary: 4 namespaces, 3 records, 7 copies; the webhook would refuse 4, the pruner would delete 3\n"
        ));
    }
}
