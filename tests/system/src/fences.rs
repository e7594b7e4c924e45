//! The hub's bucket fences as the sharing suites read them (docs/sharding.md): who holds each
//! bucket, whether that is as rendezvous hashing ranks the members, and every copy's deletion
//! with the revision it made (what [`crate::fence_audit`] orders DELETEs by).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use edgegate::core::shard::{self, BUCKETS, Bucket};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, Client};

use crate::fence_audit::Deletions;

/// Each bucket's fence holder, as the hub has it now (a failed list tried again for 30 s: the
/// hub may be restarting).
pub async fn holders(hub: &Client) -> BTreeMap<Bucket, Option<String>> {
    let leases: Api<Lease> = Api::namespaced(hub.clone(), "edgegate-system");
    let started = std::time::Instant::now();
    let listed = loop {
        match leases.list(&Default::default()).await {
            Ok(listed) => break listed,
            Err(e) if started.elapsed() > std::time::Duration::from_secs(30) => panic!("listing the Leases: {e}"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(500)).await,
        }
    };
    let mut fences: BTreeMap<Bucket, Option<String>> = (0..BUCKETS).map(|b| (b, None)).collect();
    for lease in listed {
        let name = lease.metadata.name.unwrap_or_default();
        let Some(b) = name.strip_prefix("edgegate-producer-bucket-").and_then(|b| b.parse().ok()) else { continue };
        fences.insert(b, lease.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty()));
    }
    fences
}

/// Every bucket held by the member rendezvous hashing ranks first among `names`.
pub fn as_ranked(fences: &BTreeMap<Bucket, Option<String>>, names: &[&str]) -> bool {
    fences.iter().all(|(b, holder)| holder.as_deref() == shard::rank(*b, names.iter().copied()).first().copied())
}

/// How many buckets `name` holds.
pub fn held_by(fences: &BTreeMap<Bucket, Option<String>>, name: &str) -> usize {
    fences.values().filter(|h| h.as_deref() == Some(name)).count()
}

/// Every copy deleted on the hub from now on, by uid, with the revision its deletion made (its
/// watch's DELETED event).
pub fn watch_deletions(hub: &Client) -> Arc<Mutex<Deletions>> {
    let deleted = Arc::new(Mutex::new(Deletions::new()));
    let (api, into) = (Api::<EndpointSlice>::all(hub.clone()), Arc::clone(&deleted));
    tokio::spawn(async move {
        use kube::runtime::WatchStreamExt;
        let mut events = std::pin::pin!(kube::runtime::watcher(api, Default::default()).default_backoff());
        while let Some(event) = events.next().await {
            if let Ok(kube::runtime::watcher::Event::Delete(slice)) = event {
                let revision = slice.metadata.resource_version.as_deref().and_then(|r| r.parse().ok());
                if let (Some(uid), Some(revision)) = (slice.metadata.uid, revision) {
                    into.lock().expect("deletions").insert(uid, revision);
                }
            }
        }
    });
    deleted
}
