//! The decision against large records: a 100-endpoint slice against one record of 8,192
//! addresses, and against a store holding 1,000,000 addresses over many namespaces.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use edgegate::core::fixtures::copy;
use edgegate::{CopySelector, Record, RecordSource, RecordState, RecordStore, decide};

fn addresses(prefix: u32, n: u32) -> Vec<String> {
    (0..n).map(|i| format!("fd{prefix:02x}:0:2::{:x}:{:x}", i >> 16, i & 0xffff)).collect()
}

fn decide_benches(c: &mut Criterion) {
    c.bench_function("parse/one IPv6 address", |b| {
        b.iter(|| black_box("fd30:0:2::0:63").parse::<edgegate::core::address::Address>().is_ok())
    });
    c.bench_function("parse/one IPv6 address, std", |b| {
        b.iter(|| black_box("fd30:0:2::0:63").parse::<std::net::IpAddr>().is_ok())
    });
    let selector = CopySelector::default();
    let record_entries = addresses(0x20, 8192);
    let record = Arc::new(Record::from_entries(record_entries.iter().map(String::as_str)));
    let state = RecordState::Present(Arc::clone(&record));

    // Worst case: no address named, so all 100 are looked up before the denial.
    let unnamed = addresses(0x30, 100);
    let unnamed_slice = copy("ns", "big", &unnamed.iter().map(String::as_str).collect::<Vec<_>>());
    // Named: the last of the 100 addresses is in the record.
    let mut named = addresses(0x30, 99);
    named.push(record_entries[4096].clone());
    let named_slice = copy("ns", "big", &named.iter().map(String::as_str).collect::<Vec<_>>());

    c.bench_function("decide/100 endpoints vs 8192-address record, none named", |b| {
        b.iter(|| decide(black_box(&state), black_box(&unnamed_slice), &selector))
    });
    c.bench_function("decide/100 endpoints vs 8192-address record, last named", |b| {
        b.iter(|| decide(black_box(&state), black_box(&named_slice), &selector))
    });

    // 1,000,000 addresses: 250 namespaces × 4,000 addresses.
    let store = RecordStore::new("default");
    let mut snapshot = HashMap::new();
    for ns in 0..250u32 {
        let entries = addresses(ns % 256, 4000);
        snapshot.insert(format!("ns-{ns}"), Arc::new(Record::from_entries(entries.iter().map(String::as_str))));
    }
    store.replace_all(snapshot, 0);
    assert_eq!(store.stats().addresses, 1_000_000);
    let in_store = copy("ns-17", "big", &unnamed.iter().map(String::as_str).collect::<Vec<_>>());
    c.bench_function("lookup+decide/100 endpoints vs store of 1M addresses, none named", |b| {
        b.iter(|| {
            let state = store.lookup(black_box("ns-17"));
            decide(&state, black_box(&in_store), &selector).is_allowed()
        })
    });
}

criterion_group!(benches, decide_benches);
criterion_main!(benches);
