//! The audit: for every namespace, the state of its record and what the webhook would refuse and
//! the pruner would delete right now. The "would delete" list is the pruner's own plan
//! ([`plan_namespace`]); "would refuse" is the webhook's decision for each copy as if it were
//! published again (a CREATE).
//!
//! It also says whether the hub may use the ValidatingAdmissionPolicy mode (`edgegate policy`),
//! whose CEL compares addresses as exact strings: only while every record entry and every copy
//! address is spelled canonically does that find what the webhook's normalised comparison finds.
//!
//! `--output json` prints [`Report`] as is: its field names are a stable interface.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::address::{Spelling, spelling};
use super::decision::{Decision, decide, is_copy};
use super::plan::plan_namespace;
use super::propagation::Propagation;
use super::record::{Record, RecordState};
use super::selector::CopySelector;
use super::slice::Slice;

/// A copy with this many endpoint addresses or more is reported as large: the policy's CEL walks
/// each address and looks it up in the record's list, so its cost grows with both, where the
/// webhook's lookups are hashed. A first estimate, to be replaced by the measured crossover
/// between the two modes.
pub const LARGE_COPY_ADDRESSES: usize = 100;

/// A namespace's record as the audit reads it.
#[derive(Clone, Debug)]
pub struct AuditedRecord {
    /// Its name (`--record-name`), to name it in the spelling list.
    pub name: String,
    /// Normalised, as the webhook and the pruner judge with it.
    pub record: Arc<Record>,
    /// Its entries as written: what the ValidatingAdmissionPolicy mode compares.
    pub entries: Vec<String>,
}

impl AuditedRecord {
    /// The record named `name` with these entries.
    pub fn new(name: impl Into<String>, entries: Vec<String>) -> Self {
        let record = Arc::new(Record::from_entries(entries.iter().map(String::as_str)));
        AuditedRecord { name: name.into(), record, entries }
    }
}

/// The whole audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// One entry per namespace that has a record or a copy, by name.
    pub namespaces: Vec<NamespaceReport>,
    pub summary: Summary,
    /// Which Karmada policies take the copies: only on a hub that serves `policy.karmada.io`, or
    /// offline with `--policies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
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
    /// Record entries and copy addresses that are valid but not spelled canonically.
    pub noncanonical: Vec<Respelled>,
    /// Copies with at least [`LARGE_COPY_ADDRESSES`] endpoint addresses.
    pub large_copies: Vec<LargeCopy>,
}

/// A record entry or copy address the ValidatingAdmissionPolicy mode reads differently from the
/// webhook: a valid address, spelled other than canonically.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Respelled {
    pub namespace: String,
    /// `record` or `copy`.
    pub kind: &'static str,
    /// The record's or the copy's name.
    pub name: String,
    /// As written.
    pub spelled: String,
    /// As the address is spelled canonically (an IPv4-mapped address: the IPv4 address).
    pub canonical: String,
}

/// A copy large enough for CEL's cost to matter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LargeCopy {
    pub name: String,
    /// Its endpoint addresses, counted.
    pub addresses: usize,
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
    pub noncanonical_record_entries: usize,
    pub noncanonical_copy_addresses: usize,
    pub large_copies: usize,
    /// No record entry and no copy address is spelled other than canonically: the
    /// ValidatingAdmissionPolicy mode judges every copy as the webhook does.
    pub vap_mode_safe: bool,
}

/// Audit `copies` (anything the selector does not pick is ignored) against `records`, the
/// namespaces' records by namespace.
pub fn audit(records: &BTreeMap<String, AuditedRecord>, copies: &[Slice], selector: &CopySelector) -> Report {
    let mut by_namespace: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for copy in copies.iter().filter(|c| is_copy(c, selector)) {
        by_namespace.entry(copy.namespace()).or_default().push(copy);
    }
    let namespaces: BTreeSet<&str> = records.keys().map(String::as_str).chain(by_namespace.keys().copied()).collect();
    let mut report = Report::default();
    for ns in namespaces {
        let in_ns = by_namespace.get(ns).map(Vec::as_slice).unwrap_or_default();
        let entry = namespace_report(ns, records.get(ns), in_ns, selector);
        report.summary.add(&entry);
        report.namespaces.push(entry);
    }
    report.summary.namespaces = report.namespaces.len();
    report.summary.records = records.len();
    report.summary.vap_mode_safe =
        report.summary.noncanonical_record_entries == 0 && report.summary.noncanonical_copy_addresses == 0;
    report
}

fn namespace_report(
    ns: &str,
    audited: Option<&AuditedRecord>,
    in_ns: &[&Slice],
    selector: &CopySelector,
) -> NamespaceReport {
    let state = audited.map_or(RecordState::Absent, |a| RecordState::Present(Arc::clone(&a.record)));
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
    let record = match audited.map(|a| &a.record) {
        None => RecordSummary { state: "absent", addresses: 0, invalid: 0 },
        Some(r) if r.is_empty() && r.invalid().is_empty() => RecordSummary { state: "empty", addresses: 0, invalid: 0 },
        Some(r) => RecordSummary { state: "present", addresses: r.len(), invalid: r.invalid().len() },
    };
    NamespaceReport {
        namespace: ns.to_owned(),
        record,
        copies: in_ns.len(),
        copies_without_endpoints: in_ns.iter().filter(|c| c.addresses().next().is_none()).count(),
        would_refuse,
        would_delete,
        noncanonical: respelled(ns, audited, in_ns),
        large_copies: large_copies(in_ns),
    }
}

/// The namespace's record entries, then its copies' addresses, that want another spelling.
fn respelled(ns: &str, audited: Option<&AuditedRecord>, in_ns: &[&Slice]) -> Vec<Respelled> {
    let entries =
        audited.into_iter().flat_map(|a| a.entries.iter().map(move |e| ("record", a.name.as_str(), e.as_str())));
    let addresses = in_ns.iter().flat_map(|c| c.addresses().map(move |a| ("copy", c.name(), a)));
    entries
        .chain(addresses)
        .filter_map(|(kind, name, spelled)| match spelling(spelled) {
            Spelling::Respell(canonical) => Some(Respelled {
                namespace: ns.to_owned(),
                kind,
                name: name.to_owned(),
                spelled: spelled.to_owned(),
                canonical,
            }),
            Spelling::Canonical | Spelling::Invalid => None,
        })
        .collect()
}

fn large_copies(in_ns: &[&Slice]) -> Vec<LargeCopy> {
    in_ns
        .iter()
        .map(|c| LargeCopy { name: c.name().to_owned(), addresses: c.addresses().count() })
        .filter(|c| c.addresses >= LARGE_COPY_ADDRESSES)
        .collect()
}

impl Summary {
    /// Count one namespace in.
    fn add(&mut self, ns: &NamespaceReport) {
        self.copies += ns.copies;
        self.would_refuse += ns.would_refuse.len();
        self.would_delete += ns.would_delete.len();
        let records = ns.noncanonical.iter().filter(|r| r.kind == "record").count();
        self.noncanonical_record_entries += records;
        self.noncanonical_copy_addresses += ns.noncanonical.len() - records;
        self.large_copies += ns.large_copies.len();
    }
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
        out.push_str(&self.policy_text());
        if let Some(propagation) = &self.propagation {
            out.push_str(&propagation.text());
        }
        let s = &self.summary;
        out.push_str(&format!(
            "summary: {} namespaces, {} records, {} copies; the webhook would refuse {}, the pruner would delete {}\n",
            s.namespaces, s.records, s.copies, s.would_refuse, s.would_delete
        ));
        out
    }
}

/// How many respellings the text shows; `--output json` lists them all.
const RESPELLINGS_SHOWN: usize = 10;

impl Report {
    /// Whether the ValidatingAdmissionPolicy mode may be used, a few of the spellings that stand
    /// in its way, and how many copies are large enough for its cost to matter.
    fn policy_text(&self) -> String {
        let s = &self.summary;
        let mut out = String::from("ValidatingAdmissionPolicy mode (components/policy): ");
        if s.vap_mode_safe {
            out.push_str("safe: every record entry and copy address is spelled canonically\n");
        } else {
            out.push_str(&format!(
                "NOT safe: {} record entries and {} copy addresses are not spelled canonically\n",
                s.noncanonical_record_entries, s.noncanonical_copy_addresses
            ));
        }
        let all = self.namespaces.iter().flat_map(|n| &n.noncanonical);
        for r in all.clone().take(RESPELLINGS_SHOWN) {
            out.push_str(&format!(
                "  {} {}/{}: {} (canonical: {})\n",
                r.kind, r.namespace, r.name, r.spelled, r.canonical
            ));
        }
        let more = all.count().saturating_sub(RESPELLINGS_SHOWN);
        if more > 0 {
            out.push_str(&format!("  and {more} more (--output json lists them all)\n"));
        }
        out.push_str(&format!(
            "  {} copies with {LARGE_COPY_ADDRESSES} or more endpoint addresses (CEL's cost grows with them)\n",
            s.large_copies
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fixtures::{copy, not_copy, terminating};

    fn records(by_namespace: &[(&str, &[&str])]) -> BTreeMap<String, AuditedRecord> {
        let audited =
            |entries: &[&str]| AuditedRecord::new("default", entries.iter().map(|e| (*e).to_owned()).collect());
        by_namespace.iter().map(|(ns, entries)| ((*ns).to_owned(), audited(entries))).collect()
    }

    #[test]
    fn audit_table() {
        let records = records(&[("named", &["fd00::1"]), ("empty", &[]), ("bad", &["fd00::/64"])]);
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
        let want = Summary {
            namespaces: 4,
            records: 3,
            copies: 7,
            would_refuse: 4,
            would_delete: 3,
            vap_mode_safe: true,
            ..Summary::default()
        };
        assert_eq!(report.summary, want);
        let text = report.text();
        assert!(
            text.contains("empty: record empty; 3 copies, 1 without endpoints\n  would refuse any (fd00::1)\n"),
            "{text}"
        );
        assert!(text.contains("  would delete unserved (fd00::9)\n"), "{text}");
        let policy = format!(
            "ValidatingAdmissionPolicy mode (components/policy): safe: every record entry and copy address is spelled canonically\n\
             \x20 0 copies with {LARGE_COPY_ADDRESSES} or more endpoint addresses (CEL's cost grows with them)\nsummary: "
        );
        assert!(text.contains(&policy), "{text}");
        assert!(text.ends_with(
            "summary: 4 namespaces, 3 records, 7 copies; the webhook would refuse 4, the pruner would delete 3\n"
        ));
    }

    #[test]
    fn spelling_decides_the_policy_mode() {
        let records =
            records(&[("a", &["FD00::1", "fd00::2", "::ffff:10.0.3.7", "not an address"]), ("b", &["fd00::9"])]);
        let many: Vec<String> = (0..LARGE_COPY_ADDRESSES).map(|i| format!("fd00::1:{i:x}")).collect();
        let copies = vec![
            copy("a", "served", &["fd00::1", "fd00:0::2"]),
            copy("b", "big", &many.iter().map(String::as_str).collect::<Vec<_>>()),
            copy("b", "almost", &many[1..].iter().map(String::as_str).collect::<Vec<_>>()),
            not_copy("b", "plain", &["FD00::9"]),
        ];
        let report = audit(&records, &copies, &CopySelector::default());
        let respelled = |ns: usize| {
            let list = &report.namespaces[ns].noncanonical;
            list.iter().map(|r| (r.kind, r.name.as_str(), r.spelled.as_str(), r.canonical.as_str())).collect::<Vec<_>>()
        };
        assert_eq!(
            respelled(0),
            [
                ("record", "default", "FD00::1", "fd00::1"),
                ("record", "default", "::ffff:10.0.3.7", "10.0.3.7"),
                ("copy", "served", "fd00:0::2", "fd00::2"),
            ]
        );
        assert!(respelled(1).is_empty(), "a slice that is no copy is not counted");
        assert_eq!(
            report.namespaces[1].large_copies,
            [LargeCopy { name: "big".into(), addresses: LARGE_COPY_ADDRESSES }]
        );
        let s = &report.summary;
        assert_eq!((s.noncanonical_record_entries, s.noncanonical_copy_addresses, s.large_copies), (2, 1, 1));
        assert!(!s.vap_mode_safe);
        let text = report.text();
        assert!(
            text.contains(
                "ValidatingAdmissionPolicy mode (components/policy): NOT safe: 2 record entries and 1 copy addresses are not spelled canonically\n\
                 \x20 record a/default: FD00::1 (canonical: fd00::1)\n"
            ),
            "{text}"
        );
        let large =
            format!("  copy a/served: fd00:0::2 (canonical: fd00::2)\n  1 copies with {LARGE_COPY_ADDRESSES} or more");
        assert!(text.contains(&large), "{text}");
        let json = serde_json::to_value(&report).expect("JSON");
        assert_eq!(
            json["namespaces"][0]["noncanonical"][0],
            serde_json::json!({"namespace": "a", "kind": "record", "name": "default", "spelled": "FD00::1", "canonical": "fd00::1"})
        );
        let big = serde_json::json!([{"name": "big", "addresses": LARGE_COPY_ADDRESSES}]);
        assert_eq!(json["namespaces"][1]["largeCopies"], big);
        assert_eq!(json["summary"]["vapModeSafe"], false);
        assert_eq!(json["summary"]["noncanonicalCopyAddresses"], 1);
    }

    #[test]
    fn the_text_shows_ten_respellings() {
        let entries: Vec<String> = (0..13).map(|i| format!("FD00::{i:x}")).collect();
        let records = [("a".to_owned(), AuditedRecord::new("default", entries))].into();
        let text = audit(&records, &[], &CopySelector::default()).text();
        assert_eq!(text.matches("  record a/default: ").count(), 10, "{text}");
        assert!(text.contains("  and 3 more (--output json lists them all)\n"), "{text}");
        assert!(text.ends_with("the pruner would delete 0\n"), "the summary line stays last: {text}");
    }
}
