//! Decode + decide + encode of a typical VPC copy review, the whole path behind `/validate` short
//! of HTTP and TLS.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use edgegate::{Record, RecordStore};
use edgegate_webhook::admission::{Admission, Endpoint};
use edgegate_webhook::args::Mode;
use edgegate_webhook::metrics::Metrics;

const NS: &str = "ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10";

fn review(c: &mut Criterion) {
    let body =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/copy-create.json")).expect("fixture");
    let store = Arc::new(RecordStore::new("default"));
    store.replace_all(Default::default(), 0);
    let admission = Admission {
        source: store.clone(),
        selector: Default::default(),
        mode: Mode::Deny,
        metrics: Arc::new(Metrics::new()),
    };
    // The floor under any serde decode of this body: tokenising it, building nothing.
    c.bench_function("review/tokenise only (serde IgnoredAny)", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)).expect("json"))
    });
    store.upsert(NS, Record::from_entries(["fd20:0:2::1:0:0"]));
    c.bench_function("review/typical copy, allowed", |b| {
        b.iter(|| {
            let review = admission.review(black_box(&body), Endpoint::Validate).expect("answers");
            black_box(serde_json::to_vec(&review).expect("encodes"))
        })
    });
    store.upsert(NS, Record::from_entries(["fd20:0:2::1:0:9"]));
    c.bench_function("review/typical copy, denied", |b| {
        b.iter(|| {
            let review = admission.review(black_box(&body), Endpoint::Validate).expect("answers");
            black_box(serde_json::to_vec(&review).expect("encodes"))
        })
    });
}

criterion_group!(benches, review);
criterion_main!(benches);
