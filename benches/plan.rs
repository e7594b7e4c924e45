//! The prune plan over 10,000 copies in 1,000 namespaces: a full pass, and a pass over one
//! namespace, which must not grow with the number of other namespaces.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use edgegate::core::fixtures::copy;
use edgegate::core::plan::Scope;
use edgegate::index::copies::{CopyIndex, CopyWriter};
use edgegate::index::prune::plan;
use edgegate::index::source::follow::WatchSink;
use edgegate::{CopySelector, Record, RecordStore};

/// `namespaces` namespaces of 10 copies each; every record names the odd copies' addresses.
fn world(namespaces: usize) -> (RecordStore, Arc<CopyIndex>) {
    let records = RecordStore::new("default");
    let index = Arc::new(CopyIndex::default());
    let mut writer = CopyWriter::new(Arc::clone(&index));
    let mut snapshot = HashMap::new();
    writer.relist_started();
    for ns in 0..namespaces {
        let name = format!("ns-{ns}");
        let mut served = Vec::new();
        for i in 0..10 {
            let address = format!("fd{:02x}:{:x}::{i}", ns % 256, ns / 256);
            writer.listed(copy(&name, &format!("web-{i}"), &[&address]));
            if i % 2 == 1 {
                served.push(address);
            }
        }
        snapshot.insert(name, Arc::new(Record::from_entries(served.iter().map(String::as_str))));
    }
    writer.relist_done();
    records.replace_all(snapshot, 0);
    (records, index)
}

fn plan_benches(c: &mut Criterion) {
    let selector = CopySelector::default();
    let (records, copies) = world(1000);
    assert_eq!(plan(&records, &copies, &selector, &Scope::All).deletions.len(), 5000);
    c.bench_function("plan/full pass, 10,000 copies in 1,000 namespaces", |b| {
        b.iter(|| plan(&records, &copies, &selector, black_box(&Scope::All)).deletions.len())
    });
    let mut group = c.benchmark_group("plan/one namespace of 10 copies");
    for namespaces in [10, 1000, 10_000] {
        let (records, copies) = world(namespaces);
        let scope = Scope::Namespace("ns-7".into());
        group.bench_with_input(BenchmarkId::new("namespaces on the hub", namespaces), &scope, |b, scope| {
            b.iter(|| plan(&records, &copies, &selector, black_box(scope)).deletions.len())
        });
    }
    group.finish();
}

criterion_group!(benches, plan_benches);
criterion_main!(benches);
