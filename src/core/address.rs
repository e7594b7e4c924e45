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

/// How an entry is spelled, for comparisons that take strings as they are: the
/// ValidatingAdmissionPolicy mode (`edgegate policy`), where CEL compares a copy's addresses with
/// its record's entries exactly, finds what the webhook's normalised comparison finds only while
/// both sides are spelled canonically ([`Spelling::Canonical`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// Spelled exactly as the [`Address`] displays: an IP in RFC 5952 form (lower case, zeros
    /// compressed), an IPv4 address dotted (never IPv4-mapped IPv6, which the webhook reads as
    /// the IPv4 address), a DNS name in lower case without its trailing dot.
    Canonical,
    /// A valid address spelled otherwise, with its canonical spelling.
    Respell(String),
    /// No address at all. Not a spelling problem: the webhook matches such an entry only as the
    /// exact string, as CEL does, so both modes agree on it; it is reported as invalid instead.
    Invalid,
}

/// How `entry` is spelled; allocates only for a valid entry spelled otherwise (its canonical
/// spelling).
pub fn spelling(entry: &str) -> Spelling {
    match entry.parse::<Address>() {
        Ok(address) if is_spelled_as(entry, &address) => Spelling::Canonical,
        Ok(address) => Spelling::Respell(address.to_string()),
        Err(_) => Spelling::Invalid,
    }
}

/// Is `entry` a valid address spelled other than canonically? Allocates nothing.
pub fn is_noncanonical(entry: &str) -> bool {
    entry.parse::<Address>().is_ok_and(|address| !is_spelled_as(entry, &address))
}

/// Is `raw` (which parsed as `address`) spelled exactly as `address` displays? Nothing is
/// allocated: a record of a million entries is checked as it is built.
pub(crate) fn is_spelled_as(raw: &str, address: &Address) -> bool {
    match address {
        Address::Fqdn(name) => raw == &**name,
        Address::Ip(ip) => ip_spelled_as(raw.as_bytes(), *ip),
    }
}

/// Is `raw` exactly what `Display` writes for `ip`? Walked once against the address, nothing
/// written: comparing with std's `Display` (a test checks they agree) made building a record of
/// 1M IPv6 entries half as slow again; this is within the noise for IPv6, about a quarter for IPv4.
fn ip_spelled_as(raw: &[u8], ip: IpAddr) -> bool {
    let mut rest = Rest(raw);
    let same = match ip {
        IpAddr::V4(v4) => rest.dotted(v4.octets()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => rest.eat(b"::ffff:") && rest.dotted(v4.octets()),
            None => rest.rfc5952(v6.segments()),
        },
    };
    same && rest.0.is_empty()
}

/// What is left of a spelling being checked. Byte by byte: three times faster than comparing
/// the digits of a group or an octet as a slice.
struct Rest<'a>(&'a [u8]);

impl Rest<'_> {
    /// Is the next byte `expected`? If so it is consumed.
    fn byte(&mut self, expected: u8) -> bool {
        match self.0.split_first() {
            Some((&first, rest)) if first == expected => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    /// Does the rest start with `bytes`? If so they are consumed.
    fn eat(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.byte(b))
    }

    /// Lower-case hex groups without leading zeros, the first longest run of two or more zero
    /// groups written `::` (RFC 5952).
    fn rfc5952(&mut self, groups: [u16; 8]) -> bool {
        let (gap, gap_len) = longest_zero_run(groups);
        let mut i = 0;
        while i < groups.len() {
            if i == gap {
                if !self.eat(b"::") {
                    return false;
                }
                i += gap_len;
                continue;
            }
            let colon_first = i > 0 && i != gap + gap_len;
            if (colon_first && !self.byte(b':')) || !self.hex(groups[i]) {
                return false;
            }
            i += 1;
        }
        true
    }

    fn hex(&mut self, group: u16) -> bool {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let digit = |shift: u16| DIGITS[usize::from((group >> shift) & 0xf)];
        (group < 0x1000 || self.byte(digit(12)))
            && (group < 0x100 || self.byte(digit(8)))
            && (group < 0x10 || self.byte(digit(4)))
            && self.byte(digit(0))
    }

    fn dotted(&mut self, octets: [u8; 4]) -> bool {
        for (i, octet) in octets.into_iter().enumerate() {
            if (i > 0 && !self.byte(b'.')) || !self.decimal(octet) {
                return false;
            }
        }
        true
    }

    fn decimal(&mut self, octet: u8) -> bool {
        (octet < 100 || self.byte(b'0' + octet / 100))
            && (octet < 10 || self.byte(b'0' + octet / 10 % 10))
            && self.byte(b'0' + octet % 10)
    }
}

/// Where the first longest run of two or more zero groups starts, and its length; `(8, 0)` when
/// there is none.
fn longest_zero_run(groups: [u16; 8]) -> (usize, usize) {
    let (mut start, mut len, mut run) = (8, 0, 0);
    for (i, &group) in groups.iter().enumerate() {
        run = if group == 0 { run + 1 } else { 0 };
        if run > len {
            (start, len) = (i + 1 - run, run);
        }
    }
    if len < 2 { (8, 0) } else { (start, len) }
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
    fn spelling_table() {
        let respell = |s: &str| Spelling::Respell(s.to_owned());
        let table = [
            ("fd20:0:2::1:0:0", Spelling::Canonical),
            ("fd00:10::7", Spelling::Canonical),
            ("::", Spelling::Canonical),
            ("::1", Spelling::Canonical),
            ("1::", Spelling::Canonical),
            ("fd20:0:2:0:1::", Spelling::Canonical),
            ("1:0:0:2::", Spelling::Canonical), // the first of two longest runs is compressed
            ("1:0:2:3:4:5:6:7", Spelling::Canonical), // a single zero group is not compressed
            ("::102:304", Spelling::Canonical), // IPv4-compatible, not mapped: plain IPv6
            ("10.0.3.7", Spelling::Canonical),
            ("0.0.0.0", Spelling::Canonical),
            ("255.255.255.255", Spelling::Canonical),
            ("web.example.com", Spelling::Canonical),
            ("web-1.svc", Spelling::Canonical),
            ("FD20::1", respell("fd20::1")),
            ("fd20:0:0::1", respell("fd20::1")),
            ("fd20:0000::1", respell("fd20::1")),
            ("fd20:0:2:0:0:1:0:0", respell("fd20:0:2::1:0:0")),
            ("fd20:0:2::1:0:0:0", respell("fd20:0:2:0:1::")),
            ("1::2:3:4:5:6:7", respell("1:0:2:3:4:5:6:7")),
            ("0:0:0:0:0:0:0:0", respell("::")),
            ("0fd2::1", respell("fd2::1")),
            ("::ffff:10.0.3.7", respell("10.0.3.7")),
            ("::ffff:a00:307", respell("10.0.3.7")),
            ("::1.2.3.4", respell("::102:304")),
            (" 10.0.3.7", respell("10.0.3.7")),
            ("fd20::1 ", respell("fd20::1")),
            ("Web.Example.com", respell("web.example.com")),
            ("web.example.com.", respell("web.example.com")),
            ("", Spelling::Invalid),
            ("10.0.3.0/24", Spelling::Invalid),
            ("10.0.3.256", Spelling::Invalid),
            ("010.0.3.7", Spelling::Invalid),
            ("not an address", Spelling::Invalid),
        ];
        for (entry, want) in table {
            assert_eq!(spelling(entry), want, "entry {entry:?}");
            assert_eq!(is_noncanonical(entry), matches!(want, Spelling::Respell(_)), "entry {entry:?}");
            if let Spelling::Respell(canonical) = &want {
                assert_eq!(spelling(canonical), Spelling::Canonical, "{canonical:?} is its own canonical spelling");
            }
        }
    }

    /// The one-pass check accepts exactly what `Display` writes: random groups, with zero runs
    /// of every length and place, every kind of IPv4, and their mapped forms; and refuses another
    /// address's spelling and the upper-case one.
    #[test]
    fn spelled_as_agrees_with_display() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut previous = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        for _ in 0..200_000 {
            let r = next();
            let groups: [u16; 8] = std::array::from_fn(|i| match (r >> (4 * i)) & 3 {
                0 | 1 => 0,
                2 => (r >> (32 + 2 * i)) as u16 & 0xf,
                _ => (next() & 0xffff) as u16,
            });
            let v4 = std::net::Ipv4Addr::from_bits((next() >> (next() % 32)) as u32);
            for ip in [IpAddr::V6(Ipv6Addr::from(groups)), IpAddr::V4(v4), IpAddr::V6(v4.to_ipv6_mapped())] {
                let shown = ip.to_string();
                assert!(ip_spelled_as(shown.as_bytes(), ip), "{shown}");
                assert_eq!(ip_spelled_as(previous.to_string().as_bytes(), ip), previous == ip, "{previous} as {shown}");
                let upper = shown.to_ascii_uppercase();
                assert_eq!(ip_spelled_as(upper.as_bytes(), ip), upper == shown, "{upper}");
                previous = ip;
            }
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
