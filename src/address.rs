//! Address normalisation.
//!
//! The control plane writes addresses as strings and the cell's write-back compares them as exact
//! strings. edgegate compares them after normalisation, which only ever finds *more* matches than
//! the write-back does: `fd00:0:0::7` names `fd00::7`, `::ffff:10.0.3.7` names `10.0.3.7`, and
//! `Web.Example.` names `web.example`. It therefore never withdraws a copy the write-back keeps.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// One endpoint address in its canonical form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// An IPv4 or IPv6 address; IPv4-mapped IPv6 addresses are stored as IPv4.
    Ip(IpAddr),
    /// A DNS name, lower-cased, without a trailing dot.
    Fqdn(Box<str>),
}

/// Why a string is no address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("empty address")]
    Empty,
    #[error("{0:?} has a prefix length; an address names one host")]
    PrefixLength(String),
    #[error("{0:?} is neither an IP address nor a DNS name")]
    Invalid(String),
}

/// Longest DNS name (RFC 1035), without the trailing dot.
const MAX_FQDN_LEN: usize = 253;
const MAX_LABEL_LEN: usize = 63;

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let s = raw.trim();
        if s.is_empty() {
            return Err(AddressError::Empty);
        }
        if s.contains('/') {
            return Err(AddressError::PrefixLength(raw.to_owned()));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Address::Ip(canonical_ip(ip)));
        }
        parse_fqdn(s).map(Address::Fqdn).ok_or_else(|| AddressError::Invalid(raw.to_owned()))
    }
}

fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// A DNS name as RFC 1123 allows it, lower-cased and without its trailing dot. A name whose last
/// label is all digits is refused: that is a mistyped IPv4 address (`10.0.3.256`), not a host.
fn parse_fqdn(s: &str) -> Option<Box<str>> {
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() || name.len() > MAX_FQDN_LEN {
        return None;
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= MAX_LABEL_LEN
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    let last_label_numeric = name.rsplit('.').next().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    (labels_ok && !last_label_numeric).then(|| name.to_ascii_lowercase().into_boxed_str())
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Ip(ip) => ip.fmt(f),
            Address::Fqdn(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        s.parse::<Address>().map(|a| a.to_string()).unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn normalises_equivalent_spellings() {
        let table = [
            ("fd00:10::7", "fd00:10::7"),
            ("fd00:10:0:0::7", "fd00:10::7"),
            ("FD00:10::7", "fd00:10::7"),
            ("fd20:0:2::1:0:0", "fd20:0:2::1:0:0"),
            ("fd20:0000:0002:0000:0000:0001:0000:0000", "fd20:0:2::1:0:0"),
            ("10.0.3.7", "10.0.3.7"),
            ("::ffff:10.0.3.7", "10.0.3.7"),
            ("::FFFF:a00:307", "10.0.3.7"),
            (" 10.0.3.7 ", "10.0.3.7"),
            ("Web.Example.COM.", "web.example.com"),
            ("web-1.svc", "web-1.svc"),
            ("localhost", "localhost"),
        ];
        for (input, want) in table {
            assert_eq!(canon(input), want, "input {input:?}");
        }
    }

    #[test]
    fn refuses_what_is_no_address() {
        let table = [
            ("", AddressError::Empty),
            ("   ", AddressError::Empty),
            ("10.0.3.0/24", AddressError::PrefixLength("10.0.3.0/24".into())),
            ("fd00::/64", AddressError::PrefixLength("fd00::/64".into())),
            ("10.0.3.256", AddressError::Invalid("10.0.3.256".into())),
            ("fd00::7%eth0", AddressError::Invalid("fd00::7%eth0".into())),
            ("-web.example", AddressError::Invalid("-web.example".into())),
            ("web..example", AddressError::Invalid("web..example".into())),
            ("web_1.example", AddressError::Invalid("web_1.example".into())),
            (".", AddressError::Invalid(".".into())),
            ("fd00:::7", AddressError::Invalid("fd00:::7".into())),
        ];
        for (input, want) in table {
            assert_eq!(input.parse::<Address>(), Err(want), "input {input:?}");
        }
        let long_label = format!("{}.example", "a".repeat(64));
        assert!(long_label.parse::<Address>().is_err());
        let long_name = vec!["abcdefghi"; 26].join(".");
        assert!(long_name.len() > MAX_FQDN_LEN);
        assert!(long_name.parse::<Address>().is_err());
    }

    #[test]
    fn ipv4_and_its_mapped_form_are_one_address() {
        let a: Address = "10.0.3.7".parse().expect("valid");
        let b: Address = "::ffff:10.0.3.7".parse().expect("valid");
        assert_eq!(a, b);
        let c: Address = "::10.0.3.7".parse().expect("valid"); // IPv4-compatible, not mapped
        assert_ne!(a, c);
    }
}
