//! The answer for one project namespace: which workload addresses something serves through an
//! HTTPProxy, exactly as upstream's `EdgeReachabilityReconciler` computes it (docs/producer.md):
//!
//! - every HTTPProxy not being deleted, every `spec.rules[].backends[]`:
//!   - `networkService` → that NetworkService → its `spec.networkInterfaces.selector` → the
//!     selected NetworkInterfaces with `status.phase == "Bound"` → each `spec.addresses[].address`
//!     cut at the first `/`, empty results dropped;
//!   - `instance` → the EndpointSlice of that name → every `endpoints[].addresses[]`;
//!   - `endpoint`, `connector`: nothing. A missing service or slice: nothing.
//! - exact-string de-duplication, then byte-wise sort. No parsing, no re-spelling.
//!
//! Selectors are evaluated with kube-core's own [`Selector`]. A missing selector selects nothing
//! and an empty one everything, as `metav1.LabelSelectorAsSelector` does.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use super::project::{HttpProxy, NetworkInterface, NetworkService};
use super::slice::Slice;

/// Everything the answer reads in one project namespace, by name.
#[derive(Clone, Debug, Default)]
pub struct ProjectNamespace {
    pub proxies: BTreeMap<String, HttpProxy>,
    pub services: BTreeMap<String, NetworkService>,
    pub interfaces: BTreeMap<String, NetworkInterface>,
    pub slices: BTreeMap<String, Slice>,
}

/// The answer, and what could not be evaluated (a selector the producer logs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reachability {
    /// Sorted byte-wise, each once, spelled as the interfaces and slices spell them.
    pub addresses: Vec<String>,
    /// `(service, why)` for each referenced selector that cannot be evaluated.
    pub bad_selectors: Vec<(String, String)>,
}

/// Which kinds a project's answer reads besides its proxies and namespaces: NetworkServices and
/// NetworkInterfaces while some proxy has a `networkService` backend, EndpointSlices while some
/// has an `instance` backend. A project whose proxies need neither (most: idle) is watched with
/// two watches, not five.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    pub services: bool,
    pub slices: bool,
}

/// What `proxies` need ([`Needs`]); a proxy being deleted still counts (it may be answered until
/// it is gone, and a watch too many costs a socket, not a withdrawal).
pub fn needs<'a>(proxies: impl IntoIterator<Item = &'a crate::core::project::HttpProxy>) -> Needs {
    let mut needs = Needs::default();
    for backend in proxies.into_iter().flat_map(|p| &p.spec.rules).flat_map(|r| &r.backends) {
        needs.services |= backend.network_service.is_some();
        needs.slices |= backend.instance.is_some();
        if needs.services && needs.slices {
            break;
        }
    }
    needs
}

/// The answer for `ns`.
pub fn reachable(ns: &ProjectNamespace) -> Reachability {
    let (addresses, bad_selectors) = answer(ns, None);
    Reachability { addresses: addresses.into_iter().map(str::to_owned).collect(), bad_selectors }
}

/// The answer's addresses, borrowed from `ns`: what a recompute compares with the record on the
/// hub before anything is allocated (in the steady state they are equal and nothing is).
pub fn reachable_addresses(ns: &ProjectNamespace) -> Vec<&str> {
    answer(ns, None).0
}

/// The answer for `ns`, with one line per proxy, backend, service and interface saying what it
/// contributed and why: `edgegate reachability`'s report.
pub fn explain(ns: &ProjectNamespace) -> (Reachability, Vec<String>) {
    let mut lines = Vec::new();
    let (addresses, bad_selectors) = answer(ns, Some(&mut lines));
    (Reachability { addresses: addresses.into_iter().map(str::to_owned).collect(), bad_selectors }, lines)
}

/// The addresses, borrowed and sorted, and the selectors that could not be evaluated.
type Answer<'a> = (Vec<&'a str>, Vec<(String, String)>);

fn answer<'a>(ns: &'a ProjectNamespace, mut why: Option<&mut Vec<String>>) -> Answer<'a> {
    // Lines are only formatted when asked for: the producer's recompute formats nothing.
    let mut say = |line: &dyn Fn() -> String| {
        if let Some(lines) = why.as_deref_mut() {
            lines.push(line());
        }
    };
    // Each service and instance once, however many proxies and rules name it.
    let mut services = BTreeSet::new();
    let mut instances = BTreeSet::new();
    for (name, proxy) in &ns.proxies {
        if proxy.metadata.deletion_timestamp.is_some() {
            say(&|| format!("HTTPProxy {name}: being deleted; skipped"));
            continue;
        }
        for backend in proxy.spec.rules.iter().flat_map(|r| &r.backends) {
            match (&backend.network_service, &backend.instance) {
                (Some(service), _) => {
                    say(&|| format!("HTTPProxy {name}: backend networkService {}", service.name));
                    services.insert(service.name.as_str());
                }
                (None, Some(instance)) => {
                    say(&|| format!("HTTPProxy {name}: backend instance {}", instance.name));
                    instances.insert(instance.name.as_str());
                }
                (None, None) => {
                    say(&|| format!("HTTPProxy {name}: endpoint or connector backend; contributes nothing"))
                }
            }
        }
    }
    let mut addresses: Vec<&str> = Vec::new();
    let mut bad_selectors = Vec::new();
    let by_label = LabelIndex::new(ns, &services);
    for name in services {
        let Some(service) = ns.services.get(name) else {
            say(&|| format!("NetworkService {name}: not found; contributes nothing"));
            continue;
        };
        let label_selector = service.spec.network_interfaces.as_ref().and_then(|n| n.selector.as_ref());
        let Some(label_selector) = label_selector else {
            say(&|| format!("NetworkService {name}: no interface selector; selects nothing"));
            continue;
        };
        let selector = match Selector::try_from(label_selector.clone()) {
            Ok(selector) => selector,
            Err(e) => {
                say(&|| format!("NetworkService {name}: selector cannot be evaluated ({}); contributes nothing", e.0));
                bad_selectors.push((name.to_owned(), e.0));
                continue;
            }
        };
        // A selector of one label, the one the candidates are indexed by, needs no second look.
        let exact = label_selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && label_selector.match_labels.as_ref().is_some_and(|m| m.len() == 1);
        for interface in by_label.candidates(label_selector) {
            let labels = interface.metadata.labels.as_ref().unwrap_or(&EMPTY);
            if !exact && !selector.matches(labels) {
                continue;
            }
            let iname = interface.metadata.name.as_deref().unwrap_or_default();
            let phase = interface.status.phase.as_deref().unwrap_or("unset");
            if !interface.is_bound() {
                say(&|| format!("NetworkService {name}: NetworkInterface {iname} is {phase}, not Bound; not recorded"));
                continue;
            }
            for a in &interface.spec.addresses {
                let cut = a.address.split('/').next().unwrap_or_default();
                if !cut.is_empty() {
                    say(&|| format!("NetworkService {name}: NetworkInterface {iname} (Bound) → {cut}"));
                    addresses.push(cut);
                }
            }
        }
    }
    for name in instances {
        let Some(slice) = ns.slices.get(name) else {
            say(&|| format!("EndpointSlice {name}: not found; contributes nothing"));
            continue;
        };
        for a in slice.addresses() {
            say(&|| format!("EndpointSlice {name}: → {a}"));
            addresses.push(a);
        }
    }
    (sorted_unique(addresses), bad_selectors)
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// Byte-wise sorted, each once. Sorting compares the first 16 bytes as one big-endian integer
/// (zero-padded), and the whole strings only where those are equal: the same order as comparing
/// the strings, at a fraction of the cost for addresses that share a long prefix.
fn sorted_unique(addresses: Vec<&str>) -> Vec<&str> {
    let key = |s: &str| {
        let mut head = [0u8; 16];
        let n = s.len().min(16);
        head[..n].copy_from_slice(&s.as_bytes()[..n]);
        u128::from_be_bytes(head)
    };
    let mut keyed: Vec<(u128, &str)> = addresses.into_iter().map(|a| (key(a), a)).collect();
    keyed.sort_unstable();
    let mut out: Vec<&str> = keyed.into_iter().map(|(_, a)| a).collect();
    out.dedup();
    out
}

/// Interfaces by the value of one label: for each selector, the first of its `matchLabels`, so a
/// service looks only at the interfaces that can match it rather than at every interface.
struct LabelIndex<'a> {
    all: Vec<&'a NetworkInterface>,
    by_value: HashMap<(&'a str, &'a str), Vec<&'a NetworkInterface>, foldhash::fast::RandomState>,
}

impl<'a> LabelIndex<'a> {
    fn new(ns: &'a ProjectNamespace, services: &BTreeSet<&str>) -> Self {
        let keys: BTreeSet<&str> = services
            .iter()
            .filter_map(|s| ns.services.get(*s))
            .filter_map(|s| first_match_label(s.spec.network_interfaces.as_ref()?.selector.as_ref()?))
            .map(|(k, _)| k)
            .collect();
        let all: Vec<&NetworkInterface> = ns.interfaces.values().collect();
        let mut by_value: HashMap<(&str, &str), Vec<&NetworkInterface>, _> =
            HashMap::with_hasher(foldhash::fast::RandomState::default());
        for interface in &all {
            let Some(labels) = interface.metadata.labels.as_ref() else { continue };
            for key in &keys {
                if let Some((k, v)) = labels.get_key_value(*key) {
                    by_value.entry((k.as_str(), v.as_str())).or_default().push(interface);
                }
            }
        }
        LabelIndex { all, by_value }
    }

    /// A superset of the interfaces `selector` matches; the selector itself still decides.
    fn candidates(&self, selector: &'a LabelSelector) -> &[&'a NetworkInterface] {
        match first_match_label(selector) {
            Some(kv) => self.by_value.get(&kv).map_or(&[], Vec::as_slice),
            None => &self.all,
        }
    }
}

fn first_match_label(selector: &LabelSelector) -> Option<(&str, &str)> {
    selector.match_labels.as_ref()?.iter().next().map(|(k, v)| (k.as_str(), v.as_str()))
}

#[cfg(test)]
mod needs_tests {
    use super::*;
    use crate::core::project::HttpProxy;

    fn proxy(backends: serde_json::Value) -> HttpProxy {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"rules": [{"backends": backends}]}}),
        )
        .expect("proxy")
    }

    #[test]
    fn kinds_are_needed_only_for_the_backends_that_read_them() {
        assert_eq!(needs([]), Needs { services: false, slices: false });
        let service = proxy(serde_json::json!([{"networkService": {"name": "web"}}]));
        let instance = proxy(serde_json::json!([{"instance": {"name": "vm-1"}}]));
        let other = proxy(serde_json::json!([{"endpoint": {"url": "https://x"}}, {"connector": {}}]));
        assert_eq!(needs([&other]), Needs::default());
        assert_eq!(needs([&service]), Needs { services: true, slices: false });
        assert_eq!(needs([&instance, &other]), Needs { services: false, slices: true });
        assert_eq!(needs([&service, &instance]), Needs { services: true, slices: true });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::core::fixtures::copy;

    fn proxy(name: &str, backends: serde_json::Value) -> (String, HttpProxy) {
        let p =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"rules": [{"backends": backends}]}}))
                .expect("proxy");
        (name.to_owned(), p)
    }

    fn service(name: &str, selector: serde_json::Value) -> (String, NetworkService) {
        let spec = if selector.is_null() { json!({}) } else { json!({"networkInterfaces": {"selector": selector}}) };
        let s = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("service");
        (name.to_owned(), s)
    }

    fn interface(name: &str, app: &str, phase: Option<&str>, addresses: &[&str]) -> (String, NetworkInterface) {
        let addresses: Vec<_> = addresses.iter().map(|a| json!({"address": a})).collect();
        let i = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"addresses": addresses, "externalAddresses": [{"address": "203.0.113.9"}]},
            "status": {"phase": phase},
        }))
        .expect("interface");
        (name.to_owned(), i)
    }

    fn world() -> ProjectNamespace {
        ProjectNamespace {
            proxies: BTreeMap::new(),
            services: [
                service("web", json!({"matchLabels": {"app": "web"}})),
                service("api", json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]})),
                service("bad", json!({"matchExpressions": [{"key": "app", "operator": "Sideways"}]})),
                service("none", serde_json::Value::Null),
                service("all", json!({})),
            ]
            .into(),
            interfaces: [
                interface("web-1", "web", Some("Bound"), &["fd20:0:2::1:0:0/128"]),
                interface("web-2", "web", Some("Bound"), &["fd20:0:2::1:0:1", "/64", "fd20:0:2::1:0:0"]),
                interface("web-3", "web", Some("Available"), &["fd20:0:2::1:0:3"]),
                interface("web-4", "web", None, &["fd20:0:2::1:0:4"]),
                interface("api-1", "api", Some("Bound"), &["10.0.0.9"]),
                interface("db-1", "db", Some("Bound"), &["fd20:0:2::db"]),
            ]
            .into(),
            slices: [("vm-1".to_owned(), copy("p", "vm-1", &["fd20:0:9::1", "FD20:0:9::2"]))].into(),
        }
    }

    fn answer_with(proxies: Vec<(String, HttpProxy)>) -> Reachability {
        let mut ns = world();
        ns.proxies = proxies.into_iter().collect();
        reachable(&ns)
    }

    /// The answer's rules, row by row.
    #[test]
    fn answer_table() {
        let web = json!([{"networkService": {"name": "web", "port": 80}}]);
        type Row = (&'static str, Vec<(String, HttpProxy)>, Vec<&'static str>);
        let rows: Vec<Row> = vec![
            ("no proxy: empty answer", vec![], vec![]),
            (
                "networkService: Bound members only, prefix cut, empty cut dropped, duplicates once",
                vec![proxy("p", web.clone())],
                vec!["fd20:0:2::1:0:0", "fd20:0:2::1:0:1"],
            ),
            (
                "matchExpressions selector",
                vec![proxy("p", json!([{"networkService": {"name": "api"}}]))],
                vec!["10.0.0.9"],
            ),
            ("missing service", vec![proxy("p", json!([{"networkService": {"name": "gone"}}]))], vec![]),
            (
                "selector that cannot be evaluated",
                vec![proxy("p", json!([{"networkService": {"name": "bad"}}]))],
                vec![],
            ),
            ("no selector selects nothing", vec![proxy("p", json!([{"networkService": {"name": "none"}}]))], vec![]),
            (
                "empty selector selects every Bound interface",
                vec![proxy("p", json!([{"networkService": {"name": "all"}}]))],
                vec!["10.0.0.9", "fd20:0:2::1:0:0", "fd20:0:2::1:0:1", "fd20:0:2::db"],
            ),
            (
                "instance: the slice's addresses as spelled",
                vec![proxy("p", json!([{"instance": {"name": "vm-1", "port": 22}}]))],
                vec!["FD20:0:9::2", "fd20:0:9::1"],
            ),
            ("missing slice", vec![proxy("p", json!([{"instance": {"name": "vm-2"}}]))], vec![]),
            (
                "two services selecting the same interfaces: each address once",
                vec![proxy("p", json!([{"networkService": {"name": "web"}}, {"networkService": {"name": "all"}}]))],
                vec!["10.0.0.9", "fd20:0:2::1:0:0", "fd20:0:2::1:0:1", "fd20:0:2::db"],
            ),
            (
                "endpoint and connector backends",
                vec![proxy("p", json!([{"endpoint": "https://x"}, {"connector": {"name": "c"}}]))],
                vec![],
            ),
            (
                "two proxies, one service, and an instance: sorted byte-wise, each once",
                vec![
                    proxy("a", web.clone()),
                    proxy("b", json!([{"networkService": {"name": "web"}}, {"instance": {"name": "vm-1"}}])),
                ],
                vec!["FD20:0:9::2", "fd20:0:2::1:0:0", "fd20:0:2::1:0:1", "fd20:0:9::1"],
            ),
        ];
        for (row, proxies, want) in rows {
            assert_eq!(answer_with(proxies).addresses, want, "row: {row}");
        }
    }

    #[test]
    fn sorted_unique_is_byte_wise_sort_and_dedup() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..200 {
            let words: Vec<String> = (0..(next() % 40))
                .map(|_| {
                    let len = (next() % 24) as usize;
                    (0..len).map(|_| b"fd20:0A\0x."[(next() % 10) as usize] as char).collect()
                })
                .collect();
            let refs: Vec<&str> = words.iter().map(String::as_str).collect();
            let mut want = refs.clone();
            want.sort_unstable();
            want.dedup();
            assert_eq!(sorted_unique(refs), want);
        }
    }

    #[test]
    fn terminating_proxy_is_skipped() {
        let (name, mut p) = proxy("p", json!([{"networkService": {"name": "web"}}]));
        p.metadata.deletion_timestamp =
            crate::core::fixtures::terminating(Slice::default()).metadata.deletion_timestamp;
        assert!(answer_with(vec![(name, p)]).addresses.is_empty());
    }

    #[test]
    fn bad_selectors_are_reported() {
        let got = answer_with(vec![proxy("p", json!([{"networkService": {"name": "bad"}}]))]);
        assert_eq!(got.bad_selectors.len(), 1);
        assert_eq!(got.bad_selectors[0].0, "bad");
    }

    #[test]
    fn relabelled_interface_leaves_the_answer() {
        let mut ns = world();
        ns.proxies = [proxy("p", json!([{"networkService": {"name": "web"}}]))].into();
        ns.interfaces.insert("web-2".into(), interface("web-2", "other", Some("Bound"), &["fd20:0:2::1:0:1"]).1);
        assert_eq!(reachable(&ns).addresses, ["fd20:0:2::1:0:0"]);
    }

    #[test]
    fn explain_says_why() {
        let mut ns = world();
        ns.proxies = [proxy("p", json!([{"networkService": {"name": "web"}}]))].into();
        let (answer, lines) = explain(&ns);
        assert_eq!(answer, reachable(&ns));
        assert!(
            lines.contains(
                &"NetworkService web: NetworkInterface web-3 is Available, not Bound; not recorded".to_owned()
            )
        );
        assert!(
            lines.contains(&"NetworkService web: NetworkInterface web-4 is unset, not Bound; not recorded".to_owned())
        );
        assert!(lines.contains(&"NetworkService web: NetworkInterface web-1 (Bound) → fd20:0:2::1:0:0".to_owned()));
    }
}
