//! The producer's recompute of one namespace: 100 HTTPProxies, 50 NetworkServices, 2,000
//! NetworkInterfaces (40 per service, all Bound): a large project namespace.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use edgegate::core::reachability::{ProjectNamespace, reachable, reachable_addresses};
use serde_json::json;

fn namespace() -> ProjectNamespace {
    let mut ns = ProjectNamespace::default();
    for i in 0..100 {
        let proxy = json!({"metadata": {"name": format!("proxy-{i}")}, "spec": {"rules": [
            {"backends": [{"networkService": {"name": format!("svc-{}", i % 50), "port": 80}}]}]}});
        ns.proxies.insert(format!("proxy-{i}"), serde_json::from_value(proxy).expect("proxy"));
    }
    for s in 0..50 {
        let service = json!({"metadata": {"name": format!("svc-{s}")},
            "spec": {"networkInterfaces": {"selector": {"matchLabels": {"app": format!("app-{s}")}}}}});
        ns.services.insert(format!("svc-{s}"), serde_json::from_value(service).expect("service"));
    }
    for i in 0..2000 {
        let interface = json!({
            "metadata": {"name": format!("nic-{i}"), "labels": {"app": format!("app-{}", i % 50), "tier": "web"}},
            "spec": {"addresses": [{"address": format!("fd20:0:{:x}::1:0:{:x}/128", i % 50, i)}]},
            "status": {"phase": "Bound"},
        });
        ns.interfaces.insert(format!("nic-{i}"), serde_json::from_value(interface).expect("interface"));
    }
    ns
}

fn bench(c: &mut Criterion) {
    let ns = namespace();
    assert_eq!(reachable(&ns).addresses.len(), 2000);
    let record = reachable(&ns).addresses;
    c.bench_function("recompute 100 proxies, 50 services, 2000 interfaces", |b| {
        b.iter(|| reachable_addresses(black_box(&ns)) == record)
    });
    c.bench_function("recompute, owned answer", |b| b.iter(|| reachable(black_box(&ns)).addresses.len()));
}

criterion_group!(benches, bench);
criterion_main!(benches);
