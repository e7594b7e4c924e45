//! Pacing: turns handed out at most so many a second, to whoever asks first.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::index::clock;

/// What asking for a turn within a bound came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// This caller's turn: go.
    Taken,
    /// Not within the bound: the next turn would come at this instant.
    At(Instant),
    /// Closed (shutdown): no more turns.
    Closed,
}

/// Hands out start times at least `pace` apart, across every task of the process that takes
/// from it: the pruner's deletions (a withdrawal spread over many namespaces, each its own pass,
/// is paced as one), the producer's record writes, the lists of a
/// [`ListBudget`](crate::index::source::budget::ListBudget).
#[derive(Debug)]
pub struct Pacer {
    pace: Duration,
    next: Mutex<Option<Instant>>,
    /// Closed at shutdown: no more turns, so only the DELETEs already sent are waited for.
    closed: CancellationToken,
}

impl Pacer {
    /// At most `per_second` turns a second (one every 1,000 s at the least); 0 or less: no
    /// pacing.
    pub fn per_second(per_second: f64) -> Self {
        let pace = if per_second > 0.0 { Duration::from_secs_f64(1.0 / per_second.max(0.001)) } else { Duration::ZERO };
        Pacer::new(pace)
    }

    pub fn new(pace: Duration) -> Self {
        Pacer { pace, next: Mutex::new(None), closed: CancellationToken::new() }
    }

    /// Hand out no more turns once `closed` is cancelled (shutdown): no worker polled in the same
    /// instant takes one after it.
    pub fn closed_by(mut self, closed: CancellationToken) -> Self {
        self.closed = closed;
        self
    }

    /// Hand out no more turns.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Wait until this caller's turn: the first at once, each later one `pace` after the last.
    /// False once closed: the caller does not delete.
    pub async fn turn(&self) -> bool {
        self.turn_within(Duration::MAX).await == Turn::Taken
    }

    /// [`turn`](Self::turn), if it comes within `wait`; if not, when it would come, and no turn
    /// is taken (the caller asks again then, and the others' turns are not pushed back).
    pub async fn turn_within(&self, wait: Duration) -> Turn {
        if self.closed.is_cancelled() {
            return Turn::Closed;
        }
        if self.pace.is_zero() {
            return Turn::Taken;
        }
        let at = {
            let mut next = self.next.lock();
            let now = clock::now();
            let at = next.map_or(now, |next| next.max(now));
            if at.saturating_duration_since(now) > wait {
                return Turn::At(at);
            }
            *next = Some(at + self.pace);
            at
        };
        tokio::select! {
            () = tokio::time::sleep_until(at.into()) => Turn::Taken,
            () = self.closed.cancelled() => Turn::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_turn_beyond_the_bound_is_not_taken_and_pushes_nobody_back() {
        let pacer = Pacer::new(Duration::from_millis(400));
        let start = clock::now();
        assert_eq!(pacer.turn_within(Duration::from_secs(1)).await, Turn::Taken);
        assert_eq!(pacer.turn_within(Duration::from_secs(1)).await, Turn::Taken, "400 ms on");
        let asked = clock::now();
        assert_eq!(pacer.turn_within(Duration::from_millis(100)).await, Turn::At(asked + Duration::from_millis(400)));
        assert!(pacer.turn().await, "the turn refused is still the next one");
        assert_eq!(clock::since(start), Duration::from_millis(800));
        pacer.close();
        assert_eq!(pacer.turn_within(Duration::MAX).await, Turn::Closed);
    }
}
