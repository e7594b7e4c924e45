//! A keyed work queue, as client-go's workqueue and kube-runtime's scheduler and runner are: what
//! is queued is a set of dirty keys (a hub namespace), not one message per event, so its depth is
//! bounded by the distinct keys however many events arrive; a key is worked by one worker at a
//! time (added while worked, it is worked once more after); a key asked for at a later instant
//! waits until then, the earliest instant asked winning; a failed key comes back after its own
//! jittered exponential backoff (backon), while the others go on.
//!
//! Our own rather than kube-runtime's `Controller`: its applier works only keys present in its
//! reflector's store (a hub namespace is worked from two watches and the project control planes,
//! none of them one store), and its scheduler and runner are private.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::ExponentialBackoff;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How a key's work ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: its backoff is forgotten.
    Done,
    /// Failed: worked again after its backoff, which grows with each failure in a row.
    Retry,
    /// Not worked (nothing could be done now; what asks for it again will): its backoff stays
    /// as it was, so a failure after it waits longer still.
    NotWorked,
}

/// The first retry's wait, before jitter; each next one doubles, up to [`RETRY_AT_MOST`].
pub const RETRY_FIRST: Duration = Duration::from_secs(2);

/// The longest wait before a failed key is worked again, before jitter.
pub const RETRY_AT_MOST: Duration = Duration::from_secs(60);

/// A keyed work queue (see the module's doc). Cloned handles share one queue.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    /// Told whenever a key may have become workable.
    ready: Arc<Notify>,
    retries: Arc<AtomicU64>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue { state: Arc::clone(&self.state), ready: Arc::clone(&self.ready), retries: Arc::clone(&self.retries) }
    }
}

struct State<K> {
    /// Keys to work now, in the order they were asked for, and since when each waits.
    ready: VecDeque<K>,
    waiting_since: HashMap<K, Instant>,
    /// Keys asked for at a later instant (a sequence number keeps equal instants apart), and
    /// the same in the order they fall due.
    later: HashMap<K, (Instant, u64)>,
    due: BTreeMap<(Instant, u64), K>,
    sequence: u64,
    /// Keys being worked, and those of them asked for again meanwhile.
    working: HashSet<K>,
    again: HashSet<K>,
    /// Each failing key's backoff: the next wait is its next item.
    backoffs: HashMap<K, ExponentialBackoff>,
}

impl<K> Default for State<K> {
    fn default() -> Self {
        State {
            ready: VecDeque::new(),
            waiting_since: HashMap::new(),
            later: HashMap::new(),
            due: BTreeMap::new(),
            sequence: 0,
            working: HashSet::new(),
            again: HashSet::new(),
            backoffs: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Ask for `key` now; true if it became workable.
    fn now(&mut self, key: K, now: Instant) -> bool {
        self.forget_later(&key);
        if self.working.contains(&key) {
            self.again.insert(key);
            return false;
        }
        if self.waiting_since.contains_key(&key) {
            return false;
        }
        self.waiting_since.insert(key.clone(), now);
        self.ready.push_back(key);
        true
    }

    /// Ask for `key` at `at`, unless it is asked for as soon or sooner already.
    fn at(&mut self, key: K, at: Instant) {
        if self.again.contains(&key) || self.waiting_since.contains_key(&key) {
            return;
        }
        if self.later.get(&key).is_some_and(|(queued, _)| *queued <= at) {
            return;
        }
        self.forget_later(&key);
        self.sequence += 1;
        self.due.insert((at, self.sequence), key.clone());
        self.later.insert(key, (at, self.sequence));
    }

    fn forget_later(&mut self, key: &K) {
        if let Some(entry) = self.later.remove(key) {
            self.due.remove(&entry);
        }
    }

    /// Move the keys due by `now` to the ready ones; the next instant one falls due.
    fn promote(&mut self, now: Instant) -> Option<Instant> {
        while let Some((&(at, _), _)) = self.due.first_key_value() {
            if at > now {
                return Some(at);
            }
            if let Some((_, key)) = self.due.pop_first() {
                self.later.remove(&key);
                self.now(key, at);
            }
        }
        None
    }

    /// The next key to work, now claimed.
    fn claim(&mut self) -> Option<K> {
        let key = self.ready.pop_front()?;
        self.waiting_since.remove(&key);
        self.working.insert(key.clone());
        Some(key)
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue { state: Arc::default(), ready: Arc::new(Notify::new()), retries: Arc::default() }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Work `key` as soon as a worker is free (once more after, if it is being worked now).
    pub fn add(&self, key: K) {
        if self.state.lock().now(key, crate::index::clock::now()) {
            self.ready.notify_one();
        }
    }

    /// Work `key` at `at`, or sooner if it is asked for sooner.
    pub fn add_at(&self, key: K, at: Instant) {
        if at <= crate::index::clock::now() {
            return self.add(key);
        }
        self.state.lock().at(key, at);
        // A worker waiting for a later instant waits for this one if it is sooner.
        self.ready.notify_waiters();
    }

    /// Work `keys` spread evenly over `over` from now, the first at once (a resync's every key):
    /// each at an instant of its own, so a sweep of ten thousand never stands in front of the
    /// keys asked for meanwhile. A key asked for sooner (a change) is worked sooner.
    pub fn spread(&self, keys: impl IntoIterator<Item = K>, over: Duration) {
        let keys: Vec<K> = keys.into_iter().collect();
        let (now, count) = (crate::index::clock::now(), keys.len().max(1));
        let mut state = self.state.lock();
        for (i, key) in keys.into_iter().enumerate() {
            #[allow(clippy::cast_precision_loss)] // at most a few hundred thousand keys
            let share = i as f64 / count as f64;
            // A period too long to add to the clock: every key now.
            match now.checked_add(over.mul_f64(share)).filter(|at| *at > now) {
                Some(at) => state.at(key, at),
                None => {
                    state.now(key, now);
                }
            }
        }
        drop(state);
        self.ready.notify_waiters();
        self.ready.notify_one();
    }

    /// How many distinct keys wait (now or later, or once more after their work): a resync's
    /// spread sweep counts whole, the oldest wait ([`WorkQueue::oldest`]) says whether any is late.
    pub fn depth(&self) -> usize {
        let state = self.state.lock();
        state.ready.len() + state.later.len() + state.again.len()
    }

    /// How long the key waiting longest to be worked has waited: the ready ones since they were
    /// asked for, the ones asked for later since their instant passed (no worker free to move
    /// them yet).
    pub fn oldest(&self) -> Duration {
        let state = self.state.lock();
        let now = crate::index::clock::now();
        let ready = state.waiting_since.values().min().copied();
        let overdue = state.due.first_key_value().map(|((at, _), _)| *at).filter(|at| *at <= now);
        ready.into_iter().chain(overdue).min().map(|since| now.saturating_duration_since(since)).unwrap_or_default()
    }

    /// How many times a key has been put back after a failure.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The next key to work, claimed until its [`Claim`] is finished or dropped; `None` once
    /// `shutdown` is cancelled.
    pub async fn next(&self, shutdown: &CancellationToken) -> Option<Claim<K>> {
        loop {
            // Stopping: the work in hand finishes, nothing more starts.
            if shutdown.is_cancelled() {
                return None;
            }
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_due = {
                let mut state = self.state.lock();
                let next_due = state.promote(crate::index::clock::now());
                if let Some(key) = state.claim() {
                    let more = !state.ready.is_empty();
                    drop(state);
                    if more {
                        // Another worker may take the next one.
                        self.ready.notify_one();
                    }
                    return Some(Claim { key: Some(key), queue: self.clone() });
                }
                next_due
            };
            let sleep = async {
                match next_due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = notified => {}
                () = sleep => {}
            }
        }
    }

    fn finish(&self, key: K, outcome: Outcome) {
        let mut state = self.state.lock();
        state.working.remove(&key);
        let again = state.again.remove(&key);
        match outcome {
            Outcome::Done => {
                state.backoffs.remove(&key);
            }
            Outcome::NotWorked => {}
            Outcome::Retry => {
                let wait = state
                    .backoffs
                    .entry(key.clone())
                    .or_insert_with(|| crate::index::backoff::backoff(RETRY_FIRST, RETRY_AT_MOST))
                    .next()
                    .unwrap_or(RETRY_AT_MOST);
                self.retries.fetch_add(1, Ordering::Relaxed);
                if !again {
                    state.at(key.clone(), crate::index::clock::now() + wait);
                }
            }
        }
        if again {
            // Asked for while it was worked: what changed meanwhile is worked now.
            state.now(key, crate::index::clock::now());
        }
        drop(state);
        self.ready.notify_waiters();
    }
}

/// A key being worked: no other worker gets it until this is finished (or dropped: done).
pub struct Claim<K: Clone + Eq + Hash + Send + 'static> {
    key: Option<K>,
    queue: WorkQueue<K>,
}

impl<K: Clone + Eq + Hash + Send + 'static> Claim<K> {
    pub fn key(&self) -> &K {
        self.key.as_ref().expect("a claim holds its key until finished")
    }

    pub fn finish(mut self, outcome: Outcome) {
        if let Some(key) = self.key.take() {
            self.queue.finish(key, outcome);
        }
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Drop for Claim<K> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.queue.finish(key, Outcome::Done);
        }
    }
}

/// Work `queue` with `workers` workers, each calling `work` on the keys it claims, until
/// `shutdown`: a worker finishes the key in hand first, so work under way (a write sent) ends
/// before this returns.
pub async fn work<K, F, Fut>(queue: WorkQueue<K>, workers: usize, shutdown: CancellationToken, work: F)
where
    K: Clone + Eq + Hash + Send + 'static,
    F: Fn(K) -> Fut + Clone,
    Fut: Future<Output = Outcome>,
{
    let worker = |_| {
        let (queue, shutdown, work) = (queue.clone(), shutdown.clone(), work.clone());
        async move {
            while let Some(claim) = queue.next(&shutdown).await {
                let outcome = work(claim.key().clone()).await;
                claim.finish(outcome);
            }
        }
    };
    futures::future::join_all((0..workers.max(1)).map(worker)).await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Run `work` over `queue` with `workers` workers in the background until the token is
    /// cancelled.
    fn spawn<F, Fut>(queue: &WorkQueue<&'static str>, workers: usize, work: F) -> CancellationToken
    where
        F: Fn(&'static str) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        tokio::spawn(super::work(queue.clone(), workers, shutdown.clone(), work));
        shutdown
    }

    type Log = Arc<Mutex<Vec<(&'static str, Instant)>>>;

    fn logged(log: &Log, key: &str) -> usize {
        log.lock().iter().filter(|(k, _)| *k == key).count()
    }

    /// Work `queue` with `workers` workers, each key logged with when it was worked, and ended as
    /// `act` says (`None`: it hangs).
    fn logging(queue: &WorkQueue<&'static str>, workers: usize, act: fn(&str) -> Option<Outcome>) -> Log {
        let log: Log = Arc::default();
        let seen = Arc::clone(&log);
        // Until the test's runtime ends (dropping the token cancels nothing).
        spawn(queue, workers, move |key| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().push((key, tokio::time::Instant::now().into_std()));
                match act(key) {
                    Some(outcome) => outcome,
                    None => std::future::pending().await,
                }
            }
        });
        log
    }

    /// A resync's sweep spread over its period: at any instant only its share is ready, and a
    /// key asked for meanwhile (a change) is worked at once, not after the sweep.
    #[tokio::test(start_paused = true)]
    async fn a_spread_sweep_does_not_stand_in_front_of_a_change() {
        let queue = WorkQueue::new();
        let log = logging(&queue, 1, |_| Some(Outcome::Done));
        let keys: Vec<&'static str> = (0..100).map(|n| &*Box::leak(format!("ns-{n}").into_boxed_str())).collect();
        queue.spread(keys.iter().copied(), Duration::from_secs(100));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(logged(&log, "ns-0"), 1, "the first at once");
        assert_eq!(logged(&log, "ns-50"), 0, "the others at their own instants");
        assert_eq!(queue.oldest(), Duration::ZERO, "keys asked for later are not behind");
        queue.add("ns-99");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(logged(&log, "ns-99"), 1, "a change worked at once, not behind the sweep");
        tokio::time::sleep(Duration::from_secs(50)).await;
        assert_eq!(logged(&log, "ns-50"), 1, "at its share of the period");
        tokio::time::sleep(Duration::from_secs(50)).await;
        assert!(keys.iter().all(|k| logged(&log, k) >= 1), "every key within the period");
        assert_eq!(logged(&log, "ns-99"), 1, "worked once: asked for sooner, not again later");
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_key_does_not_hold_the_others() {
        let queue = WorkQueue::new();
        let log = logging(&queue, 2, |key| (key != "hung").then_some(Outcome::Done));
        queue.add("hung");
        for key in ["a", "b", "c", "d"] {
            queue.add(key);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        for key in ["a", "b", "c", "d"] {
            assert_eq!(logged(&log, key), 1, "{key} worked beside the hung one");
        }
        assert_eq!(queue.depth(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn no_key_is_worked_twice_at_once_and_one_added_meanwhile_is_worked_once_more() {
        let queue = WorkQueue::new();
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let runs = Arc::new(AtomicUsize::new(0));
        let (n, m, r) = (Arc::clone(&now), Arc::clone(&most), Arc::clone(&runs));
        let _shutdown = spawn(&queue, 8, move |_| {
            let (n, m, r) = (Arc::clone(&n), Arc::clone(&m), Arc::clone(&r));
            async move {
                let at_once = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                r.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        });
        queue.add("ns");
        tokio::time::sleep(Duration::from_millis(10)).await;
        // A burst while it is worked: one more run, not a hundred.
        for _ in 0..100 {
            queue.add("ns");
        }
        assert_eq!(queue.depth(), 1, "bounded by the distinct keys");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(most.load(Ordering::SeqCst), 1, "never two workers on one key");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn depth_is_bounded_by_distinct_keys_while_work_is_stalled() {
        let queue = WorkQueue::new();
        let _shutdown = spawn(&queue, 8, |_| async {
            std::future::pending::<()>().await;
            Outcome::Done
        });
        let keys: Vec<String> = (0..100).map(|n| format!("ns-{n}")).collect();
        let keys: Vec<&'static str> = keys.into_iter().map(|k| &*Box::leak(k.into_boxed_str())).collect();
        for event in 0..10_000 {
            queue.add(keys[event % keys.len()]);
            if event == 100 {
                // The workers take eight and stall in them.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // 8 stalled in work (each asked for again since), the other 92 waiting.
        assert_eq!(queue.depth(), 100);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(queue.oldest(), Duration::from_millis(5010), "the oldest key's wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_key_comes_back_after_a_growing_jittered_wait_and_the_others_go_on() {
        let queue = WorkQueue::new();
        let log = logging(&queue, 1, |key| Some(if key == "failing" { Outcome::Retry } else { Outcome::Done }));
        let started = tokio::time::Instant::now().into_std();
        queue.add("failing");
        queue.add("fine");
        tokio::time::sleep(Duration::from_secs(20)).await;
        let runs: Vec<Duration> =
            log.lock().iter().filter(|(k, _)| *k == "failing").map(|(_, at)| *at - started).collect();
        assert_eq!(logged(&log, "fine"), 1);
        assert!(runs.len() >= 3, "{runs:?}");
        let waits: Vec<Duration> = runs.windows(2).map(|w| w[1] - w[0]).collect();
        // 2 s, then 4 s, each plus up to as much again of jitter.
        assert!(waits[0] >= RETRY_FIRST && waits[0] <= RETRY_FIRST * 2, "{waits:?}");
        assert!(waits[1] >= RETRY_FIRST * 2 && waits[1] <= RETRY_FIRST * 4, "{waits:?}");
        assert!(queue.retries() >= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_asked_for_later_is_worked_then_the_earliest_asked_winning() {
        let queue = WorkQueue::new();
        let log = logging(&queue, 2, |_| Some(Outcome::Done));
        let t0 = tokio::time::Instant::now().into_std();
        queue.add_at("ns", t0 + Duration::from_secs(10));
        queue.add_at("ns", t0 + Duration::from_secs(3));
        queue.add_at("ns", t0 + Duration::from_secs(7));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(logged(&log, "ns"), 0);
        tokio::time::sleep(Duration::from_secs(20)).await;
        let runs: Vec<Duration> = log.lock().iter().map(|(_, at)| *at - t0).collect();
        assert_eq!(runs, [Duration::from_secs(3)], "once, at the earliest instant asked");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_lets_the_work_in_hand_finish() {
        let queue = WorkQueue::new();
        let finished = Arc::new(AtomicUsize::new(0));
        let done = Arc::clone(&finished);
        let shutdown = CancellationToken::new();
        let workers = tokio::spawn(work(queue.clone(), 2, shutdown.clone(), move |_| {
            let done = Arc::clone(&done);
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                done.fetch_add(1, Ordering::SeqCst);
                Outcome::Done
            }
        }));
        queue.add("a");
        queue.add("b");
        queue.add("c");
        tokio::time::sleep(Duration::from_millis(10)).await;
        shutdown.cancel();
        workers.await.expect("workers");
        assert_eq!(finished.load(Ordering::SeqCst), 2, "the writes in flight completed, and no other started");
        assert_eq!(queue.depth(), 1, "c still waits");
    }
}
