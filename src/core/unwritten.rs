//! When each address was last in a namespace's answer, kept for a window. The producer keeps two:
//! what the answer named while nothing could be written (the producer not leading, the hub not
//! listed), forgotten at the next write, and every answer seen, kept for `--withdraw-after` +
//! `--grace` (its pruning keeps a copy whose address served within that: the record may not have
//! named it, and a withdrawal is held that long). The first: the first write after names it too, so that an address which served during the gap
//! leaves the record like any withdrawal, `--withdraw-after` after it was last seen, and not at
//! once. Without it, a pod served only while the hub restarted would be withdrawn by the pruner
//! as soon as the producer wrote again, though it had served a moment before.
//!
//! Pure: the caller passes the time.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// When an address was last seen in the answer, and whether it was there at the last look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Seen {
    last: Instant,
    present: bool,
}

impl Seen {
    /// Serving at the last look, or stopped less than `after` before `now`.
    fn recent(self, now: Instant, after: Duration) -> bool {
        self.present || now.saturating_duration_since(self.last) < after
    }
}

/// Per hub namespace, the addresses seen served since its last write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwritten {
    after: Duration,
    seen: HashMap<String, HashMap<String, Seen>>,
}

/// Equal windows hash alike whatever their maps' order: a model checker keeps them in its states.
impl Hash for Unwritten {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.after.hash(state);
        let mut seen: Vec<(&String, &String, &Seen)> =
            self.seen.iter().flat_map(|(ns, seen)| seen.iter().map(move |(a, s)| (ns, a, s))).collect();
        seen.sort_unstable();
        seen.hash(state);
    }
}

impl Unwritten {
    pub fn new(after: Duration) -> Self {
        Unwritten { after, seen: HashMap::new() }
    }

    /// The answer for `namespace` at `now`, which could not be written. An address there at the
    /// last look and gone now served until a moment before `now`: it counts as seen at `now`.
    /// What stopped serving `after` ago or longer is forgotten, so a replica that never leads
    /// holds only what serves and what just stopped.
    pub fn observe(&mut self, namespace: &str, answer: &[String], now: Instant) {
        if answer.is_empty() && !self.seen.contains_key(namespace) {
            return;
        }
        let seen = self.seen.entry(namespace.to_owned()).or_default();
        for s in seen.values_mut().filter(|s| s.present) {
            *s = Seen { last: now, present: false };
        }
        for address in answer {
            // In place when known: the steady state allocates nothing.
            match seen.get_mut(address) {
                Some(s) => *s = Seen { last: now, present: true },
                None => {
                    seen.insert(address.clone(), Seen { last: now, present: true });
                }
            }
        }
        let after = self.after;
        seen.retain(|_, s| s.recent(now, after));
        if seen.is_empty() {
            self.seen.remove(namespace);
        }
    }

    /// The addresses of `namespace` seen served less than `after` before `now` (those serving
    /// at the last look included), sorted.
    pub fn recent(&self, namespace: &str, now: Instant) -> Vec<String> {
        let Some(seen) = self.seen.get(namespace) else { return Vec::new() };
        let mut recent: Vec<String> =
            seen.iter().filter(|(_, s)| s.recent(now, self.after)).map(|(a, _)| a.clone()).collect();
        recent.sort_unstable();
        recent
    }

    /// `namespace`'s record was written (or found right): from here its addresses are the
    /// record's, and their withdrawals are held as the record's are.
    pub fn written(&mut self, namespace: &str) {
        self.seen.remove(namespace);
    }

    /// Keep only the namespaces `live` names.
    pub fn retain(&mut self, live: impl Fn(&str) -> bool) {
        self.seen.retain(|ns, _| live(ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn an_address_that_stopped_serving_is_recent_for_after_from_the_look_that_missed_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut u = Unwritten::new(Duration::from_secs(2));
        u.observe("ns", &strings(&["a", "b"]), at(0));
        // b still served at 0 ms and gone at 5,000 ms: served until some moment in between, so
        // recent until 7,000 ms.
        u.observe("ns", &strings(&["a"]), at(5_000));
        assert_eq!(u.recent("ns", at(6_999)), ["a", "b"]);
        assert_eq!(u.recent("ns", at(7_000)), ["a"]);
        // Forgotten at the next look after that; what serves stays however long.
        u.observe("ns", &strings(&["a"]), at(60_000));
        assert_eq!(u.recent("ns", at(60_000)), ["a"]);
        assert_eq!(u.recent("other", at(60_000)), Vec::<String>::new());
    }

    #[test]
    fn a_write_or_a_namespace_gone_forgets() {
        let t0 = Instant::now();
        let mut u = Unwritten::new(Duration::from_secs(2));
        u.observe("ns", &strings(&["a"]), t0);
        u.observe("gone", &strings(&["b"]), t0);
        u.written("ns");
        u.retain(|ns| ns != "gone");
        assert!(u.recent("ns", t0).is_empty() && u.recent("gone", t0).is_empty());
        // Nothing served and nothing recent: nothing kept.
        u.observe("ns", &[], t0);
        assert!(u.seen.is_empty());
    }
}
