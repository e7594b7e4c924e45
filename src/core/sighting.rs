//! How long something another replica writes (a Lease) has gone unchanged, by this replica's own
//! clock: two replicas' clocks are never compared, only whether what the other writes keeps
//! changing. The one rule behind the single Lease's expiry, a sharing member's liveness, a
//! non-sharing producer's hold on the producer's Lease, and a missing member Lease.
//!
//! Pure: the caller passes the time; the state is plain values (an ordered map), so a model
//! checker can hold it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Each thing watched: its version as last seen, since when this replica has seen it so, and
/// whether it has seen it at another version before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sightings {
    seen: BTreeMap<String, Seen>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Seen {
    version: String,
    since: Instant,
    renewed: bool,
}

/// One look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// Unchanged for this long (zero at first sight, and whenever it has just changed).
    pub unchanged: Duration,
    /// Seen at another, existing version before this one: seen renewed, not merely seen.
    pub renewed: bool,
}

/// The version of something that does not exist: it "changes" when it goes and when it comes.
pub const ABSENT: &str = "";

impl Sightings {
    /// `key` is at `version` ([`ABSENT`] if it does not exist) at `now`.
    pub fn look(&mut self, key: &str, version: &str, now: Instant) -> Sighting {
        match self.seen.get(key) {
            Some(seen) if seen.version == version => {
                Sighting { unchanged: now.saturating_duration_since(seen.since), renewed: seen.renewed }
            }
            previous => {
                let renewed = previous.is_some_and(|p| p.version != ABSENT);
                self.seen.insert(key.to_owned(), Seen { version: version.to_owned(), since: now, renewed });
                Sighting { unchanged: Duration::ZERO, renewed }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_counts_from_the_first_sight_of_each_version() {
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let mut sightings = Sightings::default();
        let rows: [(u64, &str, Sighting); 7] = [
            (0, "1", Sighting { unchanged: Duration::ZERO, renewed: false }),
            (5, "1", Sighting { unchanged: Duration::from_secs(5), renewed: false }),
            (6, "2", Sighting { unchanged: Duration::ZERO, renewed: true }),
            (9, "2", Sighting { unchanged: Duration::from_secs(3), renewed: true }),
            (10, ABSENT, Sighting { unchanged: Duration::ZERO, renewed: true }),
            (30, ABSENT, Sighting { unchanged: Duration::from_secs(20), renewed: true }),
            // Back after being gone: seen, not seen renewed.
            (31, "7", Sighting { unchanged: Duration::ZERO, renewed: false }),
        ];
        for (secs, version, expected) in rows {
            assert_eq!(sightings.look("a", version, at(secs)), expected, "at {secs}s, version {version:?}");
        }
        assert_eq!(sightings.look("b", "1", at(31)).unchanged, Duration::ZERO, "each key its own");
    }
}
