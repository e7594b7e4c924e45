//! Address normalisation.
//!
//! The control plane writes addresses as strings and the cell's write-back compares them as exact
//! strings. edgegate compares them after normalisation, which only ever finds *more* matches than
//! the write-back does: `fd00:0:0::7` names `fd00::7`, `::ffff:10.0.3.7` names `10.0.3.7`, and
//! `Web.Example.` names `web.example`. It therefore never withdraws a copy the write-back keeps.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// One endpoint address in its canonical form.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Address {
    /// An IPv4 or IPv6 address; IPv4-mapped IPv6 addresses are stored as IPv4.
    Ip(IpAddr),
    /// A DNS name, lower-cased, without a trailing dot.
    Fqdn(Box<str>),
}

/// Hashes an IP as one 128-bit word (IPv4 as its mapped form, which no stored IPv6 can equal
/// since mapped addresses are stored as IPv4): one hasher step instead of a tagged byte array.
impl Hash for Address {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Address::Ip(IpAddr::V6(v6)) => state.write_u128(v6.to_bits()),
            Address::Ip(IpAddr::V4(v4)) => state.write_u128(v4.to_ipv6_mapped().to_bits()),
            Address::Fqdn(name) => name.hash(state),
        }
    }
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
        // Most addresses are IPv6 in plain hex groups: parse those directly. The fast path refuses
        // anything else at its first odd byte, and the rest takes the careful route below.
        if let Some(v6) = parse_hex_ipv6(raw.as_bytes()) {
            return Ok(Address::Ip(canonical_ip(IpAddr::V6(v6))));
        }
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

/// An IPv6 address written as hex groups with at most one `::` and no embedded IPv4, or `None`.
/// It accepts nothing the standard parser refuses (a test compares them); it is about five times
/// faster, which is what keeps a 100-endpoint decision within its budget.
fn parse_hex_ipv6(s: &[u8]) -> Option<Ipv6Addr> {
    let mut head = [0u16; 8];
    let mut tail = [0u16; 8];
    let (mut head_len, mut tail_len) = (0usize, 0usize);
    let mut compressed = false;
    let mut i = 0;
    if s.starts_with(b"::") {
        compressed = true;
        i = 2;
    }
    while i < s.len() {
        let start = i;
        let mut group: u16 = 0;
        while i < s.len() && i - start < 5 {
            let digit = match s[i] {
                b @ b'0'..=b'9' => b - b'0',
                b @ b'a'..=b'f' => b - b'a' + 10,
                b @ b'A'..=b'F' => b - b'A' + 10,
                _ => break,
            };
            group = (group << 4) | u16::from(digit);
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || digits > 4 {
            return None;
        }
        let (groups, len) = if compressed { (&mut tail, &mut tail_len) } else { (&mut head, &mut head_len) };
        if *len == 8 {
            return None;
        }
        groups[*len] = group;
        *len += 1;
        if i == s.len() {
            break;
        }
        if s[i] != b':' {
            return None; // a '.' (embedded IPv4) or anything else: not for the fast path
        }
        i += 1;
        if i < s.len() && s[i] == b':' {
            if compressed {
                return None;
            }
            compressed = true;
            i += 1;
        } else if i == s.len() {
            return None; // a trailing single ':'
        }
    }
    let total = head_len + tail_len;
    if (compressed && total > 7) || (!compressed && total != 8) {
        return None;
    }
    let mut groups = [0u16; 8];
    groups[..head_len].copy_from_slice(&head[..head_len]);
    groups[8 - tail_len..].copy_from_slice(&tail[..tail_len]);
    Some(Ipv6Addr::from(groups))
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

    /// The fast IPv6 path agrees with the standard parser on every string it accepts, over
    /// structured forms and a few hundred thousand pseudo-random strings of the same alphabet.
    #[test]
    fn fast_ipv6_path_agrees_with_std() {
        let known = [
            "::",
            "::1",
            "1::",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1::8",
            "fd20:0:2::1:0:0",
            "FFFF:ffff::",
            "1:2:3:4:5:6:7:8:9",
            "1::2::3",
            ":1::",
            "1:::2",
            "12345::",
            "1:2:3:4::5:6:7:8",
            "::ffff:1.2.3.4",
            "1:",
            ":",
            "",
            "g::",
            "1:2:3:4:5:6:7:8::",
            "::1:2:3:4:5:6:7:8",
            "0000:0000::0000",
            "00000::",
        ];
        let check = |s: &str| {
            let fast = parse_hex_ipv6(s.as_bytes());
            if let Some(fast) = fast {
                assert_eq!(Some(fast), s.parse::<Ipv6Addr>().ok(), "fast path accepted {s:?} differently");
            }
        };
        known.iter().for_each(|s| check(s));
        for s in ["1:2:3:4:5:6:7:8", "::", "fd20::1"] {
            assert!(parse_hex_ipv6(s.as_bytes()).is_some(), "{s} takes the fast path");
        }
        let alphabet = b"0:::1af.F";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300_000 {
            let len = (next() % 24) as usize;
            let s: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char).collect();
            check(&s);
        }
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
