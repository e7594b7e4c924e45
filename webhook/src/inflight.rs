//! What a flood can make the webhook hold: the bytes of request bodies being read and decoded,
//! bounded for the whole process (`--max-inflight-bytes`). Each body takes its bytes as they
//! arrive and gives them back once its answer is built; one the budget cannot spare is answered
//! 429 with `Retry-After: 1`, its rest drained first (the API server retries that within the
//! webhook's timeout; a bare 503 would be final). Without a bound, a few dozen 8 MiB reviews in flight
//! outgrow the container's memory limit, and under `failurePolicy: Fail` every new copy on the
//! hub is refused until the pod is back.
//!
//! Small bodies (announced at most [`SMALL`], what the API server sends for a copy) draw on a
//! reserve of their own, so a flood of large ones never starves them.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A body announced no larger than this is small. A VPC copy's review is a few KiB; one of a
/// thousand endpoints is about 200 KiB.
pub const SMALL: usize = 256 * 1024;

/// Budgets count KiB: a semaphore's permits are taken 2^32 at most at a time.
const UNIT: usize = 1024;

/// The process's budget: large bodies (and bodies of unknown length) share `large`; small ones
/// have `small` to themselves.
#[derive(Clone, Debug)]
pub struct InFlight {
    large: Arc<Semaphore>,
    small: Arc<Semaphore>,
    /// The most one large body may take, in bytes.
    largest: usize,
}

impl InFlight {
    /// A budget of `bytes`: an eighth of it (at least 4 MiB, at most half) reserved for small
    /// bodies.
    pub fn new(bytes: usize) -> InFlight {
        let units = bytes.div_ceil(UNIT);
        let small = (units / 8).max(4 * 1024).min(units / 2);
        let large = units - small;
        InFlight {
            large: Arc::new(Semaphore::new(large)),
            small: Arc::new(Semaphore::new(small)),
            largest: large * UNIT,
        }
    }

    /// The largest body the budget can ever take: `--max-body-bytes` must fit.
    pub fn largest(&self) -> usize {
        self.largest
    }

    /// Grow what `taken` holds to cover `bytes` of a body announced to be `announced` long
    /// (`None`: unknown, chunked), as they arrive: a request that announces much and sends
    /// little holds only what it sent. A small body takes from the reserve, and from the large
    /// pool when the reserve is spent. False when the budget cannot spare them now.
    pub fn cover(&self, taken: &mut Taken, bytes: usize, announced: Option<usize>) -> bool {
        let needed = bytes.div_ceil(UNIT).saturating_sub(taken.units);
        if needed == 0 {
            return true;
        }
        let Ok(units) = u32::try_from(needed) else { return false };
        let small = announced.is_some_and(|length| length <= SMALL);
        let pools: &[&Arc<Semaphore>] = if small { &[&self.small, &self.large] } else { &[&self.large] };
        for pool in pools {
            if let Ok(permit) = Arc::clone(pool).try_acquire_many_owned(units) {
                taken.permits.push(permit);
                taken.units += needed;
                return true;
            }
        }
        false
    }
}

/// Bytes taken from the budget, given back when dropped.
#[derive(Debug, Default)]
pub struct Taken {
    permits: Vec<OwnedSemaphorePermit>,
    units: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn take(budget: &InFlight, bytes: usize, announced: Option<usize>) -> Option<Taken> {
        let mut taken = Taken::default();
        budget.cover(&mut taken, bytes, announced).then_some(taken)
    }

    #[test]
    fn large_bodies_cannot_take_the_small_ones_reserve() {
        let budget = InFlight::new(32 * MIB);
        let held: Vec<Taken> = (0..3).filter_map(|_| take(&budget, 8 * MIB, Some(8 * MIB))).collect();
        assert_eq!(held.len(), 3, "28 MiB for large bodies: three of 8 MiB");
        assert!(take(&budget, 8 * MIB, Some(8 * MIB)).is_none(), "a fourth waits");
        assert!(take(&budget, 8 * MIB, None).is_none(), "so does one of unknown length");
        let small: Vec<Taken> = (0..100).filter_map(|_| take(&budget, 4096, Some(4096))).collect();
        assert_eq!(small.len(), 100, "small bodies still pass");
        drop(held);
        assert!(take(&budget, 8 * MIB, Some(8 * MIB)).is_some(), "given back when dropped");
    }

    #[test]
    fn bytes_are_taken_as_they_arrive_and_counted_whole() {
        let budget = InFlight::new(32 * MIB);
        // Announcing 8 MiB and sending nothing holds nothing.
        let mut announced = Taken::default();
        assert!(budget.cover(&mut announced, 0, Some(8 * MIB)));
        assert_eq!(announced.units, 0);
        // A body arriving a byte at a time pays for its bytes, not a unit per frame.
        let mut trickle = Taken::default();
        for seen in 1..=4096 {
            assert!(budget.cover(&mut trickle, seen, None));
        }
        assert_eq!(trickle.units, 4);
    }

    #[test]
    fn small_bodies_fall_back_to_the_large_pool() {
        let budget = InFlight::new(32 * MIB);
        let reserve: Vec<Taken> = (0..16).filter_map(|_| take(&budget, 256 * 1024, Some(256 * 1024))).collect();
        assert_eq!(reserve.len(), 16, "the 4 MiB reserve, spent");
        assert!(take(&budget, 4096, Some(4096)).is_some(), "from the large pool");
    }

    #[test]
    fn a_tiny_budget_still_reserves_something_for_each() {
        let budget = InFlight::new(MIB);
        assert!(take(&budget, 300 * 1024, Some(400 * 1024)).is_some());
        assert!(take(&budget, 4096, Some(4096)).is_some());
    }
}
