//! When a controller runs a pass: on each change it is sent, on every resync tick, whenever
//! leadership changes, and when a pass it asked for [`Later`] falls due. Shared by the pruner
//! and the producer.

use std::collections::HashMap;
use std::future::poll_fn;
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

/// Why a pass runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wakeup<T> {
    /// Something was sent on the changes channel, or a pass asked for later fell due.
    Change(T),
    /// The resync tick, or leadership changed: look at everything.
    Everything,
}

/// The farthest ahead a pass is asked for (see [`Later::at`]).
const FARTHEST: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// Passes asked for at a later instant (a held copy's grace ends, a withdrawal falls due, a
/// failed write is retried), each key once at the earliest instant asked: one timer queue for
/// all of them, polled by the loop's [`Wakeups`], instead of a sleeping task per request. Its size
/// is bounded by the number of distinct keys (namespaces, plus "everything").
pub struct Later<T>(Arc<Mutex<Queue<T>>>);

struct Queue<T> {
    due: DelayQueue<T>,
    /// Each key queued, with its entry and its instant: a key asked for again keeps the earlier.
    queued: HashMap<T, (delay_queue::Key, Instant)>,
}

impl<T> Clone for Later<T> {
    fn clone(&self) -> Self {
        Later(Arc::clone(&self.0))
    }
}

impl<T: Clone + Eq + Hash> Default for Later<T> {
    fn default() -> Self {
        Later(Arc::new(Mutex::new(Queue { due: DelayQueue::new(), queued: HashMap::new() })))
    }
}

impl<T: Clone + Eq + Hash> Later<T> {
    /// Run a pass for `key` at `at`, or sooner if one is queued sooner. Must be called inside the
    /// Tokio runtime (the queue's timer).
    pub fn at(&self, key: T, at: Instant) {
        // tokio-util's timer wheel panics beyond about two years; a pass asked for that far off
        // (a "never" grace) comes round a year from now instead, and finds it not due yet.
        let at = at.min(crate::index::clock::now() + FARTHEST);
        let mut queue = self.0.lock();
        let Queue { due, queued } = &mut *queue;
        match queued.get_mut(&key) {
            Some((_, queued_at)) if *queued_at <= at => {}
            Some((entry, queued_at)) => {
                due.reset_at(entry, at.into());
                *queued_at = at;
            }
            None => {
                let entry = due.insert_at(key.clone(), at.into());
                queued.insert(key, (entry, at));
            }
        }
    }

    /// How many keys are queued.
    pub fn len(&self) -> usize {
        self.0.lock().queued.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key due; pending while none is (the queue's timer, or an insert, wakes the task).
    fn poll_due(&self, cx: &mut Context<'_>) -> Poll<T> {
        let mut queue = self.0.lock();
        match queue.due.poll_expired(cx) {
            Poll::Ready(Some(expired)) => {
                let key = expired.into_inner();
                queue.queued.remove(&key);
                Poll::Ready(key)
            }
            // Empty: the queue keeps the waker and wakes it on the next insert.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }
}

/// The sources of wakeups of one controller loop.
pub struct Wakeups<T> {
    changes: mpsc::UnboundedReceiver<T>,
    later: Option<Later<T>>,
    tick: tokio::time::Interval,
    leader: watch::Receiver<bool>,
    /// Closed when leadership can no longer change (no election): the last value stands.
    leader_open: bool,
}

impl<T: Clone + Eq + Hash> Wakeups<T> {
    pub fn new(changes: mpsc::UnboundedReceiver<T>, resync: Duration, leader: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Wakeups { changes, later: None, tick, leader, leader_open: true }
    }

    /// Also wake for the passes asked for on `later` as they fall due.
    pub fn with_later(mut self, later: Option<Later<T>>) -> Self {
        self.later = later;
        self
    }

    /// The next wakeup; `None` on shutdown or when the changes channel has closed.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Wakeup<T>> {
        let later = self.later.clone();
        loop {
            return tokio::select! {
                () = shutdown.cancelled() => None,
                _ = self.tick.tick() => Some(Wakeup::Everything),
                change = self.changes.recv() => change.map(Wakeup::Change),
                key = poll_fn(|cx| later.as_ref().map_or(Poll::Pending, |l| l.poll_due(cx))) => {
                    Some(Wakeup::Change(key))
                }
                changed = self.leader.changed(), if self.leader_open => match changed {
                    Ok(()) => Some(Wakeup::Everything),
                    Err(_) => {
                        self.leader_open = false;
                        continue;
                    }
                },
            };
        }
    }

    /// A change already waiting (sent, or asked for later and due now), if any: what a burst of
    /// events adds to the pass at hand.
    pub fn try_next_change(&mut self) -> Option<T> {
        if let Ok(change) = self.changes.try_recv() {
            return Some(change);
        }
        // Polled without a task to wake: the next `next` polls again with its own.
        let mut cx = Context::from_waker(Waker::noop());
        match self.later.as_ref()?.poll_due(&mut cx) {
            Poll::Ready(key) => Some(key),
            Poll::Pending => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wakeups(later: &Later<&'static str>) -> (Wakeups<&'static str>, mpsc::UnboundedSender<&'static str>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (_, leader) = watch::channel(true);
        (Wakeups::new(rx, Duration::from_secs(3600), leader).with_later(Some(later.clone())), tx)
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_asked_for_twice_comes_once_at_the_earlier_instant() {
        let later = Later::default();
        let (mut wakeups, _tx) = wakeups(&later);
        let shutdown = CancellationToken::new();
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Everything), "the first tick");
        // The paused clock's instants: what the queue's timer goes by.
        let t0 = tokio::time::Instant::now();
        let at = |secs| (t0 + Duration::from_secs(secs)).into_std();
        later.at("a", at(10));
        later.at("a", at(5));
        later.at("a", at(20));
        later.at("b", at(7));
        assert_eq!(later.len(), 2);
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Change("a")));
        assert!(t0.elapsed() >= Duration::from_secs(5) && t0.elapsed() < Duration::from_secs(6));
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Change("b")));
        assert!(later.is_empty(), "each key once");
        later.at("a", at(8));
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Change("a")), "asked again once fired");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_asked_for_years_ahead_comes_round_in_a_year() {
        let later = Later::default();
        let (mut wakeups, _tx) = wakeups(&later);
        let shutdown = CancellationToken::new();
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Everything), "the first tick");
        let t0 = tokio::time::Instant::now();
        later.at("far", (t0 + Duration::from_secs(10 * 365 * 24 * 3600)).into_std());
        let next = wakeups.next(&shutdown).await;
        assert!(matches!(next, Some(Wakeup::Change("far") | Wakeup::Everything)), "{next:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_due_joins_the_batch_at_hand() {
        let later = Later::default();
        let (mut wakeups, tx) = wakeups(&later);
        let shutdown = CancellationToken::new();
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Everything), "the first tick");
        later.at("due", tokio::time::Instant::now().into_std());
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = tx.send("sent");
        assert!(wakeups.next(&shutdown).await.is_some());
        assert!(wakeups.try_next_change().is_some(), "the other one, without waiting");
        assert_eq!(wakeups.try_next_change(), None);
    }
}
