//! A budget for lists against one API server: at most so many in flight, started at most so many
//! a second. A producer engaging a thousand projects at once (a cold start, a failover, Milo
//! coming back) would otherwise send thousands of lists in the same second; within the budget
//! they come at a pace the server is sized for, and the last project is whole a known time later.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::index::pace::Pacer;

/// Lists in flight and their start pace, shared by every watch that takes from it.
#[derive(Debug)]
pub struct ListBudget {
    in_flight: Arc<Semaphore>,
    pacer: Pacer,
}

impl ListBudget {
    /// At most `in_flight` lists at once (at least 1), started at most `per_second` a second
    /// (0: unpaced).
    pub fn new(in_flight: usize, per_second: f64) -> Arc<Self> {
        Arc::new(ListBudget {
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
            pacer: Pacer::per_second(per_second),
        })
    }

    /// Wait for a list's turn; the list may run while the permit is held.
    pub async fn take(&self) -> Option<OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.in_flight).acquire_owned().await.ok()?;
        self.pacer.turn().await.then_some(permit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A hundred lists wanting to start at once, with 4 in flight and 50 a second: they start
    /// 20 ms apart, never more than 4 held.
    #[tokio::test(start_paused = true)]
    async fn lists_start_at_the_pace_and_no_more_than_allowed_run() {
        let budget = ListBudget::new(4, 50.0);
        let started = tokio::time::Instant::now();
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (budget, held, most) = (Arc::clone(&budget), Arc::clone(&held), Arc::clone(&most));
                tokio::spawn(async move {
                    let _permit = budget.take().await;
                    let now = held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await; // the list
                    held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        let took = started.elapsed();
        assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 4);
        assert!(took >= Duration::from_millis(99 * 20), "paced: {took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}
