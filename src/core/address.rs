//! Address normalisation.
//!
//! The control plane writes addresses as strings and the cell's write-back compares them as exact
//! strings. edgegate compares them after normalisation, which only ever finds *more* matches than
//! the write-back does: `fd00:0:0::7` names `fd00::7`, `::ffff:10.0.3.7` names `10.0.3.7`, and
//! `Web.Example.` names `web.example`. It therefore never withdraws a copy the write-back keeps.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
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
        // Most addresses are IPv6 in plain hex groups: parse those directly. The fast path refuses
        // anything else at its first odd byte, and the rest takes the careful route below.
        if let Some(bits) = parse_hex_ipv6(raw.as_bytes()) {
            return Ok(Address::Ip(canonical_ip(IpAddr::V6(Ipv6Addr::from_bits(bits)))));
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

/// Hex digit values; 0xff for every byte that is no hex digit.
const HEX: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

/// An IPv6 address written as hex groups with at most one `::` and no embedded IPv4, as its 128
/// bits, or `None`. It accepts nothing the standard parser refuses (a test and a fuzz target
/// compare them) and is about three times faster, which is what keeps a 100-endpoint decision
/// within its budget: slice addresses are almost all of this form.
pub(crate) fn parse_hex_ipv6(s: &[u8]) -> Option<u128> {
    // "::" is the shortest form, eight groups of four digits and seven colons the longest.
    if s.len() < 2 || s.len() > 39 {
        return None;
    }
    let mut groups = [0u16; 8];
    let mut n = 0;
    // Where `::` stands: the index of the first group after it.
    let mut gap = None;
    let mut i = 0;
    if s[0] == b':' {
        if s[1] != b':' {
            return None;
        }
        if s.len() == 2 {
            return Some(0);
        }
        gap = Some(0);
        i = 2;
    }
    loop {
        let start = i;
        let mut group: u16 = 0;
        while let Some(&b) = s.get(i) {
            let digit = HEX[usize::from(b)];
            if digit > 15 {
                break;
            }
            group = (group << 4) | u16::from(digit);
            i += 1;
        }
        if i == start || i - start > 4 || n == 8 {
            return None;
        }
        groups[n] = group;
        n += 1;
        match s.get(i) {
            None => break,
            Some(b':') => i += 1,
            Some(_) => return None, // a '.' (embedded IPv4) or anything else: not for the fast path
        }
        match s.get(i) {
            None => return None, // a trailing single ':'
            Some(b':') if gap.is_some() => return None,
            Some(b':') => {
                gap = Some(n);
                i += 1;
                if i == s.len() {
                    break;
                }
            }
            Some(_) => {}
        }
    }
    // `::` stands for at least one group; without it there are exactly eight.
    let skipped = match gap {
        Some(_) if n > 7 => return None,
        None if n != 8 => return None,
        Some(_) => 8 - n,
        None => 0,
    };
    let gap = gap.unwrap_or(8);
    let mut bits = 0u128;
    for (k, &group) in groups[..n].iter().enumerate() {
        let position = if k < gap { k } else { k + skipped };
        bits |= u128::from(group) << (112 - 16 * position);
    }
    Some(bits)
}

/// The 128-bit word an IP is matched by: its IPv6 bits, an IPv4 address as its mapped form, so
/// `10.0.3.7` and `::ffff:10.0.3.7` are one key (and no IPv4-compatible `::10.0.3.7` equals it).
pub(crate) fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V6(v6) => v6.to_bits(),
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
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
            let slow = s.parse::<Ipv6Addr>().ok().map(Ipv6Addr::to_bits);
            if fast.is_some() || !s.contains('.') {
                assert_eq!(fast, slow, "the fast path reads {s:?} differently from std");
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
