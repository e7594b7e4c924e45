//! Entry points the fuzz targets (fuzz/) and the corpus replay test share: each takes arbitrary
//! bytes and must neither panic nor hang, and checks what it can about its result.

use std::path::Path;
use std::str::FromStr;

use crate::core::address::Address;

/// Record file parsing, as YAML and as JSON.
pub fn record_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for name in ["fuzz.yaml", "fuzz.json"] {
        if let Ok(records) = crate::index::source::files::parse_file(Path::new(name), &text) {
            for r in &records {
                let record = crate::index::source::record_of(r);
                assert!(record.len() <= r.entries().len());
            }
        }
    }
}

/// Address normalisation: an accepted IP is the address the standard parser reads, and its
/// canonical text parses back to itself.
pub fn address(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(address) = Address::from_str(text) else { return };
    let again = Address::from_str(&address.to_string()).unwrap_or_else(|e| panic!("{address} does not reparse: {e}"));
    assert_eq!(address, again, "canonical form of {text:?} is stable");
    if let (Address::Ip(ip), Ok(std_ip)) = (&address, text.trim().parse::<std::net::IpAddr>()) {
        let std_ip = match std_ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(std_ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        assert_eq!(*ip, std_ip, "{text:?}");
    }
}
