//! A namespace's record, normalised for matching, and the state a lookup finds it in.

use std::collections::HashSet;
use std::sync::Arc;

use crate::core::address::{Address, AddressError, ip_key, is_spelled_as, parse_hex_ipv6};

/// The name every record carries; records with other names are ignored, as the write-back does.
pub const DEFAULT_RECORD_NAME: &str = "default";

type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;

/// The addresses one EdgeReachability names, normalised.
///
/// Entries that are no address are kept aside: they are reported, and match only a slice address
/// spelled exactly the same (what the write-back's exact-string compare would do), so a bad entry
/// can never turn into a withdrawal.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// IP addresses by their matching key (IPv4 in its mapped form): a slice address is one parse
    /// and one lookup of a 128-bit word.
    ips: FastSet<u128>,
    /// DNS names, lower-cased, without the trailing dot.
    names: FastSet<Box<str>>,
    invalid: Vec<InvalidEntry>,
    /// Valid entries not spelled canonically: what the exact-string comparison of the
    /// ValidatingAdmissionPolicy mode would read differently from the webhook.
    noncanonical: usize,
}

/// A record entry that is no address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidEntry {
    pub entry: String,
    pub error: AddressError,
}

impl Record {
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        let mut record = Record::default();
        for entry in entries {
            let address = match entry.parse::<Address>() {
                Ok(address) => address,
                Err(error) => {
                    record.invalid.push(InvalidEntry { entry: entry.to_owned(), error });
                    continue;
                }
            };
            record.noncanonical += usize::from(!is_spelled_as(entry, &address));
            match address {
                Address::Ip(ip) => {
                    record.ips.insert(ip_key(ip));
                }
                Address::Fqdn(name) => {
                    record.names.insert(name);
                }
            }
        }
        record.ips.shrink_to_fit();
        record.names.shrink_to_fit();
        record
    }

    /// Does the record name this slice address (as written in the slice)?
    pub fn names(&self, slice_address: &str) -> bool {
        // The common case, a plain-hex IPv6 address, skips building an `Address`. A string that
        // parses is never spelled like an invalid entry, so only the fallback consults those.
        if let Some(bits) = parse_hex_ipv6(slice_address.as_bytes()) {
            return self.ips.contains(&bits);
        }
        match slice_address.parse::<Address>() {
            Ok(Address::Ip(ip)) => self.ips.contains(&ip_key(ip)),
            Ok(Address::Fqdn(name)) => self.names.contains(&name),
            Err(_) => self.invalid.iter().any(|i| i.entry == slice_address),
        }
    }

    /// How many distinct valid addresses the record names.
    pub fn len(&self) -> usize {
        self.ips.len() + self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.invalid.is_empty()
    }

    /// Entries skipped for matching because they are no address.
    pub fn invalid(&self) -> &[InvalidEntry] {
        &self.invalid
    }

    /// Valid entries not spelled canonically (see [`crate::core::address::Spelling`]), each
    /// occurrence counted.
    pub fn noncanonical(&self) -> usize {
        self.noncanonical
    }

    /// The union of two records: used where one namespace has two sources of `default` (two
    /// files), since every doubt resolves toward keeping what is published.
    pub fn union(&self, other: &Record) -> Record {
        let mut merged = self.clone();
        merged.ips.extend(other.ips.iter().copied());
        merged.names.extend(other.names.iter().cloned());
        merged.invalid.extend(other.invalid.iter().cloned());
        merged.noncanonical += other.noncanonical;
        merged
    }
}

/// What a lookup of a namespace's record found.
#[derive(Clone, Debug)]
pub enum RecordState {
    /// No record: the control plane has not answered for this namespace. Nothing changes.
    Absent,
    /// The record, possibly empty.
    Present(Arc<Record>),
    /// The record cannot be known now (source not synced, hub unreadable). Nothing changes.
    Unavailable(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_matches_normalised_and_exact_invalid_entries() {
        let record = Record::from_entries(["fd00:10:0::7", "10.0.3.7", "not an address", ""]);
        assert_eq!(record.len(), 2);
        assert_eq!(record.invalid().len(), 2);
        assert!(record.names("fd00:10::7"));
        assert!(record.names("::ffff:10.0.3.7"));
        assert!(!record.names("fd00:10::8"));
        assert!(record.names("not an address"), "exact string as the write-back compares");
        assert!(!record.names("Not An Address"));
        assert_eq!(record.noncanonical(), 1, "fd00:10:0::7; the invalid entries are not counted");
    }

    #[test]
    fn counts_entries_not_spelled_canonically() {
        let entries = ["fd00::1", "FD00::2", "::ffff:10.0.3.7", "10.0.3.8", "Web.Example", "web.example", "x/y"];
        let record = Record::from_entries(entries);
        assert_eq!(record.noncanonical(), 3);
        assert_eq!(record.union(&Record::from_entries(["fd00:0::3"])).noncanonical(), 4);
        assert_eq!(Record::from_entries(["fd00::1", "10.0.3.7", "web.example"]).noncanonical(), 0);
    }
}
