//! Withdrawals held until they have lasted: the pruner's grace (a copy its record names none of)
//! and the producer's withdraw-after (an address its answer lacks) are one mechanism. A key
//! becomes due only once it has been observed so at every observation for `after`; one
//! observation without it starts it again from zero.
//!
//! Pure: the caller passes the time, so the tests state exact instants.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// When each held key was first observed, in its current unbroken run.
#[derive(Debug)]
pub struct Hold<K> {
    after: Duration,
    since: HashMap<K, Instant>,
}

/// What one observation found.
#[derive(Debug, PartialEq, Eq)]
pub struct Observed<K> {
    /// Observed for `after` or longer: act on these now.
    pub due: Vec<K>,
    /// Held but not yet due: keep them as they are.
    pub held: Vec<K>,
    /// Keys whose run started at this observation, with the instant each becomes due: the
    /// caller looks again then.
    pub started: Vec<(K, Instant)>,
}

impl<K: Hash + Eq + Clone> Hold<K> {
    pub fn new(after: Duration) -> Self {
        Hold { after, since: HashMap::new() }
    }

    /// Observe at `now` that exactly `keys` are so among the keys `in_scope` covers: every other
    /// key in scope is not (its run ends); keys out of scope are left as they were.
    pub fn observe(
        &mut self,
        now: Instant,
        keys: impl IntoIterator<Item = K>,
        in_scope: impl Fn(&K) -> bool,
    ) -> Observed<K> {
        let keys: Vec<K> = keys.into_iter().collect();
        let mut observed = Observed { due: Vec::new(), held: Vec::new(), started: Vec::new() };
        if self.after.is_zero() {
            observed.due = keys;
            return observed;
        }
        if !self.since.is_empty() {
            let present: std::collections::HashSet<&K> = keys.iter().collect();
            self.since.retain(|k, _| !in_scope(k) || present.contains(k));
        }
        for key in keys {
            let since = *self.since.entry(key.clone()).or_insert_with(|| {
                observed.started.push((key.clone(), now + self.after));
                now
            });
            if now.saturating_duration_since(since) >= self.after {
                observed.due.push(key);
            } else {
                observed.held.push(key);
            }
        }
        observed
    }

    /// Forget a key (acted on): its next run starts from zero.
    pub fn forget(&mut self, key: &K) {
        self.since.remove(key);
    }

    /// Has `key` been so, without a break, for `after` at `now`? Always with a zero `after`.
    pub fn is_due(&self, key: &K, now: Instant) -> bool {
        self.after.is_zero()
            || self.since.get(key).is_some_and(|since| now.saturating_duration_since(*since) >= self.after)
    }

    /// When `key`'s current run falls (or fell) due; `None` when it is not held (or with a zero
    /// `after`, where nothing is held).
    pub fn due_at(&self, key: &K) -> Option<Instant> {
        self.since.get(key).map(|since| *since + self.after)
    }

    /// End the runs of the keys `ended` says are no longer so (seen between observations), and
    /// keep the others.
    pub fn end(&mut self, mut ended: impl FnMut(&K) -> bool) {
        self.since.retain(|k, _| !ended(k));
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.since.len()
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(10);

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn due_only_after_an_unbroken_run() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        let all = |_: &&str| true;
        let first = hold.observe(t0, ["a"], all);
        assert_eq!(first, Observed { due: vec![], held: vec!["a"], started: vec![("a", at(t0, 10))] });
        assert_eq!(hold.observe(at(t0, 9), ["a"], all).held, ["a"]);
        assert_eq!(hold.observe(at(t0, 10), ["a"], all).due, ["a"]);
        assert_eq!(hold.due_at(&"a"), Some(at(t0, 10)));
        assert_eq!(hold.due_at(&"b"), None);
    }

    #[test]
    fn one_observation_without_the_key_starts_it_again() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        let all = |_: &&str| true;
        hold.observe(t0, ["a"], all);
        hold.observe(at(t0, 5), [], all); // the record named it again, for a moment
        let again = hold.observe(at(t0, 11), ["a"], all);
        assert_eq!(again.held, ["a"], "the run restarted at 11 s");
        assert_eq!(again.started, [("a", at(t0, 21))]);
        assert_eq!(hold.observe(at(t0, 21), ["a"], all).due, ["a"]);
    }

    #[test]
    fn keys_out_of_scope_keep_their_runs() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, [("ns-a", "x"), ("ns-b", "y")], |_| true);
        // A pass over ns-a alone says nothing of ns-b.
        hold.observe(at(t0, 5), [], |k: &(&str, &str)| k.0 == "ns-a");
        let later = hold.observe(at(t0, 10), [("ns-b", "y")], |k: &(&str, &str)| k.0 == "ns-b");
        assert_eq!(later.due, [("ns-b", "y")]);
        assert_eq!(hold.len(), 1, "ns-a's run ended");
    }

    #[test]
    fn runs_ended_between_observations_start_again() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, ["a", "b"], |_| true);
        hold.end(|k| *k == "a");
        assert!(!hold.is_due(&"a", at(t0, 10)) && hold.is_due(&"b", at(t0, 10)));
        let later = hold.observe(at(t0, 10), ["a", "b"], |_| true);
        assert_eq!((later.due, later.held), (vec!["b"], vec!["a"]));
    }

    #[test]
    fn zero_holds_nothing() {
        let mut hold = Hold::new(Duration::ZERO);
        let now = hold.observe(Instant::now(), ["a", "b"], |_| true);
        assert_eq!(now.due, ["a", "b"]);
        assert!(hold.is_empty());
    }

    #[test]
    fn forgotten_keys_start_from_zero() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, ["a"], |_| true);
        hold.forget(&"a");
        assert_eq!(hold.observe(at(t0, 10), ["a"], |_| true).held, ["a"]);
    }
}
