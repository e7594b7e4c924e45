//! The time the timing rules read (the pruner's grace and pacing, the producer's withdraw-after,
//! Lease deadlines, the staleness bound): tokio's clock, so a test on a
//! paused runtime (`#[tokio::test(start_paused = true)]`) moves it without sleeping. Anywhere
//! else it is the monotonic clock, as `Instant::now()` is. Durations measured for metrics keep the
//! real clock.
//!
//! A paused clock jumps ahead whenever the runtime is idle, so real-socket timeouts fire at once
//! under it: keep paused-clock tests to the rules themselves (mocks, no sockets).

use std::time::{Duration, Instant};

/// Now, on tokio's clock.
pub fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// How long since `earlier`, on tokio's clock (zero if `earlier` is later).
pub fn since(earlier: Instant) -> Duration {
    now().saturating_duration_since(earlier)
}
