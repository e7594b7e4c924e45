//! The producer's write plan for one hub namespace: from what its answer serves, the record as
//! last read, what the record keeps for another writer and what served while nothing could be
//! written, which addresses the answer lacks (to be held for `--withdraw-after`), and, once the
//! holds are known, what the record should say, or that it is right as it is. A record that
//! names too few addresses withdraws pods that serve; one that names too many costs a table
//! entry: so the answer always fits first, then what is kept for another writer, then what is
//! held, as many as fit.
//!
//! Pure: values in, values out; the holds' clock is [`crate::core::hold`]'s.

use std::collections::{BTreeSet, HashSet};

use crate::core::crd::MAX_RECORD_ADDRESSES;

/// The addresses the record names, or that `recent`ly served unwritten, which neither the answer
/// (`serves`) nor the other writer's `kept` ones include: the withdrawals to hold, in order.
pub fn lacking(current: Option<&[String]>, recent: &[String], serves: &[String], kept: &[String]) -> Vec<String> {
    let beside: HashSet<&str> = serves.iter().chain(kept).map(String::as_str).collect();
    let named: BTreeSet<&String> = current.unwrap_or_default().iter().chain(recent).collect();
    named.into_iter().filter(|a| !beside.contains(a.as_str())).cloned().collect()
}

/// What to do with the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// It says what it should: nothing to write.
    Unchanged,
    /// The answer alone is more than a record holds: the record is left as it is.
    Oversized(usize),
    /// These addresses, sorted.
    Addresses(Vec<String>),
}

/// The record as it should be: the answer, then `kept` and `held` addresses as many as fit
/// beside it (an addition must not wait for a withdrawal), sorted; compared with `current`.
pub fn plan(serves: &[String], current: Option<&[String]>, kept: &[String], held: &[String]) -> Write {
    if serves.len() > MAX_RECORD_ADDRESSES {
        return Write::Oversized(serves.len());
    }
    let room = MAX_RECORD_ADDRESSES - serves.len();
    let mut addresses = serves.to_vec();
    addresses.extend(kept.iter().chain(held).filter(|a| !serves.contains(a)).take(room).cloned());
    addresses.sort_unstable();
    addresses.dedup();
    if current == Some(addresses.as_slice()) { Write::Unchanged } else { Write::Addresses(addresses) }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Addresses<'a> = &'a [&'a str];

    fn list(addresses: &[&str]) -> Vec<String> {
        addresses.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn what_the_answer_lacks_is_held_and_nothing_else() {
        // (record, recently served unwritten, answer, kept for another writer) → lacking
        let rows: [(Option<Addresses>, Addresses, Addresses, Addresses, Addresses); 6] = [
            (None, &[], &["a"], &[], &[]),
            (Some(&["a"]), &[], &["a"], &[], &[]),
            (Some(&["a", "b"]), &[], &["a"], &[], &["b"]),
            (Some(&["a", "b"]), &[], &["a"], &["b"], &[]),
            (Some(&["a"]), &["c"], &["a"], &[], &["c"]),
            (None, &["c", "c"], &[], &[], &["c"]),
        ];
        for (current, recent, serves, kept, expected) in rows {
            let current = current.map(list);
            let got = lacking(current.as_deref(), &list(recent), &list(serves), &list(kept));
            assert_eq!(got, list(expected), "{current:?} {recent:?} {serves:?} {kept:?}");
        }
    }

    #[test]
    fn the_record_is_the_answer_then_what_is_kept_then_what_is_held() {
        // (answer, record, kept, held) → write
        let rows: [(Addresses, Option<Addresses>, Addresses, Addresses, Write); 6] = [
            (&["b", "a"], None, &[], &[], Write::Addresses(list(&["a", "b"]))),
            (&["a", "b"], Some(&["a", "b"]), &[], &[], Write::Unchanged),
            (&["a"], Some(&["a", "b"]), &[], &["b"], Write::Unchanged),
            (&["a"], Some(&["a", "b"]), &[], &[], Write::Addresses(list(&["a"]))),
            (&["a"], Some(&["a"]), &["k"], &["h"], Write::Addresses(list(&["a", "h", "k"]))),
            (&["a"], Some(&["a"]), &["a"], &["a"], Write::Unchanged),
        ];
        for (serves, current, kept, held, expected) in rows {
            let current = current.map(list);
            let got = plan(&list(serves), current.as_deref(), &list(kept), &list(held));
            assert_eq!(got, expected, "{serves:?} {current:?} {kept:?} {held:?}");
        }
    }

    #[test]
    fn an_answer_that_fits_is_written_with_as_many_kept_and_held_as_fit() {
        let serves: Vec<String> = (0..MAX_RECORD_ADDRESSES - 1).map(|i| format!("fd00::{i:x}")).collect();
        let Write::Addresses(written) = plan(&serves, None, &list(&["k1", "k2"]), &list(&["h"])) else {
            panic!("fits: written")
        };
        assert_eq!(written.len(), MAX_RECORD_ADDRESSES);
        assert!(written.contains(&"k1".to_owned()) && !written.contains(&"h".to_owned()), "kept first");
        let over: Vec<String> = (0..=MAX_RECORD_ADDRESSES).map(|i| format!("fd00::{i:x}")).collect();
        assert_eq!(plan(&over, None, &[], &[]), Write::Oversized(MAX_RECORD_ADDRESSES + 1));
    }
}
