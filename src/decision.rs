//! The decision: is this EndpointSlice carried, given its namespace's record?
//!
//! | record state        | copy, ≥1 address named | copy, none named | copy, no address | not a copy |
//! |---------------------|------------------------|------------------|------------------|------------|
//! | absent              | allow                  | allow            | allow            | allow      |
//! | present (or empty)  | allow                  | deny             | allow            | allow      |
//! | unavailable         | error                  | error            | allow            | allow      |
//!
//! Every doubt resolves toward keeping what is published: withdrawing a route for a pod that still
//! serves black-holes live traffic, while a route nothing uses costs one table entry.

use crate::record::RecordState;
use crate::selector::CopySelector;
use crate::slice::Slice;

/// Why a slice is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed<'a> {
    NotACopy,
    NoAddresses,
    NoRecord,
    /// The record names at least this address of the copy.
    Named(&'a str),
}

/// The outcome for one slice; it borrows from the slice, so deciding allocates nothing but the
/// list of a denial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<'a> {
    Allow(Allowed<'a>),
    /// A copy none of whose addresses the record names.
    Deny(Denial<'a>),
    /// The record cannot be read now; admit nothing new, withdraw nothing.
    Unavailable(&'a str),
}

/// A copy the record names none of the addresses of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The copy's addresses, as the slice spells them, each once, in slice order.
    pub addresses: Vec<&'a str>,
}

/// How many addresses a denial message lists; the API server shows it to a person.
const MESSAGE_ADDRESSES: usize = 10;

impl Denial<'_> {
    pub fn message(&self) -> String {
        let shown = &self.addresses[..self.addresses.len().min(MESSAGE_ADDRESSES)];
        let more = self.addresses.len() - shown.len();
        let more = if more > 0 { format!(", and {more} more") } else { String::new() };
        format!(
            "EndpointSlice {ns}/{name} is not carried: EdgeReachability in {ns} names none of its addresses ({addrs}{more})",
            ns = self.namespace,
            name = self.name,
            addrs = shown.join(", "),
        )
    }
}

impl Decision<'_> {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }

    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Decision::Allow(_) => "allow",
            Decision::Deny(_) => "deny",
            Decision::Unavailable(_) => "error",
        }
    }
}

/// Is this slice a copy, by the selector?
pub fn is_copy(slice: &Slice, selector: &CopySelector) -> bool {
    selector.matches(slice.metadata.labels.as_ref())
}

/// Decide whether `slice` is carried under `state`, the record of the slice's namespace.
pub fn decide<'a>(state: &'a RecordState, slice: &'a Slice, selector: &CopySelector) -> Decision<'a> {
    if !is_copy(slice, selector) {
        return Decision::Allow(Allowed::NotACopy);
    }
    if slice.addresses().next().is_none() {
        return Decision::Allow(Allowed::NoAddresses);
    }
    let record = match state {
        RecordState::Absent => return Decision::Allow(Allowed::NoRecord),
        RecordState::Unavailable(reason) => return Decision::Unavailable(reason),
        RecordState::Present(record) => record,
    };
    if let Some(named) = slice.addresses().find(|a| record.names(a)) {
        return Decision::Allow(Allowed::Named(named));
    }
    Decision::Deny(Denial { namespace: slice.namespace(), name: slice.name(), addresses: unique(slice.addresses()) })
}

/// Each address once, in first-seen order.
fn unique<'a>(addresses: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut all: Vec<&str> = addresses.collect();
    if all.len() <= 16 {
        let mut kept = 0;
        for i in 0..all.len() {
            if !all[..kept].contains(&all[i]) {
                all[kept] = all[i];
                kept += 1;
            }
        }
        all.truncate(kept);
        return all;
    }
    let mut seen =
        std::collections::HashSet::with_capacity_and_hasher(all.len(), foldhash::fast::RandomState::default());
    all.retain(|a| seen.insert(*a));
    all
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fixtures::{copy, not_copy};
    use crate::record::Record;

    fn present(entries: &[&str]) -> RecordState {
        RecordState::Present(Arc::new(Record::from_entries(entries.iter().copied())))
    }

    fn unavailable() -> RecordState {
        RecordState::Unavailable("record source not synced".into())
    }

    /// The decision table of DESIGN.md, row by row.
    #[test]
    fn decision_table() {
        let sel = CopySelector::default();
        let served = copy("proj-a", "web-1", &["fd00:10::7"]);
        let unserved = copy("proj-a", "web-2", &["fd00:10::9", "fd00:10::a"]);
        let empty = copy("proj-a", "web-3", &[]);
        let other = not_copy("proj-a", "kube-svc", &["fd00:10::9"]);
        fn deny<'a>(s: &'a Slice, addrs: &[&'a str]) -> Decision<'a> {
            Decision::Deny(Denial { namespace: "proj-a", name: s.name(), addresses: addrs.to_vec() })
        }
        let named = |a: &'static str| Decision::Allow(Allowed::Named(a));
        let rows: Vec<(&str, RecordState, &Slice, Decision)> = vec![
            ("absent, named", RecordState::Absent, &served, Decision::Allow(Allowed::NoRecord)),
            ("absent, unnamed", RecordState::Absent, &unserved, Decision::Allow(Allowed::NoRecord)),
            ("absent, no addresses", RecordState::Absent, &empty, Decision::Allow(Allowed::NoAddresses)),
            ("absent, not a copy", RecordState::Absent, &other, Decision::Allow(Allowed::NotACopy)),
            ("present, named", present(&["fd00:10::7"]), &served, named("fd00:10::7")),
            ("present, named in another spelling", present(&["FD00:10:0:0::7"]), &served, named("fd00:10::7")),
            ("present, one of two named", present(&["fd00:10::a"]), &unserved, named("fd00:10::a")),
            ("present, unnamed", present(&["fd00:10::7"]), &unserved, deny(&unserved, &["fd00:10::9", "fd00:10::a"])),
            ("empty record, unnamed", present(&[]), &unserved, deny(&unserved, &["fd00:10::9", "fd00:10::a"])),
            ("empty record, named elsewhere", present(&[]), &served, deny(&served, &["fd00:10::7"])),
            ("invalid entries only", present(&["fd00:10::/64", "bogus!"]), &served, deny(&served, &["fd00:10::7"])),
            ("present, no addresses", present(&[]), &empty, Decision::Allow(Allowed::NoAddresses)),
            ("present, not a copy", present(&[]), &other, Decision::Allow(Allowed::NotACopy)),
            ("unavailable, named", unavailable(), &served, Decision::Unavailable("record source not synced")),
            ("unavailable, unnamed", unavailable(), &unserved, Decision::Unavailable("record source not synced")),
            ("unavailable, no addresses", unavailable(), &empty, Decision::Allow(Allowed::NoAddresses)),
            ("unavailable, not a copy", unavailable(), &other, Decision::Allow(Allowed::NotACopy)),
        ];
        for (row, state, slice, want) in rows {
            assert_eq!(decide(&state, slice, &sel), want, "row: {row}");
        }
    }

    #[test]
    fn denial_message_names_namespace_and_addresses() {
        let slice = copy("proj-a", "web-7f9c", &["fd00:10::9", "fd00:10::a", "fd00:10::9"]);
        let empty = present(&[]);
        let Decision::Deny(denial) = decide(&empty, &slice, &CopySelector::default()) else {
            panic!("expected a denial");
        };
        assert_eq!(
            denial.message(),
            "EndpointSlice proj-a/web-7f9c is not carried: EdgeReachability in proj-a names none of its addresses (fd00:10::9, fd00:10::a)"
        );
    }

    #[test]
    fn long_denials_list_ten_addresses() {
        let many: Vec<String> = (0..25).map(|i| format!("fd00::{i:x}")).collect();
        let slice = copy("p", "big", &many.iter().map(String::as_str).collect::<Vec<_>>());
        let empty = present(&[]);
        let Decision::Deny(denial) = decide(&empty, &slice, &CopySelector::default()) else { panic!("denied") };
        assert_eq!(denial.addresses.len(), 25);
        assert!(denial.message().ends_with(
            "(fd00::0, fd00::1, fd00::2, fd00::3, fd00::4, fd00::5, fd00::6, fd00::7, fd00::8, fd00::9, and 15 more)"
        ));
    }

    #[test]
    fn handles_ipv4_fqdn_and_many_endpoints() {
        let sel = CopySelector::default();
        let v4 = copy("p", "v4", &["10.0.3.7", "10.0.3.8"]);
        assert!(decide(&present(&["::ffff:10.0.3.8"]), &v4, &sel).is_allowed());
        let fqdn = copy("p", "fqdn", &["web.example.com"]);
        assert!(decide(&present(&["WEB.example.com."]), &fqdn, &sel).is_allowed());
        assert!(!decide(&present(&["api.example.com"]), &fqdn, &sel).is_allowed());
        let many: Vec<String> = (0..1000).map(|i| format!("fd00:10::{i:x}")).collect();
        let many_refs: Vec<&str> = many.iter().map(String::as_str).collect();
        let big = copy("p", "big", &many_refs);
        assert!(decide(&present(&["fd00:10::3e7"]), &big, &sel).is_allowed());
        assert!(!decide(&present(&["fd00:10::3e8"]), &big, &sel).is_allowed());
    }
}
