//! The decision: is this EndpointSlice carried, given its namespace's record?
//!
//! | record state        | copy, ≥1 address named | copy, none named | copy, no address | not a copy |
//! |---------------------|------------------------|------------------|------------------|------------|
//! | absent              | allow                  | allow            | allow            | allow      |
//! | present (or empty)  | allow                  | deny             | allow            | allow      |
//! | unavailable         | error                  | error            | allow            | allow      |
//!
//! An UPDATE is refused only when it adds something to carry ([`decide_update`]): a copy being
//! deleted, or one that was already a copy and gains no address, is allowed whatever the record.
//!
//! Every doubt resolves toward keeping what is published: withdrawing a route for a pod that still
//! serves black-holes live traffic, while a route nothing uses costs one table entry.

use crate::core::record::{Record, RecordState};
use crate::core::selector::CopySelector;
use crate::core::slice::Slice;

/// Why a slice is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed<'a> {
    NotACopy,
    NoAddresses,
    NoRecord,
    /// The record names at least this address of the copy.
    Named(&'a str),
    /// An UPDATE of what already was a copy that carries no address the old object did not: it
    /// publishes nothing new, and refusing it would withdraw nothing.
    NothingNew,
    /// An UPDATE that removes a terminating copy's last finalizer: the copy is deleted with it.
    Gone,
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

/// Decide an UPDATE from `old` (the object as stored) to `slice`. Allowed when the old one already
/// was a copy and the new one carries no address the old one did not (compared after
/// normalisation): that covers a finalizer leaving a terminating copy, which must never be
/// refused or the copy stays published for good. Otherwise judged whole, like a CREATE, so a
/// slice that becomes a copy by gaining the label, or a terminating copy that gains an address
/// (federation carries it until the finalizer leaves), is judged on all its addresses.
pub fn decide_update<'a>(
    state: &'a RecordState,
    old: &Slice,
    slice: &'a Slice,
    selector: &CopySelector,
) -> Decision<'a> {
    if !is_copy(slice, selector) {
        return Decision::Allow(Allowed::NotACopy);
    }
    if is_copy(old, selector) && adds_no_address(old, slice) {
        return Decision::Allow(Allowed::NothingNew);
    }
    if slice.metadata.deletion_timestamp.is_some() && slice.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
        // Its last finalizer leaves: the API server deletes it with this UPDATE, whatever else
        // the UPDATE says, so nothing is carried.
        return Decision::Allow(Allowed::Gone);
    }
    decide(state, slice, selector)
}

/// Does `new` carry only addresses that `old` carried, after normalisation?
fn adds_no_address(old: &Slice, new: &Slice) -> bool {
    // Mostly the same strings: only a new spelling pays for normalising the old addresses.
    if new.addresses().all(|a| old.addresses().any(|o| o == a)) {
        return true;
    }
    let carried = Record::from_entries(old.addresses());
    new.addresses().all(|a| carried.names(a))
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
    use crate::core::fixtures::{copy, not_copy, terminating};

    fn present(entries: &[&str]) -> RecordState {
        RecordState::Present(Arc::new(Record::from_entries(entries.iter().copied())))
    }

    fn unavailable() -> RecordState {
        RecordState::Unavailable("record source not synced".into())
    }

    /// The decision table, row by row.
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

    /// UPDATEs: refused only when they add something to carry.
    #[test]
    fn update_table() {
        let sel = CopySelector::default();
        let unnamed = present(&["fd00:10::1"]);
        let copy_9 = copy("proj-a", "web", &["fd00:10::9"]);
        let copy_9_relabelled = {
            let mut c = copy_9.clone();
            c.metadata.labels.get_or_insert_default().insert("karmada.io/managed".into(), "true".into());
            c
        };
        let copy_9_respelled = copy("proj-a", "web", &["FD00:10:0::9"]);
        let copy_9_a = copy("proj-a", "web", &["fd00:10::9", "fd00:10::a"]);
        let copy_none = copy("proj-a", "web", &[]);
        let not_copy_9 = not_copy("proj-a", "web", &["fd00:10::9"]);
        let not_copy_1 = not_copy("proj-a", "web", &["fd00:10::1"]);
        let copy_1 = copy("proj-a", "web", &["fd00:10::1"]);
        let copy_9_1 = copy("proj-a", "web", &["fd00:10::9", "fd00:10::1"]);
        let leaving = terminating(copy_9.clone());
        let leaving_9_a = terminating(copy_9_a.clone());
        let with_finalizer = |mut s: Slice| {
            s.metadata.finalizers = Some(vec!["example.com/propagation".into()]);
            s
        };
        let (held, held_9_a) = (with_finalizer(leaving.clone()), with_finalizer(leaving_9_a.clone()));
        let unreadable = unavailable();
        let deny =
            |s: &'static str| move |d: &Decision| matches!(d, Decision::Deny(denial) if denial.addresses.contains(&s));
        let allowed = |why: Allowed<'static>| move |d: &Decision| *d == Decision::Allow(why.clone());
        type Check = Box<dyn Fn(&Decision) -> bool>;
        let rows: Vec<(&str, &RecordState, &Slice, &Slice, Check)> = vec![
            (
                "terminating copy, record names none",
                &unnamed,
                &copy_9,
                &leaving,
                Box::new(allowed(Allowed::NothingNew)),
            ),
            (
                "terminating copy, no record",
                &RecordState::Absent,
                &copy_9,
                &leaving,
                Box::new(allowed(Allowed::NothingNew)),
            ),
            (
                "terminating copy gains an unnamed address, a finalizer stays",
                &unnamed,
                &held,
                &held_9_a,
                Box::new(deny("fd00:10::a")),
            ),
            (
                "its last finalizer leaves, in an UPDATE that also adds an address",
                &unnamed,
                &held,
                &leaving_9_a,
                Box::new(allowed(Allowed::Gone)),
            ),
            (
                "metadata-only update of an unnamed copy",
                &unnamed,
                &copy_9,
                &copy_9_relabelled,
                Box::new(allowed(Allowed::NothingNew)),
            ),
            (
                "same address, another spelling",
                &unnamed,
                &copy_9,
                &copy_9_respelled,
                Box::new(allowed(Allowed::NothingNew)),
            ),
            ("endpoints removed", &unnamed, &copy_9_a, &copy_9, Box::new(allowed(Allowed::NothingNew))),
            ("copy emptied", &unnamed, &copy_9, &copy_none, Box::new(allowed(Allowed::NothingNew))),
            ("adds an unnamed address to an unnamed copy", &unnamed, &copy_9, &copy_9_a, Box::new(deny("fd00:10::a"))),
            ("gains the copy label, nothing named", &unnamed, &not_copy_9, &copy_9, Box::new(deny("fd00:10::9"))),
            (
                "gains the copy label, named",
                &unnamed,
                &not_copy_1,
                &copy_1,
                Box::new(allowed(Allowed::Named("fd00:10::1"))),
            ),
            ("adds a named address", &unnamed, &copy_9, &copy_9_1, Box::new(allowed(Allowed::Named("fd00:10::1")))),
            (
                "adds an address, record unavailable",
                &unreadable,
                &copy_9,
                &copy_9_a,
                Box::new(|d: &Decision| matches!(d, Decision::Unavailable(_))),
            ),
            (
                "adds an address, no record",
                &RecordState::Absent,
                &copy_9,
                &copy_9_a,
                Box::new(allowed(Allowed::NoRecord)),
            ),
            ("loses the copy label", &unnamed, &copy_9, &not_copy_9, Box::new(allowed(Allowed::NotACopy))),
        ];
        for (row, state, old, new, check) in rows {
            let got = decide_update(state, old, new, &sel);
            assert!(check(&got), "row: {row}: got {got:?}");
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
