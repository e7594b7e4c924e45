//! Sharing projects across producer replicas: which bucket a project is in, which live replica
//! should own a bucket, and what one replica does next, from what it has seen of the Leases.
//!
//! A project's bucket never changes (its name is its id). The owner a bucket *should* have is
//! the live member ranked first for it by rendezvous hashing, so adding a member moves only the
//! buckets it now ranks first for, and removing one moves only its own. Who *may write* for a
//! bucket is decided by its fence Lease, never by this ranking alone: members need not agree at
//! every instant (docs/sharding.md).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A bucket of projects: what moves between replicas, and what one fence Lease guards.
pub type Bucket = u16;

/// How many buckets there are: enough that rendezvous hashing spreads three or four replicas
/// near an even share (a member's share is binomial: at 256, one standard deviation is 3 % of
/// the buckets, so 20 % off an even third is 2.3 of them), few enough that the fence Leases stay
/// a short list (256 objects of about 300 bytes, written only when they change hands).
pub const BUCKETS: Bucket = 256;

/// The bucket of the project named `project`.
pub fn bucket(project: &str) -> Bucket {
    // The remainder of a division by BUCKETS is below BUCKETS: it fits.
    (fnv1a64(project.as_bytes()) % u64::from(BUCKETS)) as Bucket
}

/// `members` in rendezvous order for `bucket`: the highest score first, ties by name. Scores
/// are compared as unsigned integers: nothing is summed or weighted, so nothing overflows.
pub fn rank<'a>(bucket: Bucket, members: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut scored: Vec<(u64, &str)> = members.into_iter().map(|m| (score(bucket, m), m)).collect();
    scored.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().map(|(_, m)| m).collect()
}

fn score(bucket: Bucket, member: &str) -> u64 {
    let mut bytes = bucket.to_be_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(member.as_bytes());
    // FNV-1a alone barely separates inputs that differ in one late byte; the finalizer of
    // splitmix64 spreads each bit over the whole score, so buckets rank members independently.
    mix(fnv1a64(&bytes))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What this replica makes of another member's Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Seen renewed, within half its duration, by this replica's clock.
    Live,
    /// Not renewed for a while, but not for longer than its duration (or not seen renewed yet):
    /// it may still write. It keeps its rank; its word that it is ready is not taken.
    Lapsing,
    /// Released, or unrenewed for longer than its duration: its own deadline has passed, so it
    /// writes no more until it renews and takes its buckets again.
    Gone,
}

impl Liveness {
    /// A member Lease as last looked at: released, or unchanged for longer than its `duration`
    /// by this replica's clock, it is gone; unchanged for over half of it, or not seen renewed
    /// yet (a Lease left by a replica long gone looks just like a live one at first sight), it is
    /// lapsing; otherwise live.
    pub fn of(sighting: &crate::core::sighting::Sighting, released: bool, duration: std::time::Duration) -> Liveness {
        if released || sighting.unchanged > duration {
            Liveness::Gone
        } else if sighting.unchanged > duration / 2 || !sighting.renewed {
            Liveness::Lapsing
        } else {
            Liveness::Live
        }
    }
}

/// Another member as this replica sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub liveness: Liveness,
    /// Buckets it says it has listed and would write at once if given them.
    pub ready: BTreeSet<Bucket>,
    /// It is stopping: it hands its buckets over and takes none.
    pub leaving: bool,
}

/// A bucket's fence Lease as this replica sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fence {
    /// The member it names; none when released or never written.
    pub holder: Option<String>,
    /// For how long, by this replica's clock, nobody has held it who may write (no holder, or a
    /// [`Liveness::Gone`] one); `None` while someone may.
    pub vacant_for: Option<Duration>,
}

/// Everything one replica has seen, at one look.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub me: &'a str,
    /// This replica's own member Lease is within its deadline.
    pub live: bool,
    /// This replica is stopping.
    pub leaving: bool,
    /// The other members.
    pub members: &'a [Member],
    /// Every bucket's fence; a bucket missing here has none (vacant for as long as this replica
    /// has looked).
    pub fences: &'a BTreeMap<Bucket, Fence>,
    /// The buckets this replica holds: fences it wrote itself while live, not lost since.
    pub held: &'a BTreeSet<Bucket>,
    /// Buckets whose projects are all listed here.
    pub warm: &'a BTreeSet<Bucket>,
    /// The members' Lease duration.
    pub duration: Duration,
}

/// What to do next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Write this replica into the fence (from nobody, from a gone holder, or again after a
    /// lapse of its own), with the resourceVersion seen: a fence changed meanwhile refuses it.
    pub take: BTreeSet<Bucket>,
    /// Stop writing for the bucket, then clear the fence's holder: its owner is ready.
    pub release: BTreeSet<Bucket>,
    /// Held here no more: the fence names another member.
    pub lost: BTreeSet<Bucket>,
    /// Buckets whose projects this replica watches: those it holds or takes, and those it
    /// should own (listed ahead of a handover).
    pub engage: BTreeSet<Bucket>,
    /// Buckets to say, on the member Lease, this replica is ready to take.
    pub ready: BTreeSet<Bucket>,
}

/// The next steps for `seen.me`.
pub fn plan(seen: &Seen<'_>) -> Plan {
    let mut plan = Plan::default();
    let none = Fence { holder: None, vacant_for: Some(Duration::ZERO) };
    for b in 0..BUCKETS {
        let fence = seen.fences.get(&b).unwrap_or(&none);
        let mine = fence.holder.as_deref() == Some(seen.me);
        if seen.held.contains(&b) && !mine {
            plan.lost.insert(b);
        }
        let held = seen.held.contains(&b) && mine;
        if !seen.live {
            // Nothing can be written now; what its fences name stays watched, to be written at
            // once after a renewal (and a take, which a fence changed meanwhile refuses).
            if mine {
                plan.engage.insert(b);
            }
            continue;
        }
        let order = owners(seen, b);
        let owner = order.first().copied();
        if held {
            plan.engage.insert(b);
            let to = owner.filter(|o| *o != seen.me);
            let ready = |m: &Member| m.liveness == Liveness::Live && m.ready.contains(&b);
            if to.is_some_and(|o| seen.members.iter().any(|m| m.name == o && ready(m))) {
                plan.release.insert(b);
            }
            continue;
        }
        if mine {
            // Named here by an earlier tenure (a lapse, a restart under the same name): written
            // again before anything else, so a takeover meanwhile wins or loses cleanly.
            plan.take.insert(b);
            plan.engage.insert(b);
            continue;
        }
        if let Some(vacant) = fence.vacant_for {
            // Never none: the owner takes a vacant bucket at once, the k-th in order after 2k
            // lease durations (the ones before it may be cut off from the hub, or see other members).
            let at = order.iter().position(|m| *m == seen.me);
            if at.is_some_and(|k| vacant >= seen.duration * 2 * u32::try_from(k).unwrap_or(u32::MAX)) {
                plan.take.insert(b);
                plan.engage.insert(b);
            } else if owner == Some(seen.me) {
                plan.engage.insert(b);
            }
            continue;
        }
        if owner == Some(seen.me) {
            plan.engage.insert(b);
            if seen.warm.contains(&b) {
                plan.ready.insert(b);
            }
        }
    }
    plan
}

/// The members that may own `bucket`, in rendezvous order: those not gone (a lapsing one keeps
/// its place: one slow renewal must not move its buckets away and back) nor leaving.
fn owners<'a>(seen: &Seen<'a>, bucket: Bucket) -> Vec<&'a str> {
    let me = (seen.live && !seen.leaving).then_some(seen.me);
    let others = seen.members.iter().filter(|m| m.liveness != Liveness::Gone && !m.leaving).map(|m| m.name.as_str());
    rank(bucket, me.into_iter().chain(others))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_by_how_long_the_lease_went_unchanged() {
        use crate::core::sighting::Sighting;
        let duration = std::time::Duration::from_secs(10);
        let secs = std::time::Duration::from_secs;
        let rows = [
            (Sighting { unchanged: secs(0), renewed: true }, false, Liveness::Live),
            (Sighting { unchanged: secs(5), renewed: true }, false, Liveness::Live),
            (Sighting { unchanged: secs(6), renewed: true }, false, Liveness::Lapsing),
            (Sighting { unchanged: secs(0), renewed: false }, false, Liveness::Lapsing),
            (Sighting { unchanged: secs(10), renewed: true }, false, Liveness::Lapsing),
            (Sighting { unchanged: secs(11), renewed: true }, false, Liveness::Gone),
            (Sighting { unchanged: secs(0), renewed: true }, true, Liveness::Gone),
        ];
        for (sighting, released, expected) in rows {
            assert_eq!(Liveness::of(&sighting, released, duration), expected, "{sighting:?} released {released}");
        }
    }

    const D: Duration = Duration::from_secs(16);

    fn member(name: &str) -> Member {
        Member { name: name.to_owned(), liveness: Liveness::Live, ready: BTreeSet::new(), leaving: false }
    }

    fn held_by(holder: &str) -> Fence {
        Fence { holder: Some(holder.to_owned()), vacant_for: None }
    }

    fn owner_of(b: Bucket, members: &[&str]) -> String {
        rank(b, members.iter().copied())[0].to_owned()
    }

    fn seen<'a>(
        me: &'a str,
        members: &'a [Member],
        fences: &'a BTreeMap<Bucket, Fence>,
        held: &'a BTreeSet<Bucket>,
        warm: &'a BTreeSet<Bucket>,
    ) -> Seen<'a> {
        Seen { me, live: true, leaving: false, members, fences, held, warm, duration: D }
    }

    #[test]
    fn a_project_stays_in_its_bucket() {
        assert_eq!(bucket("alpha"), bucket("alpha"));
        let spread: BTreeSet<Bucket> = (0..5000).map(|i| bucket(&format!("project-{i}"))).collect();
        assert_eq!(spread.len(), usize::from(BUCKETS), "5,000 projects fill every bucket");
        assert!(spread.iter().all(|b| *b < BUCKETS));
    }

    /// Adding a fourth member moves only buckets it now ranks first for, and about a quarter;
    /// removing it moves them back, and nothing else.
    #[test]
    fn a_fourth_member_takes_about_a_quarter_and_nothing_moves_between_the_others() {
        let three = ["edgegate-producer-0", "edgegate-producer-1", "edgegate-producer-2"];
        let four = ["edgegate-producer-0", "edgegate-producer-1", "edgegate-producer-2", "edgegate-producer-3"];
        let mut moved = 0;
        for b in 0..BUCKETS {
            let (before, after) = (owner_of(b, &three), owner_of(b, &four));
            if before != after {
                assert_eq!(after, "edgegate-producer-3", "bucket {b} moved between survivors");
                moved += 1;
            }
        }
        println!("3 → 4 members: {moved} of {BUCKETS} buckets moved");
        assert!((40..=88).contains(&moved), "{moved} of {BUCKETS} moved, not about a quarter");
        // Each of three holds a third, within 20 %.
        for m in three {
            let n = (0..BUCKETS).filter(|b| owner_of(*b, &three) == m).count();
            assert!((68..=103).contains(&n), "{m} owns {n} of {BUCKETS}");
        }
    }

    #[test]
    fn order_does_not_depend_on_how_members_are_listed() {
        for b in 0..BUCKETS {
            assert_eq!(rank(b, ["a", "b", "c"]), rank(b, ["c", "a", "b", "a"]));
        }
    }

    #[test]
    fn the_owner_takes_a_vacant_bucket_at_once_and_the_next_after_two_durations() {
        let members = [member("b")];
        let (held, warm) = (BTreeSet::new(), BTreeSet::new());
        let b = (0..BUCKETS).find(|b| owner_of(*b, &["a", "b"]) == "a").expect("a bucket a owns");
        let mut fences = BTreeMap::from([(b, Fence { holder: None, vacant_for: Some(Duration::ZERO) })]);
        let plan_a = plan(&seen("a", &members, &fences, &held, &warm));
        assert!(plan_a.take.contains(&b) && plan_a.engage.contains(&b));
        let others = [member("a")];
        assert!(!plan(&seen("b", &others, &fences, &held, &warm)).take.contains(&b), "b waits for a");
        fences.insert(b, Fence { holder: None, vacant_for: Some(2 * D) });
        assert!(plan(&seen("b", &others, &fences, &held, &warm)).take.contains(&b), "never none");
    }

    #[test]
    fn a_gone_holders_bucket_is_taken_but_a_lapsing_ones_waits() {
        let b = (0..BUCKETS).find(|b| owner_of(*b, &["a", "c"]) == "a").expect("a bucket a owns");
        let (held, warm) = (BTreeSet::new(), BTreeSet::new());
        let mut c = member("c");
        c.liveness = Liveness::Lapsing;
        let fences = BTreeMap::from([(b, held_by("c"))]);
        let lapsing = plan(&seen("a", std::slice::from_ref(&c), &fences, &held, &warm));
        assert!(!lapsing.take.contains(&b) && lapsing.engage.contains(&b), "listed ahead, not taken");
        c.liveness = Liveness::Gone;
        let fences = BTreeMap::from([(b, Fence { holder: Some("c".into()), vacant_for: Some(Duration::ZERO) })]);
        assert!(plan(&seen("a", &[c], &fences, &held, &warm)).take.contains(&b));
    }

    /// A handover: the new owner lists, says it is ready, the holder releases, the owner takes.
    #[test]
    fn a_live_holder_releases_only_once_the_owner_is_ready() {
        let b = (0..BUCKETS).find(|b| owner_of(*b, &["a", "new"]) == "new").expect("a bucket new owns");
        let fences = BTreeMap::from([(b, held_by("a"))]);
        let none = BTreeSet::new();
        let mut new = member("new");
        let held = BTreeSet::from([b]);
        let by_a = plan(&seen("a", std::slice::from_ref(&new), &fences, &held, &none));
        assert!(by_a.release.is_empty() && by_a.engage.contains(&b), "new is not ready: a keeps writing");

        let warm = BTreeSet::from([b]);
        let a = [member("a")];
        let cold = plan(&seen("new", &a, &fences, &none, &none));
        assert!(cold.engage.contains(&b) && !cold.ready.contains(&b) && !cold.take.contains(&b), "{cold:?}");
        let listed = plan(&seen("new", &a, &fences, &none, &warm));
        assert!(listed.ready.contains(&b) && !listed.take.contains(&b), "ready, and waiting for a");

        new.ready.insert(b);
        let by_a = plan(&seen("a", std::slice::from_ref(&new), &fences, &held, &none));
        assert!(by_a.release.contains(&b));
        let released = BTreeMap::from([(b, Fence { holder: None, vacant_for: Some(Duration::ZERO) })]);
        assert!(plan(&seen("new", &a, &released, &none, &warm)).take.contains(&b));
    }

    #[test]
    fn a_leaving_member_owns_nothing_and_hands_over() {
        let fences: BTreeMap<Bucket, Fence> = (0..BUCKETS).map(|b| (b, held_by("a"))).collect();
        let held: BTreeSet<Bucket> = (0..BUCKETS).collect();
        let mut b = member("b");
        b.ready = held.clone();
        let mut leaving = seen("a", std::slice::from_ref(&b), &fences, &held, &held);
        leaving.leaving = true;
        assert_eq!(plan(&leaving).release, held, "every bucket to the one other member");
        let mut a = member("a");
        a.leaving = true;
        let by_b = plan(&seen("b", &[a], &fences, &BTreeSet::new(), &held));
        assert_eq!(by_b.ready, held, "b owns every bucket a leaves");
    }

    #[test]
    fn without_its_own_lease_a_replica_takes_nothing_and_keeps_what_it_holds_watched() {
        let fences = BTreeMap::from([(3, held_by("a"))]);
        let held = BTreeSet::from([3, 4]);
        let mut s = seen("a", &[], &fences, &held, &held);
        s.live = false;
        let p = plan(&s);
        assert!(p.take.is_empty() && p.release.is_empty() && p.ready.is_empty());
        assert_eq!(p.engage, BTreeSet::from([3]), "what its fences name stays watched");
        assert_eq!(p.lost, BTreeSet::from([4]), "the fence does not name it");
    }

    /// One slow renewal moves nothing: a lapsing member keeps its rank, and its word that it is
    /// ready is not taken.
    #[test]
    fn a_lapsing_member_keeps_its_buckets_and_its_readiness_is_not_taken() {
        let b = (0..BUCKETS).find(|b| owner_of(*b, &["a", "c"]) == "c").expect("a bucket c owns");
        let mut c = member("c");
        c.liveness = Liveness::Lapsing;
        c.ready.insert(b);
        let vacant = BTreeMap::from([(b, Fence { holder: None, vacant_for: Some(Duration::ZERO) })]);
        let none = BTreeSet::new();
        let p = plan(&seen("a", std::slice::from_ref(&c), &vacant, &none, &none));
        assert!(!p.take.contains(&b) && !p.engage.contains(&b), "c still ranks first: {p:?}");
        let fences = BTreeMap::from([(b, held_by("a"))]);
        let held = BTreeSet::from([b]);
        assert!(plan(&seen("a", &[c], &fences, &held, &none)).release.is_empty(), "not handed to a lapsing member");
    }

    #[test]
    fn a_fence_naming_this_replica_from_before_is_written_again() {
        let fences = BTreeMap::from([(5, held_by("a"))]);
        let none = BTreeSet::new();
        let p = plan(&seen("a", &[], &fences, &none, &none));
        assert!(p.take.contains(&5), "taken again with the resourceVersion seen");
    }

    #[test]
    fn a_fence_taken_by_another_is_lost() {
        let fences = BTreeMap::from([(5, held_by("b"))]);
        let held = BTreeSet::from([5]);
        let p = plan(&seen("a", &[member("b")], &fences, &held, &held));
        assert!(p.lost.contains(&5) && !p.take.contains(&5) && !p.release.contains(&5));
    }
}
