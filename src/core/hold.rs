//! Withdrawals held until they have lasted: the pruner's grace (a copy its record names none of)
//! and the producer's withdraw-after (an address its answer lacks) are one mechanism. A key
//! becomes due only once it has been observed so at every observation for `after`; one
//! observation without it starts it again from zero.
//!
//! Pure: the caller passes the time, so the tests state exact instants.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use super::plan::Scope;

/// A held key belongs to one namespace: an observation of one namespace touches its keys only,
/// so a mass withdrawal over N namespaces costs N observations of one each, not N².
pub trait Namespaced {
    fn namespace(&self) -> &str;
}

impl<N: AsRef<str>, A> Namespaced for (N, A) {
    fn namespace(&self) -> &str {
        self.0.as_ref()
    }
}

impl<N: AsRef<str>, A, B> Namespaced for (N, A, B) {
    fn namespace(&self) -> &str {
        self.0.as_ref()
    }
}

/// When each held key was first observed, in its current unbroken run, by namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold<K: Hash + Eq> {
    after: Duration,
    since: HashMap<String, HashMap<K, Instant>>,
}

/// Equal holds hash alike whatever their maps' order: a model checker keeps them in its states.
impl<K: Hash + Ord> Hash for Hold<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.after.hash(state);
        let mut runs: Vec<(&String, &K, &Instant)> =
            self.since.iter().flat_map(|(ns, runs)| runs.iter().map(move |(k, t)| (ns, k, t))).collect();
        runs.sort_unstable();
        runs.hash(state);
    }
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

impl<K: Namespaced + Hash + Eq + Clone> Hold<K> {
    pub fn new(after: Duration) -> Self {
        Hold { after, since: HashMap::new() }
    }

    /// Observe at `now` that exactly `keys` are so in `scope` (one namespace, or all): every
    /// other key there is not (its run ends); keys of other namespaces are left as they were.
    /// Keys outside `scope` are ignored.
    pub fn observe(&mut self, now: Instant, scope: &Scope, keys: impl IntoIterator<Item = K>) -> Observed<K> {
        let mut observed = Observed { due: Vec::new(), held: Vec::new(), started: Vec::new() };
        let in_scope = |k: &K| match scope {
            Scope::Namespace(ns) => k.namespace() == ns,
            Scope::All => true,
        };
        let keys: Vec<K> = keys.into_iter().filter(in_scope).collect();
        if self.after.is_zero() {
            observed.due = keys;
            return observed;
        }
        let mut by_namespace: HashMap<String, HashMap<K, Instant>> = HashMap::new();
        match scope {
            Scope::Namespace(ns) => {
                by_namespace.insert(ns.clone(), self.since.remove(ns).unwrap_or_default());
            }
            Scope::All => by_namespace = std::mem::take(&mut self.since),
        }
        let mut kept: HashMap<String, HashMap<K, Instant>> = HashMap::new();
        for key in keys {
            let ns = key.namespace();
            let was = by_namespace.get_mut(ns).and_then(|runs| runs.remove(&key));
            let since = was.unwrap_or_else(|| {
                observed.started.push((key.clone(), now + self.after));
                now
            });
            if now.saturating_duration_since(since) >= self.after {
                observed.due.push(key.clone());
            } else {
                observed.held.push(key.clone());
            }
            kept.entry(ns.to_owned()).or_default().insert(key, since);
        }
        // What was held in scope and not observed now has ended; `kept` is the rest.
        self.since.extend(kept);
        observed
    }

    fn runs(&self, key: &K) -> Option<Instant> {
        self.since.get(key.namespace())?.get(key).copied()
    }

    /// Forget a key (acted on): its next run starts from zero.
    pub fn forget(&mut self, key: &K) {
        if let Some(runs) = self.since.get_mut(key.namespace()) {
            runs.remove(key);
            if runs.is_empty() {
                self.since.remove(key.namespace());
            }
        }
    }

    /// Has `key` been so, without a break, for `after` at `now`? Always with a zero `after`.
    pub fn is_due(&self, key: &K, now: Instant) -> bool {
        self.after.is_zero() || self.runs(key).is_some_and(|since| now.saturating_duration_since(since) >= self.after)
    }

    /// When `key`'s current run falls (or fell) due; `None` when it is not held (or with a zero
    /// `after`, where nothing is held).
    pub fn due_at(&self, key: &K) -> Option<Instant> {
        self.runs(key).map(|since| since + self.after)
    }

    /// End the runs of `namespace`'s keys that `ended` says are no longer so (seen between
    /// observations), and keep the others.
    pub fn end(&mut self, namespace: &str, mut ended: impl FnMut(&K) -> bool) {
        if let Some(runs) = self.since.get_mut(namespace) {
            runs.retain(|k, _| !ended(k));
            if runs.is_empty() {
                self.since.remove(namespace);
            }
        }
    }

    /// End every run in the namespaces `ended` names.
    pub fn end_namespaces(&mut self, mut ended: impl FnMut(&str) -> bool) {
        self.since.retain(|ns, _| !ended(ns));
    }

    /// The namespaces with keys held.
    pub fn namespaces(&self) -> impl Iterator<Item = String> + '_ {
        self.since.keys().cloned()
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.since.values().map(HashMap::len).sum()
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

    fn ns(name: &str) -> Scope {
        Scope::Namespace(name.to_owned())
    }

    const A: (&str, &str) = ("ns", "a");
    const B: (&str, &str) = ("ns", "b");

    #[test]
    fn due_only_after_an_unbroken_run() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        let first = hold.observe(t0, &ns("ns"), [A]);
        assert_eq!(first, Observed { due: vec![], held: vec![A], started: vec![(A, at(t0, 10))] });
        assert_eq!(hold.observe(at(t0, 9), &ns("ns"), [A]).held, [A]);
        assert_eq!(hold.observe(at(t0, 10), &Scope::All, [A]).due, [A]);
        assert_eq!(hold.due_at(&A), Some(at(t0, 10)));
        assert_eq!(hold.due_at(&B), None);
    }

    #[test]
    fn one_observation_without_the_key_starts_it_again() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, &ns("ns"), [A]);
        hold.observe(at(t0, 5), &ns("ns"), []); // the record named it again, for a moment
        let again = hold.observe(at(t0, 11), &ns("ns"), [A]);
        assert_eq!(again.held, [A], "the run restarted at 11 s");
        assert_eq!(again.started, [(A, at(t0, 21))]);
        assert_eq!(hold.observe(at(t0, 21), &ns("ns"), [A]).due, [A]);
        assert!(hold.observe(at(t0, 22), &Scope::All, []).due.is_empty());
        assert!(hold.is_empty(), "a pass over everything ends every run it did not see");
    }

    #[test]
    fn keys_of_other_namespaces_keep_their_runs() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, &Scope::All, [("ns-a", "x"), ("ns-b", "y")]);
        // A pass over ns-a alone says nothing of ns-b; a key of another namespace is ignored.
        let a = hold.observe(at(t0, 5), &ns("ns-a"), [("ns-b", "z")]);
        assert!(a.started.is_empty() && a.held.is_empty());
        let later = hold.observe(at(t0, 10), &ns("ns-b"), [("ns-b", "y")]);
        assert_eq!(later.due, [("ns-b", "y")]);
        assert_eq!(hold.len(), 1, "ns-a's run ended");
    }

    #[test]
    fn runs_ended_between_observations_start_again() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, &ns("ns"), [A, B]);
        hold.end("ns", |k| *k == A);
        hold.end("elsewhere", |_| true);
        assert!(!hold.is_due(&A, at(t0, 10)) && hold.is_due(&B, at(t0, 10)));
        let later = hold.observe(at(t0, 10), &ns("ns"), [A, B]);
        assert_eq!((later.due, later.held), (vec![B], vec![A]));
        hold.end_namespaces(|n| n == "ns");
        assert!(hold.is_empty());
    }

    #[test]
    fn zero_holds_nothing() {
        let mut hold = Hold::new(Duration::ZERO);
        let now = hold.observe(Instant::now(), &ns("ns"), [A, B]);
        assert_eq!(now.due, [A, B]);
        assert!(hold.is_empty());
    }

    #[test]
    fn forgotten_keys_start_from_zero() {
        let t0 = Instant::now();
        let mut hold = Hold::new(AFTER);
        hold.observe(t0, &ns("ns"), [A]);
        hold.forget(&A);
        assert!(hold.is_empty());
        assert_eq!(hold.observe(at(t0, 10), &ns("ns"), [A]).held, [A]);
    }

    /// One namespace's observation touches its own keys only: its cost does not grow with the
    /// keys held elsewhere. A mass withdrawal over N namespaces is N such observations; before
    /// holds were keyed by namespace each one passed over every held key (N² in all: at 10,000
    /// namespaces about 2,000 times the cost at 10). Bounds are generous (a loaded machine): 5×.
    #[test]
    fn one_namespace_costs_the_same_among_10_or_10000() {
        fn cost(namespaces: usize) -> Duration {
            let t0 = Instant::now();
            let mut hold = Hold::new(AFTER);
            let names: Vec<String> = (0..namespaces).map(|n| format!("ns-{n}")).collect();
            for name in &names {
                hold.observe(t0, &Scope::Namespace(name.clone()), [(name.clone(), "a"), (name.clone(), "b")]);
            }
            let one = Scope::Namespace(names[0].clone());
            let mut samples: Vec<Duration> = (0..201)
                .map(|i| {
                    let keys = [(names[0].clone(), "a"), (names[0].clone(), "b")];
                    let started = Instant::now();
                    std::hint::black_box(hold.observe(at(t0, i % 5), &one, keys));
                    started.elapsed()
                })
                .collect();
            samples.sort_unstable();
            samples[samples.len() / 2]
        }
        let (few, many) = (cost(10), cost(10_000));
        eprintln!("one namespace's observation: {few:?} among 10 namespaces, {many:?} among 10,000");
        assert!(many <= few * 5 + Duration::from_micros(20), "{few:?} among 10, {many:?} among 10,000");
    }
}
