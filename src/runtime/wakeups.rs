//! When a controller loop looks at something: whenever a change is marked, on every resync tick,
//! and whenever leadership changes. Shared by the pruner and the producer, which turn each wakeup
//! into keys of their work queue (a key asked for at a later instant is the queue's
//! [`add_at`](crate::runtime::queue::WorkQueue::add_at)).

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::index::dirty::Dirty;

/// Why a loop looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wakeup<T> {
    /// These were marked changed since the last look, each once.
    Changes(Vec<T>),
    /// The start, or leadership changed: look at everything, now.
    Everything,
    /// A resync tick after the first: look at everything, spread over the period
    /// ([`WorkQueue::spread`](crate::runtime::queue::WorkQueue::spread)), so a sweep of every key
    /// never stands in front of the changes asked for meanwhile.
    Resync,
}

/// The sources of wakeups of one controller loop.
pub struct Wakeups<T> {
    changes: Dirty<T>,
    tick: tokio::time::Interval,
    leader: watch::Receiver<bool>,
    /// Closed when leadership can no longer change (no election): the last value stands.
    leader_open: bool,
    /// The first tick (at once) has come.
    started: bool,
}

impl<T: Ord> Wakeups<T> {
    pub fn new(changes: Dirty<T>, resync: Duration, leader: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Wakeups { changes, tick, leader, leader_open: true, started: false }
    }

    /// The next wakeup; `None` on shutdown.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Wakeup<T>> {
        loop {
            return tokio::select! {
                () = shutdown.cancelled() => None,
                _ = self.tick.tick() => Some(if std::mem::replace(&mut self.started, true) { Wakeup::Resync } else { Wakeup::Everything }),
                changes = self.changes.next() => Some(Wakeup::Changes(changes)),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_one_wakeup_naming_each_once() {
        let changes = Dirty::default();
        let (_, leader) = watch::channel(true);
        let mut wakeups = Wakeups::new(changes.clone(), Duration::from_secs(3600), leader);
        let shutdown = CancellationToken::new();
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Everything), "the first tick");
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Resync), "a later tick");
        for _ in 0..1000 {
            changes.mark("a");
            changes.mark("b");
        }
        assert_eq!(wakeups.next(&shutdown).await, Some(Wakeup::Changes(vec!["a", "b"])));
        let more = tokio::time::timeout(Duration::from_secs(1), wakeups.next(&shutdown)).await;
        assert!(more.is_err(), "nothing more was marked: {more:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_ends_the_wakeups() {
        let (_, leader) = watch::channel(true);
        let mut wakeups = Wakeups::new(Dirty::<u8>::default(), Duration::from_secs(3600), leader);
        let shutdown = CancellationToken::new();
        let _ = wakeups.next(&shutdown).await;
        shutdown.cancel();
        assert_eq!(wakeups.next(&shutdown).await, None);
    }
}
