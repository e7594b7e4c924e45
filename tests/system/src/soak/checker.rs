//! The invariant checker. It recomputes ground truth itself, from its own watches of the project
//! and the hub (kube-rs, nothing of edgegate's), every 100 ms and on every copy and record event:
//!
//! 1. never withdraw what serves: no copy is deleted, other than by the cell or with its
//!    namespace, while its address was served at any moment of the last `withdraw-after + grace
//!    − ε` (ε: 0.5 s, the sampling period and timer slack; an address stops serving when the
//!    change that stopped it was sent, however late this view received it: the earliest sending
//!    among its namespace's changes received since the last sample that saw it served, a lower
//!    bound, which in a burst of held-up writes, the project frozen, can be seconds early and so
//!    lenient), except a deletion less than [`PROPAGATION`] after the address was served again
//!    following a break longer than that (the news cannot have reached the producer's pruning:
//!    counted as a race); a run of serving however short counts (the producer remembers every
//!    answer its project watches' events make, not only those its coalesced work computes); no
//!    write is refused whose address has been served, without a break, for that long (outside
//!    faults);
//!    A deletion by the producer of a copy whose address the hub's record had named again for more
//!    than 2 s (by the checker's own watch of the records, which trails the hub) is a violation
//!    too: so a race is counted only while the record did not name the address yet. A copy seen
//!    gone only when the checker's watch relisted went at some moment of the gap: it is a
//!    violation only if its address had been served throughout (from the window before the gap),
//!    and is counted otherwise.
//! 2. always collect what stopped serving: a copy whose address no longer serves is gone within
//!    `withdraw-after + grace + slack`, counted from when it stopped serving or from the end (plus
//!    recovery) of the last fault that could delay a collection, whichever is later (the
//!    distribution is reported); and after the settle that ends every run, no copy whose address
//!    is unserved remains ([`Checker::sweep`]);
//! 3. never shrink from a partial view: no record loses, while the project is cut off, an
//!    address served without a break from [`PROPAGATION`] before the cut began until [`LAG`] after
//!    ([`served_through`]): the producer's view was whole up to the cut and saw it served;
//! 4. no write storms: each binary writes as its own identity (its Pod's bound token), and the
//!    hub's audit log shows each producer Pod's deletions per second within its pacing (mod.rs; the
//!    watch's count is reported too);
//! 5. deploy/'s RBAC is enough: neither API server's authorizer refused a request of edgegate's,
//!    but within 10 s of a hub restart, while its RBAC informers sync (mod.rs; counted);
//! 6. one writer a project: every record write and copy DELETE was made by the replica whose
//!    fence held the project's bucket, inside its own member Lease's deadline (mod.rs, by
//!    [`crate::fence_audit`] over the hub's audit log).
//!
//! A fault excuses a delay (invariant 2) or a refusal (1) only for the projects it reaches
//! ([`super::faults`]): one project's trouble must not hold another's work.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

use super::cell::SharedLedger;
use super::faults::{CUT, DELAY_COLLECTION, EXCUSE_REFUSAL, Timeline};
use super::project::{ProjectView, served};

/// How much earlier than the design a deletion may be seen: the checker's sampling period and
/// timer slack (a change is dated by its sending, so the view's own delay is not in it).
pub const LAG: Duration = Duration::from_millis(500);

/// How long before a deletion the checker may see the record name the copy's address without a
/// violation: the pruner's read before its DELETE and the DELETE itself, on a loaded machine.
/// The two are seen by two watches (records, copies), either of which may trail the other.
pub const NAMED_BEFORE: Duration = Duration::from_secs(2);

/// How long an address served again takes to reach the producer's pruning: its watch of the
/// project, through Milo (the stand-in, in this process). The short soak once saw 2.6 s, while the
/// hub's etcd and API server restarted; no more, or a producer that ignores an address served
/// again would be excused for most of the window.
pub const PROPAGATION: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
pub struct Violation {
    pub invariant: u8,
    pub at: Duration,
    pub what: String,
}

#[derive(Default)]
pub struct Findings {
    pub violations: Vec<Violation>,
    /// From "no longer served" to the copy gone, for copies the pruner collected.
    pub collection: Vec<Duration>,
    /// From "served (again), its pod there" to its copy published.
    pub published: Vec<Duration>,
    pub deleted_by_pruner: u64,
    pub deleted_by_cell: u64,
    pub deleted_with_namespace: u64,
    /// The most deletions by the pruner seen within one second.
    pub peak_deletions_per_second: usize,
    pub record_writes: u64,
    /// Addresses withdrawn while the project was cut off that were not served throughout the
    /// cut's beginning: the producer's last whole view may have seen them unserved.
    pub withdrawn_during_cut: usize,
    /// Copies deleted less than [`PROPAGATION`] after their address was served again, following
    /// a break longer than the window: a race with news that cannot have reached the pruner.
    pub raced: usize,
    /// Copies by the pruner seen gone only at a relist of the checker's watch, whose address was
    /// not served throughout the gap: when they went is unknown, so they are counted, not judged.
    pub relisted: usize,
}

/// What the checker knows of each (hub namespace, address).
#[derive(Default)]
struct Truth {
    /// When each address was last seen served.
    last_served: HashMap<(String, String), Instant>,
    /// Since when each address has been served without a break.
    served_since: HashMap<(String, String), Instant>,
    /// Each address's runs of being served that ended, (began, ended): the last one always, the
    /// others for [`RUNS_KEPT`].
    runs: HashMap<(String, String), Vec<(Instant, Instant)>>,
    /// Since when each address of a copy has not been served.
    unserved_since: HashMap<(String, String), Instant>,
    /// Pods whose address serves but whose copy is not there yet: since when.
    waiting: HashMap<(String, String), Instant>,
    /// Copies already reported as not collected.
    reported: BTreeSet<(String, String)>,
    /// Since when the hub's record has named each address (by the checker's watch).
    named_since: HashMap<(String, String), Instant>,
    /// Since when the checker's watch of the records has been whole without a break (`None`
    /// while it is broken or relisting): only then is `named_since` the hub's.
    records_whole_since: Option<Instant>,
}

impl Truth {
    /// When the address's last run of being served ended.
    fn streak_ended(&self, key: &(String, String)) -> Option<Instant> {
        self.runs.get(key).and_then(|runs| runs.last()).map(|(_, ended)| *ended)
    }
}

pub struct Checker {
    pub started: Instant,
    pub window: Duration,
    pub collect_within: Duration,
    pub findings: Arc<Mutex<Findings>>,
    truth: Arc<Mutex<Truth>>,
    pub timeline: Timeline,
    pub ledger: SharedLedger,
    pub deleted_namespaces: Arc<Mutex<BTreeSet<String>>>,
    /// Each hub namespace's project (the churn's): which faults reach it.
    pub hub_projects: Arc<Mutex<BTreeMap<String, String>>>,
    pub deletes_per_second: usize,
}

fn key(copy: &EndpointSlice) -> (String, String) {
    (copy.metadata.namespace.clone().unwrap_or_default(), copy.metadata.name.clone().unwrap_or_default())
}

fn address(copy: &EndpointSlice) -> String {
    copy.endpoints.as_ref().and_then(|e| e.first()).and_then(|e| e.addresses.first()).cloned().unwrap_or_default()
}

impl Checker {
    fn project_of(&self, hub_ns: &str) -> Option<String> {
        self.hub_projects.lock().expect("projects").get(hub_ns).cloned()
    }

    fn violation(&self, invariant: u8, what: String) {
        let at = self.started.elapsed();
        eprintln!("soak: VIOLATION of invariant {invariant} at {at:.1?}: {what}");
        self.findings.lock().expect("findings").violations.push(Violation { invariant, at, what });
    }

    /// One sample: the project's served addresses against the hub's copies.
    pub fn sample(&self, view: &ProjectView, copies: &[std::sync::Arc<EndpointSlice>]) {
        let now = Instant::now();
        let snapshot = view.snapshot();
        let mut truth = self.truth.lock().expect("truth");
        let mut serving: BTreeSet<(String, String)> = BTreeSet::new();
        let mut pods: BTreeMap<(String, String), String> = BTreeMap::new();
        for (hub_ns, objects) in &snapshot {
            for address in served(objects) {
                serving.insert((hub_ns.clone(), address));
            }
            for (pod, address) in super::project::pods(objects) {
                pods.insert((hub_ns.clone(), pod), address);
            }
        }
        let ended: Vec<(String, String)> =
            truth.served_since.keys().filter(|k| !serving.contains(*k)).cloned().collect();
        for k in ended {
            let began = truth.served_since.remove(&k).unwrap_or(now);
            let last = truth.last_served.get(&k).copied().unwrap_or(now);
            // Served until the change that ended it was sent: the view may have received it late.
            let last = view.sent_after(&k.0, last).map_or(last, |sent| sent.min(last));
            truth.last_served.insert(k.clone(), last);
            let runs = truth.runs.entry(k).or_default();
            runs.retain(|(_, e)| now.saturating_duration_since(*e) < RUNS_KEPT);
            runs.push((began.min(last), last));
        }
        for k in &serving {
            truth.last_served.insert(k.clone(), now);
            truth.served_since.entry(k.clone()).or_insert(now);
            truth.unserved_since.remove(k);
        }
        let mut present = BTreeMap::new();
        for copy in copies {
            let (k, a) = (key(copy), address(copy));
            present.insert(k.clone(), a.clone());
            let addr_key = (k.0.clone(), a);
            if !serving.contains(&addr_key) {
                truth.unserved_since.entry(addr_key.clone()).or_insert(now);
            }
            let since = truth.unserved_since.get(&addr_key).copied();
            let deleted_ns = self.deleted_namespaces.lock().expect("deleted").contains(&k.0);
            if let Some(since) = since.filter(|_| !deleted_ns) {
                let project = self.project_of(&k.0);
                let excused = self.timeline.excused_until(now, &DELAY_COLLECTION, project.as_deref());
                let from = excused.map_or(since, |e| e.max(since));
                let age = now.saturating_duration_since(from);
                if age > self.collect_within && truth.reported.insert(k.clone()) {
                    self.violation(
                        2,
                        format!("copy {}/{} ({}) unserved for {age:.1?}, not collected", k.0, k.1, addr_key.1),
                    );
                }
            }
        }
        // Served pods waiting for their copy (the cost of refusals to the cell).
        let mut published = Vec::new();
        for (k, address) in &pods {
            let served_now = serving.contains(&(k.0.clone(), address.clone()));
            if present.get(k) == Some(address) {
                if let Some(since) = truth.waiting.remove(k) {
                    published.push(now - since);
                }
            } else if served_now {
                truth.waiting.entry(k.clone()).or_insert(now);
            } else {
                truth.waiting.remove(k);
            }
        }
        truth.waiting.retain(|k, _| pods.contains_key(k));
        self.findings.lock().expect("findings").published.extend(published);
    }

    /// A copy deleted at `at` (`gap`: seen gone only at a relist, so deleted at some moment
    /// since `gap`, the last event before the watch broke, and `at`): by the cell (its pod went),
    /// with its namespace, or by the pruner.
    fn deleted(&self, copy: &EndpointSlice, at: Instant, gap: Option<Instant>, per_second: &mut Vec<Instant>) {
        let relisted = gap.is_some();
        let k = key(copy);
        let uid = copy.metadata.uid.clone().unwrap_or_default();
        let by_cell = self.ledger.lock().expect("ledger").deleted.contains(&uid);
        let mut findings = self.findings.lock().expect("findings");
        if by_cell {
            findings.deleted_by_cell += 1;
            return;
        }
        if self.deleted_namespaces.lock().expect("deleted").contains(&k.0) {
            findings.deleted_with_namespace += 1;
            return;
        }
        findings.deleted_by_pruner += 1;
        if !relisted {
            per_second.retain(|t| at.duration_since(*t) < Duration::from_secs(1));
            per_second.push(at);
            findings.peak_deletions_per_second = findings.peak_deletions_per_second.max(per_second.len());
        }
        drop(findings);
        let addr_key = (k.0.clone(), address(copy));
        let truth = self.truth.lock().expect("truth");
        if let Some(gap) = gap {
            // When in the gap it went is unknown: a violation only if at every moment of the gap
            // the address had been served within the window, i.e. served without a break since
            // the window before the gap began. Otherwise it is counted, not judged.
            let served_throughout = truth.served_since.get(&addr_key).is_some_and(|s| *s + self.window <= gap);
            drop(truth);
            if served_throughout {
                self.violation(
                    1,
                    format!(
                        "copy {}/{} ({}) deleted while its watch was broken ({:.1?}), its address served throughout",
                        k.0,
                        k.1,
                        addr_key.1,
                        at.saturating_duration_since(gap)
                    ),
                );
            } else {
                self.findings.lock().expect("findings").relisted += 1;
            }
            return;
        }
        let just_served =
            raced(at, truth.served_since.get(&addr_key).copied(), truth.streak_ended(&addr_key), self.window);
        // Seen gone only at a relist, the deletion's time is unknown: it may have come before. And
        // the checker's view of the records must have been whole since the address was named
        // (after a hub restart one watch may come back long before the other).
        let named = truth
            .named_since
            .get(&addr_key)
            .filter(|t| truth.records_whole_since.is_some_and(|w| w <= **t))
            .map(|t| at.saturating_duration_since(*t));
        if let Some(named) = named.filter(|n| *n > NAMED_BEFORE) {
            drop(truth);
            self.violation(
                1,
                format!("copy {}/{} ({}) deleted {named:.1?} after the record named it", k.0, k.1, addr_key.1),
            );
            return;
        }
        if just_served {
            drop(truth);
            eprintln!(
                "soak: raced: copy {}/{} ({}) deleted within {PROPAGATION:?} of its address serving again, the record not naming it yet",
                k.0, k.1, addr_key.1
            );
            self.findings.lock().expect("findings").raced += 1;
            return;
        }
        if let Some(last) = truth.last_served.get(&addr_key).filter(|t| at.duration_since(**t) < self.window) {
            let ago = at.duration_since(*last);
            // The checker's own history of the address, to tell its view's lag from edgegate's.
            let before = |t: Option<&Instant>| t.map(|t| format!("{:.1?} before", at.saturating_duration_since(*t)));
            let history = format!(
                "served without a break since: {:?}; last break began: {:?}",
                before(truth.served_since.get(&addr_key)),
                before(truth.streak_ended(&addr_key).as_ref()),
            );
            drop(truth);
            self.violation(
                1,
                format!(
                    "copy {}/{} ({}) deleted {ago:.1?} after its address was served ({history})",
                    k.0, k.1, addr_key.1
                ),
            );
            return;
        }
        if let Some(since) = truth.unserved_since.get(&addr_key) {
            let took = at.duration_since(*since);
            drop(truth);
            self.findings.lock().expect("findings").collection.push(took);
        }
    }

    /// Follow the hub's copies: each deletion judged, relists included (a copy gone across a
    /// relist counts as deleted at the relist).
    pub async fn follow_copies(self: Arc<Self>, hub: Client, selector: String) {
        let api: Api<EndpointSlice> = Api::all(hub);
        let mut stream = watcher::watcher(api, watcher::Config::default().labels(&selector)).default_backoff().boxed();
        let (mut known, mut relisting): (HashMap<(String, String), EndpointSlice>, HashMap<_, _>) = Default::default();
        let mut per_second = Vec::new();
        // The last event seen, and (while the watch is broken or relisting) the last one before.
        let (mut last_event, mut gap) = (Instant::now(), None);
        while let Some(event) = stream.next().await {
            let Ok(event) = event else {
                gap = gap.or(Some(last_event));
                continue;
            };
            match event {
                Event::Apply(copy) => {
                    known.insert(key(&copy), copy);
                }
                Event::Delete(copy) => {
                    known.remove(&key(&copy));
                    self.deleted(&copy, Instant::now(), None, &mut per_second);
                }
                Event::Init => {
                    gap = gap.or(Some(last_event));
                    relisting.clear();
                }
                Event::InitApply(copy) => {
                    relisting.insert(key(&copy), copy);
                }
                Event::InitDone => {
                    let since = gap.take().unwrap_or(last_event);
                    for (k, copy) in &known {
                        if !relisting.contains_key(k) {
                            self.deleted(copy, Instant::now(), Some(since), &mut per_second);
                        }
                    }
                    known = std::mem::take(&mut relisting);
                }
            }
            last_event = Instant::now();
        }
    }

    /// Follow the hub's records: none may lose an address while the project is cut off.
    pub async fn follow_records(self: Arc<Self>, hub: Client) {
        let api: Api<edgegate::EdgeReachability> = Api::all(hub);
        let mut stream = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
        let mut known: HashMap<String, BTreeSet<String>> = HashMap::new();
        let mut relisted = BTreeSet::new();
        while let Some(event) = stream.next().await {
            // A record gone (deleted, or missing from a relist) names nothing any more.
            match &event {
                Ok(Event::InitDone) => self.truth.lock().expect("truth").records_whole_since = Some(Instant::now()),
                Ok(Event::Init) | Err(_) => self.truth.lock().expect("truth").records_whole_since = None,
                _ => {}
            }
            let gone: Vec<String> = match &event {
                Ok(Event::Delete(record)) => vec![record.metadata.namespace.clone().unwrap_or_default()],
                Ok(Event::Init) => {
                    relisted.clear();
                    vec![]
                }
                Ok(Event::InitApply(record)) => {
                    relisted.insert(record.metadata.namespace.clone().unwrap_or_default());
                    vec![]
                }
                Ok(Event::InitDone) => known.keys().filter(|ns| !relisted.contains(*ns)).cloned().collect(),
                _ => vec![],
            };
            if !gone.is_empty() {
                let mut truth = self.truth.lock().expect("truth");
                truth.named_since.retain(|(n, _), _| !gone.contains(n));
                drop(truth);
                known.retain(|ns, _| !gone.contains(ns));
            }
            let Ok(Event::Apply(record) | Event::InitApply(record)) = event else { continue };
            let ns = record.metadata.namespace.clone().unwrap_or_default();
            let now: BTreeSet<String> = record.entries().iter().cloned().collect();
            self.findings.lock().expect("findings").record_writes += 1;
            {
                let mut truth = self.truth.lock().expect("truth");
                let seen = Instant::now();
                truth.named_since.retain(|(n, a), _| n != &ns || now.contains(a));
                for a in &now {
                    truth.named_since.entry((ns.clone(), a.clone())).or_insert(seen);
                }
            }
            let Some(before) = known.insert(ns.clone(), now.clone()) else { continue };
            let project = self.project_of(&ns);
            let Some(cut) = self.timeline.cut_since(&CUT, project.as_deref(), Instant::now()) else { continue };
            // A withdrawal decided before the cut (its hold running out during it) is what the
            // producer saw whole; an address still served when the cut began must stay.
            let truth = self.truth.lock().expect("truth");
            let (served, decided): (Vec<&String>, Vec<&String>) = before.difference(&now).partition(|a| {
                let k = (ns.clone(), (*a).clone());
                let runs = truth.runs.get(&k).map_or(&[][..], Vec::as_slice);
                served_through(runs, truth.served_since.get(&k).copied(), cut - PROPAGATION, cut + LAG)
            });
            drop(truth);
            self.findings.lock().expect("findings").withdrawn_during_cut += decided.len();
            if !served.is_empty() {
                self.violation(3, format!("record {ns} lost {served:?}, still served when the project was cut off"));
            }
        }
    }

    /// Refusals (from the `from`-th on) of addresses served without a break for the whole window
    /// before them; returns where the next call starts.
    pub fn judge_refusals(&self, from: usize) -> usize {
        let refusals: Vec<_> = self.ledger.lock().expect("ledger").refusals.iter().skip(from).cloned().collect();
        let truth = self.truth.lock().expect("truth");
        let mut wrong = Vec::new();
        for r in &refusals {
            let since = truth.served_since.get(&(r.hub_ns.clone(), r.address.clone()));
            // Judged from when it began serving or the last fault that could excuse a refusal
            // ended (plus recovery), whichever is later.
            let project = self.project_of(&r.hub_ns);
            let excused = self.timeline.excused_until(r.at, &EXCUSE_REFUSAL, project.as_deref());
            let from = since.map(|s| excused.map_or(*s, |e| e.max(*s)));
            let long_served =
                since.zip(from).filter(|(_, f)| r.at.checked_duration_since(*f).is_some_and(|d| d > self.window));
            if let Some((since, _)) = long_served {
                wrong.push(format!(
                    "{}/{} ({}) refused, served for {:.1?}: {}",
                    r.hub_ns,
                    r.name,
                    r.address,
                    r.at - *since,
                    r.message
                ));
            }
        }
        drop(truth);
        for what in wrong {
            self.violation(1, what);
        }
        from + refusals.len()
    }
}

impl Checker {
    /// The final sweep, after the settle: every copy whose address the project does not serve
    /// (outside deleted namespaces) is a violation of invariant 2. Returns how many copies were
    /// looked at.
    pub fn sweep(&self, view: &ProjectView, copies: &[std::sync::Arc<EndpointSlice>]) -> usize {
        let snapshot = view.snapshot();
        let serving: BTreeSet<(String, String)> = snapshot
            .iter()
            .flat_map(|(hub_ns, objects)| served(objects).into_iter().map(move |a| (hub_ns.clone(), a)))
            .collect();
        let deleted = self.deleted_namespaces.lock().expect("deleted").clone();
        for copy in copies {
            let (k, a) = (key(copy), address(copy));
            if !deleted.contains(&k.0) && !serving.contains(&(k.0.clone(), a.clone())) {
                self.violation(2, format!("copy {}/{} ({a}) unserved, still there after the settle", k.0, k.1));
            }
        }
        copies.len()
    }
}

/// Today's rule for a deletion that races its address serving again: the producer prunes on
/// what its own watch of the project has delivered (its live read before a DELETE asks only
/// whether the project answers), so a change sent less than [`PROPAGATION`] before the DELETE
/// may not have reached it. Excused only when the address had not served for longer than the
/// window before that (`streak_ended`, the end of its last run, at least `window` before `at`):
/// the deletion was rightly decided, and only its news came late. Otherwise it is judged.
pub fn raced(at: Instant, served_since: Option<Instant>, streak_ended: Option<Instant>, window: Duration) -> bool {
    served_since.is_some_and(|s| at.saturating_duration_since(s) < PROPAGATION)
        && streak_ended.is_none_or(|e| at.saturating_duration_since(e) >= window)
}

/// How long the runs of serving that ended are kept: past any window or cut judged.
const RUNS_KEPT: Duration = Duration::from_secs(120);

/// Whether one run of serving (one that ended, of `runs`, or the one going on since `ongoing`)
/// covered all of `from..=to`.
pub fn served_through(runs: &[(Instant, Instant)], ongoing: Option<Instant>, from: Instant, to: Instant) -> bool {
    ongoing.is_some_and(|s| s <= from) || runs.iter().any(|(s, e)| *s <= from && to <= *e)
}

pub fn new(
    window: Duration,
    collect_within: Duration,
    timeline: Timeline,
    ledger: SharedLedger,
    deleted_namespaces: Arc<Mutex<BTreeSet<String>>>,
    hub_projects: Arc<Mutex<BTreeMap<String, String>>>,
    deletes_per_second: usize,
) -> Checker {
    Checker {
        started: Instant::now(),
        window,
        collect_within,
        findings: Arc::default(),
        truth: Arc::default(),
        timeline,
        ledger,
        deleted_namespaces,
        hub_projects,
        deletes_per_second,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race's excuse: served again under [`PROPAGATION`] before the deletion, after a break
    /// of at least the window; anything else is judged.
    #[test]
    fn a_deletion_races_only_news_of_an_address_long_unserved() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_secs(100);
        let window = Duration::from_secs(5);
        let secs = |s: u64| Some(at - Duration::from_secs(s));
        let ms = |m: u64| Some(at - Duration::from_millis(m));
        let cases = [
            // (served again since, its last run ended, excused)
            (ms(500), secs(30), true), // unserved 30 s, served again 0.5 s before: the news late
            (ms(500), None, true),     // never served before
            (ms(500), secs(5), true),  // its last run ended exactly the window before
            (ms(500), secs(4), false), // its last run ended within the window: it served within it
            (secs(4), secs(30), false), // served again 4 s before: past the news' propagation
            (None, secs(30), false),   // not served now: an ordinary deletion, judged
        ];
        for (served_since, streak_ended, excused) in cases {
            assert_eq!(raced(at, served_since, streak_ended, window), excused, "{served_since:?} {streak_ended:?}");
        }
    }

    /// Invariant 3 judges an address only if one run of serving covered the cut's beginning.
    #[test]
    fn a_cut_judges_only_what_served_throughout_its_beginning() {
        let cut = Instant::now() + Duration::from_secs(100);
        let s = |x: f64| if x < 0.0 { cut - Duration::from_secs_f64(-x) } else { cut + Duration::from_secs_f64(x) };
        let (from, to) = (cut - PROPAGATION, cut + LAG);
        let cases = [
            // (ended runs, going on since, judged)
            (vec![], Some(s(-10.0)), true),          // served long before the cut, still
            (vec![(s(-10.0), s(5.0))], None, true),  // served long before, stopped during it
            (vec![(s(-10.0), s(0.2))], None, false), // stopped just after it began: may be seen
            (vec![(s(-1.0), s(5.0))], None, false),  // began serving just before: may be unseen
            (vec![(s(-10.0), s(-1.0))], Some(s(0.7)), false), // stopped before, served again during it
            (vec![(s(-10.0), s(-1.0)), (s(1.0), s(2.0))], None, false),
            (vec![], Some(s(-2.0)), false), // began within PROPAGATION before
            (vec![], None, false),          // never served
        ];
        for (runs, ongoing, judged) in cases {
            assert_eq!(served_through(&runs, ongoing, from, to), judged, "{runs:?} {ongoing:?}");
        }
    }
}
