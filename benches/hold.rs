//! One namespace's observation of its held withdrawals among 10 to 10,000 namespaces that hold
//! some too: keyed by namespace, its cost must not grow with the others (a mass withdrawal over N
//! namespaces is N such observations). `src/core/hold.rs`'s test asserts the same, with bounds.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use edgegate::core::hold::Hold;
use edgegate::core::plan::Scope;

fn hold_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("hold_one_namespace");
    for namespaces in [10usize, 100, 1_000, 10_000] {
        let t0 = Instant::now();
        let mut hold = Hold::new(Duration::from_secs(15));
        let names: Vec<String> = (0..namespaces).map(|n| format!("ns-{n}")).collect();
        for name in &names {
            hold.observe(t0, &Scope::Namespace(name.clone()), [(name.clone(), "fd20::1"), (name.clone(), "fd20::2")]);
        }
        let one = Scope::Namespace(names[0].clone());
        group.bench_with_input(BenchmarkId::from_parameter(namespaces), &namespaces, |b, _| {
            b.iter(|| {
                let keys = [(names[0].clone(), "fd20::1"), (names[0].clone(), "fd20::2")];
                black_box(hold.observe(t0 + Duration::from_secs(1), &one, keys))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, hold_benches);
criterion_main!(benches);
