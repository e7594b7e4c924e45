//! The one backoff every retry here takes (a watch listing again, a failed write or deletion
//! worked again): exponential from `first`, doubling up to `at_most`, each wait jittered by up
//! to as much again (backon), so a thousand watches or keys failing at once come back spread
//! out, not in one instant.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Waits from `first` to `at_most` before jitter (`first`..2×`first`, then doubling), endless.
pub fn backoff(first: Duration, at_most: Duration) -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_max_delay(at_most)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wait_doubles_and_is_spread_over_up_to_as_much_again() {
        let (first, at_most) = (Duration::from_millis(250), Duration::from_secs(1));
        let firsts: Vec<Duration> = (0..1_000).filter_map(|_| backoff(first, at_most).next()).collect();
        assert!(firsts.iter().all(|w| *w >= first && *w < first * 2), "within [250 ms, 500 ms)");
        let spread =
            firsts.iter().max().copied().unwrap_or_default() - firsts.iter().min().copied().unwrap_or_default();
        assert!(spread > Duration::from_millis(200), "spread {spread:?}");
        let waits: Vec<Duration> = backoff(first, at_most).take(6).collect();
        for (n, wait) in waits.iter().enumerate() {
            let base = (first * 2u32.pow(u32::try_from(n).unwrap_or(0))).min(at_most);
            assert!(*wait >= base && *wait < base * 2, "wait {n}: {wait:?} not in [{base:?}, 2×)");
        }
    }
}
