//! The auditor of shared producers: from a hub's audit log (an audited [`ControlPlane`]'s, its
//! record and Lease writes logged with their answers), every record write a producer replica made,
//! ordered against the bucket fences by the resourceVersion (the etcd revision) each write made:
//! the write counts against the fence unless, at that revision, the writer held its project's
//! bucket and nobody else did. The producer's one Lease (`edgegate-producer`, held by a replica
//! that does not share) counts as holding every bucket: a rollout from one writer to shared ones
//! is audited too.
//!
//! Each write must also fall inside its writer's own deadline: before the last renewal it made of
//! its member Lease (`edgegate-producer-member-<pod>`, or the one Lease it led by) plus that
//! Lease's duration, by the API server's clock (when each request was received). A write after
//! the Lease lapsed but before anyone took the fence is counted too: another replica could have.
//!
//! Copy DELETEs are checked the same way: a DELETE's answer carries no resourceVersion, so the
//! revision each one made is taken from a watch of the copies (its DELETED event's), which the
//! test keeps ([`Deletions`]), by the uid the DELETE's preconditions name (a name is deleted and
//! made again many times; a uid once).
//!
//! Writers are told apart by their Pod-bound ServiceAccount tokens: the API server puts the Pod's
//! name and uid in the user's extra (`authentication.kubernetes.io/pod-name`, `…/pod-uid`). A
//! fence names a Pod by name only; the auditor takes its uid from the write that named it (a
//! replica takes a fence itself), so a Pod made again under the same name (a StatefulSet's) is
//! another writer, and writes inside its predecessor's window count.
//!
//! [`ControlPlane`]: crate::control_plane::ControlPlane

use std::collections::BTreeMap;

use edgegate::core::shard::{self, Bucket};
use serde_json::Value;

const FENCE_PREFIX: &str = "edgegate-producer-bucket-";
const MEMBER_PREFIX: &str = "edgegate-producer-member-";
const SINGLE_LEASE: &str = "edgegate-producer";

/// Each copy deleted, by uid, with the revision its deletion made (from a watch's DELETED event).
pub type Deletions = BTreeMap<String, u64>;

/// A record write or copy DELETE made while the fence of its project's bucket named someone else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub revision: u64,
    /// `patch` (a record) or `delete` (a copy).
    pub verb: String,
    pub writer: String,
    pub namespace: String,
    pub bucket: Bucket,
    /// Whom the fence named at that revision (none: nobody held it).
    pub holder: Option<String>,
    /// Whom the producer's one Lease named then.
    pub single: Option<String>,
    /// Made after the writer's own Lease lapsed (or before it ever renewed one).
    pub late: bool,
}

/// What the auditor found.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Record writes checked.
    pub writes: usize,
    /// Copy DELETEs checked.
    pub deletes: usize,
    /// A replica's copy DELETEs answered but not checked: without a precondition uid, or whose
    /// deletion the watch did not see.
    pub unmatched: usize,
    /// Fence changes seen.
    pub fence_changes: usize,
    /// Member Lease renewals (writes that change only the renewal), by how many members, and the
    /// most a second by one member over its own first to last (a renewal every quarter of the
    /// duration); and the writes that changed what a member says (its ready buckets, its
    /// leaving), which come only while buckets move.
    pub member_writes: usize,
    pub members: usize,
    pub busiest_member: f64,
    pub member_changes: usize,
    pub overlaps: Vec<Overlap>,
}

/// Audit the JSON lines of `log`; `project_of` names each hub namespace's project, `deleted` the
/// revision of each copy's deletion.
pub fn audit(log: &str, project_of: &BTreeMap<String, String>, deleted: &Deletions) -> Audit {
    let mut fences: BTreeMap<Bucket, Vec<(u64, Option<String>)>> = BTreeMap::new();
    let mut single: Vec<(u64, Option<String>)> = Vec::new();
    // Each writer's own deadlines: when each renewal was received, and until when it holds.
    let mut deadlines: BTreeMap<String, Vec<(jiff::Timestamp, jiff::Timestamp)>> = BTreeMap::new();
    // Each member Lease's renewals (its annotations as at its last write: its ready buckets, its
    // leaving), and how many writes changed what it says.
    let mut member_writes: BTreeMap<String, (String, Vec<jiff::Timestamp>)> = BTreeMap::new();
    let mut member_changes = 0;
    let mut writes = Vec::new();
    let mut unmatched = 0;
    for event in log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if event["stage"] != "ResponseComplete" || !(200..300).contains(&code) {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default();
        let object = &event["objectRef"];
        if verb == "delete" && object["resource"] == "endpointslices" {
            let writer = pod(&event);
            let (namespace, uid) =
                (object["namespace"].as_str(), event["requestObject"]["preconditions"]["uid"].as_str());
            if let (Some(writer), Some(namespace)) = (writer, namespace) {
                let revision = uid.and_then(|uid| deleted.get(uid)).copied();
                // Without preconditions, or one the watch did not see end (it did not happen, or
                // the watch missed it): not checked, but counted.
                match (revision, received(&event)) {
                    (Some(revision), Some(time)) => {
                        writes.push((revision, time, "delete", writer, namespace.to_owned()))
                    }
                    _ => unmatched += 1,
                }
            }
            continue;
        }
        if !["create", "update", "patch"].contains(&verb) {
            continue;
        }
        let Some(revision) =
            event["responseObject"]["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok())
        else {
            continue;
        };
        match object["resource"].as_str() {
            Some("leases") => {
                let name = object["name"].as_str().unwrap_or_default();
                let holder = event["responseObject"]["spec"]["holderIdentity"].as_str().map(str::to_owned);
                // The Pod named, as the one that wrote it (itself, taking it).
                let holder = holder.filter(|h| !h.is_empty()).map(|h| match pod(&event) {
                    Some(writer) if writer.strip_prefix(h.as_str()).is_some_and(|uid| uid.starts_with('/')) => writer,
                    _ => h,
                });
                if let (true, Some(time)) = (name.starts_with(MEMBER_PREFIX), received(&event)) {
                    let says = event["responseObject"]["metadata"]["annotations"].to_string();
                    let (said, renewals) = member_writes.entry(name.to_owned()).or_default();
                    if renewals.is_empty() || *said == says {
                        renewals.push(time);
                    } else {
                        member_changes += 1;
                    }
                    *said = says;
                }
                let renewed = holder.as_ref().filter(|h| Some(*h) == pod(&event).as_ref()).zip(received(&event));
                let seconds = event["responseObject"]["spec"]["leaseDurationSeconds"].as_i64().unwrap_or(0);
                if let Some((writer, time)) = renewed
                    && (name == SINGLE_LEASE || name.starts_with(MEMBER_PREFIX))
                {
                    let until = time.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap_or(time);
                    deadlines.entry(writer.clone()).or_default().push((time, until));
                }
                if name == SINGLE_LEASE {
                    single.push((revision, holder));
                } else if let Some(bucket) = name.strip_prefix(FENCE_PREFIX).and_then(|b| b.parse().ok()) {
                    fences.entry(bucket).or_default().push((revision, holder));
                }
            }
            Some("edgereachabilities") => {
                let (Some(writer), Some(time)) = (pod(&event), received(&event)) else { continue };
                let namespace = object["namespace"].as_str().unwrap_or_default().to_owned();
                writes.push((revision, time, "patch", writer, namespace));
            }
            _ => {}
        }
    }
    fences.values_mut().for_each(|f| f.sort_unstable());
    single.sort_unstable();
    deadlines.values_mut().for_each(|d| d.sort_unstable());
    let mut audit = Audit { fence_changes: fences.values().map(Vec::len).sum(), unmatched, ..Audit::default() };
    audit.member_changes = member_changes;
    for (_, times) in member_writes.values() {
        let span = match (times.iter().min(), times.iter().max()) {
            (Some(first), Some(last)) => last.duration_since(*first).unsigned_abs(),
            _ => std::time::Duration::ZERO,
        };
        let rate = times.len().saturating_sub(1) as f64 / span.as_secs_f64().max(1.0);
        audit.member_writes += times.len();
        audit.busiest_member = audit.busiest_member.max(rate);
    }
    audit.members = member_writes.len();
    for (revision, time, verb, writer, namespace) in writes {
        let Some(project) = project_of.get(&namespace) else { continue };
        let bucket = shard::bucket(project);
        let holder = at(fences.get(&bucket).map_or(&[][..], Vec::as_slice), revision);
        let single = at(&single, revision);
        if verb == "delete" {
            audit.deletes += 1;
        } else {
            audit.writes += 1;
        }
        let holders = [&holder, &single];
        let own = holders.iter().any(|h| h.as_deref() == Some(writer.as_str()));
        let other = holders.iter().any(|h| h.as_deref().is_some_and(|h| h != writer));
        // The writer's last renewal received before the write was.
        let deadline = deadlines.get(&writer).and_then(|d| d.iter().take_while(|(at, _)| *at <= time).last());
        let late = deadline.is_none_or(|(_, until)| time >= *until);
        if !own || other || late {
            let verb = verb.to_owned();
            audit.overlaps.push(Overlap { revision, verb, writer, namespace, bucket, holder, single, late });
        }
    }
    audit
}

/// Who sent a request: `<pod name>/<pod uid>`, from its Pod-bound token.
fn pod(event: &Value) -> Option<String> {
    let extra = &event["user"]["extra"];
    let name = extra["authentication.kubernetes.io/pod-name"][0].as_str()?;
    let uid = extra["authentication.kubernetes.io/pod-uid"][0].as_str().unwrap_or_default();
    Some(format!("{name}/{uid}"))
}

/// When the API server received the request.
fn received(event: &Value) -> Option<jiff::Timestamp> {
    event["requestReceivedTimestamp"].as_str()?.parse().ok()
}

/// Whom a Lease (its changes, in revision order) named just before `revision`.
fn at(changes: &[(u64, Option<String>)], revision: u64) -> Option<String> {
    changes.iter().take_while(|(r, _)| *r < revision).last().and_then(|(_, h)| h.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fence(bucket: Bucket, revision: u64, holder: Option<&str>) -> String {
        lease(&format!("{FENCE_PREFIX}{bucket}"), revision, holder)
    }

    /// The token's extra of Pod `pod`: `name` (uid 1) or `name@uid` (the Pod made again).
    fn user(pod: &str) -> Value {
        let (name, uid) = pod.split_once('@').unwrap_or((pod, "1"));
        json!({"extra": {"authentication.kubernetes.io/pod-name": [name], "authentication.kubernetes.io/pod-uid": [uid]}})
    }

    /// When the API server received a request: revision `r` at second `r`.
    fn at(revision: u64) -> String {
        format!("2026-12-07T00:{:02}:{:02}Z", revision / 60, revision % 60)
    }

    /// A Lease written by the Pod it names (`name` or `name@uid`), or released; held for 1,000 s.
    fn lease(name: &str, revision: u64, holder: Option<&str>) -> String {
        renewal(name, revision, holder, 1000)
    }

    fn renewal(name: &str, revision: u64, holder: Option<&str>, seconds: u64) -> String {
        let named = holder.map(|h| h.split_once('@').map_or(h, |(n, _)| n));
        json!({"stage": "ResponseComplete", "verb": "update", "responseStatus": {"code": 200},
            "requestReceivedTimestamp": at(revision),
            "user": holder.map(user), "objectRef": {"resource": "leases", "name": name},
            "responseObject": {"metadata": {"resourceVersion": revision.to_string()},
                "spec": {"holderIdentity": named, "leaseDurationSeconds": seconds}}})
        .to_string()
    }

    /// Pod `pod`'s member Lease renewed.
    fn member(pod: &str, revision: u64, seconds: u64) -> String {
        let name = pod.split_once('@').map_or(pod, |(n, _)| n);
        renewal(&format!("{MEMBER_PREFIX}{name}"), revision, Some(pod), seconds)
    }

    /// A DELETE received at second `second` of the copy of uid `uid` (its revision comes from
    /// the watch).
    fn delete(pod: &str, namespace: &str, uid: &str, second: u64) -> String {
        json!({"stage": "ResponseComplete", "verb": "delete", "responseStatus": {"code": 200},
            "requestReceivedTimestamp": at(second), "user": user(pod),
            "objectRef": {"resource": "endpointslices", "namespace": namespace, "name": "a-copy"},
            "requestObject": {"kind": "DeleteOptions", "preconditions": {"uid": uid}}})
        .to_string()
    }

    fn write(revision: u64, pod: &str, namespace: &str) -> String {
        json!({"stage": "ResponseComplete", "verb": "patch", "responseStatus": {"code": 200},
            "requestReceivedTimestamp": at(revision), "user": user(pod),
            "objectRef": {"resource": "edgereachabilities", "namespace": namespace},
            "responseObject": {"metadata": {"resourceVersion": revision.to_string()}}})
        .to_string()
    }

    /// The auditor can fail: a write after the fence moved on, or before it was taken, counts;
    /// the writes inside the writer's window do not.
    #[test]
    fn writes_outside_the_writers_window_are_counted() {
        let b = shard::bucket("alpha");
        let projects = BTreeMap::from([("ns-a".to_owned(), "alpha".to_owned())]);
        let log = [
            member("one", 1, 1000),
            member("two", 2, 1000),
            member("one@2", 3, 1000),
            write(5, "one", "ns-a"),       // before anyone held the fence
            fence(b, 10, Some("one")),     // one takes it
            write(11, "one", "ns-a"),      // inside
            write(12, "two", "ns-a"),      // two writes while one holds it
            fence(b, 20, None),            // one releases
            write(21, "one", "ns-a"),      // one writes after letting go
            fence(b, 22, Some("two")),     // two takes it
            write(23, "two", "ns-a"),      // inside
            fence(b + 1, 24, Some("one")), // another bucket's fence changes nothing here
            write(25, "one", "ns-a"),
            lease(SINGLE_LEASE, 30, Some("solo")), // a replica not sharing leads
            write(31, "solo", "ns-a"),             // while two holds the bucket
            write(32, "two", "ns-a"),              // while solo leads
            fence(b, 33, None),                    // two lets go
            write(34, "solo", "ns-a"),             // inside
            lease(SINGLE_LEASE, 35, None),         // solo lets go
            write(36, "solo", "ns-a"),
            fence(b, 39, Some("two")),            // two takes it again
            delete("two", "ns-a", "inside", 40),  // two deletes a copy while it holds the bucket
            delete("one", "ns-a", "outside", 41), // one deletes another while two holds it
            delete("one", "ns-a", "refused", 42), // a DELETE the watch never saw end: not checked
            fence(b, 50, Some("one@2")),          // Pod one made again takes it (its predecessor gone)
            write(51, "one", "ns-a"),             // the predecessor writes: another writer
            write(52, "one@2", "ns-a"),           // inside
        ]
        .join("\n");
        let deleted = Deletions::from([("inside".into(), 40), ("outside".into(), 41)]);
        let audit = audit(&log, &projects, &deleted);
        assert_eq!((audit.writes, audit.deletes), (12, 2));
        let counted: Vec<(u64, &str)> = audit.overlaps.iter().map(|o| (o.revision, o.writer.as_str())).collect();
        assert_eq!(
            counted,
            [
                (5, "one/1"),
                (12, "two/1"),
                (21, "one/1"),
                (25, "one/1"),
                (31, "solo/1"),
                (32, "two/1"),
                (36, "solo/1"),
                (41, "one/1"),
                (51, "one/1")
            ]
        );
    }

    /// Inside the fence is not enough: a write after the writer's own member Lease lapsed counts
    /// even while the fence still names it (nobody took it yet); a renewal makes it whole again.
    #[test]
    fn a_write_after_the_writers_own_lease_lapsed_is_counted() {
        let b = shard::bucket("alpha");
        let projects = BTreeMap::from([("ns-a".to_owned(), "alpha".to_owned())]);
        let log = [
            member("one", 10, 5),      // until second 15
            fence(b, 11, Some("one")), // one takes the bucket
            write(12, "one", "ns-a"),  // inside
            write(15, "one", "ns-a"),  // at its deadline: outside
            write(20, "one", "ns-a"),  // lapsed; the fence still names it
            member("one", 30, 5),      // renewed: until 35
            write(31, "one", "ns-a"),  // inside again
            write(40, "two", "ns-a"),  // never renewed a Lease, and no fence
        ]
        .join("\n");
        let audit = audit(&log, &projects, &Deletions::new());
        let counted: Vec<(u64, bool)> = audit.overlaps.iter().map(|o| (o.revision, o.late)).collect();
        assert_eq!(counted, [(15, true), (20, true), (40, true)]);
    }
}
