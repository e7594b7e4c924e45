//! When a controller runs a pass: on each change it is sent, on every resync tick, and whenever
//! leadership changes. Shared by the pruner and the producer.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Why a pass runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wakeup<T> {
    /// Something was sent on the changes channel.
    Change(T),
    /// The resync tick, or leadership changed: look at everything.
    Everything,
}

/// The sources of wakeups of one controller loop.
pub struct Wakeups<T> {
    changes: mpsc::UnboundedReceiver<T>,
    tick: tokio::time::Interval,
    leader: watch::Receiver<bool>,
    /// Closed when leadership can no longer change (no election): the last value stands.
    leader_open: bool,
}

impl<T> Wakeups<T> {
    pub fn new(changes: mpsc::UnboundedReceiver<T>, resync: Duration, leader: watch::Receiver<bool>) -> Self {
        let mut tick = tokio::time::interval(resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Wakeups { changes, tick, leader, leader_open: true }
    }

    /// The next wakeup; `None` on shutdown or when the changes channel has closed.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> Option<Wakeup<T>> {
        loop {
            return tokio::select! {
                () = shutdown.cancelled() => None,
                _ = self.tick.tick() => Some(Wakeup::Everything),
                change = self.changes.recv() => change.map(Wakeup::Change),
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

    /// A change already waiting, if any: what a burst of events adds to the pass at hand.
    pub fn try_next_change(&mut self) -> Option<T> {
        self.changes.try_recv().ok()
    }
}
