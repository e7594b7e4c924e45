//! Leader election: one `coordination.k8s.io/v1` Lease through kube-lease-manager, so of the
//! replicas of a writer (the pruner, the producer) only one acts at a time.

use std::time::Duration;

use tokio::sync::watch;

/// Which Lease, and who this replica is.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    /// No election: this replica always leads (run exactly one).
    pub disabled: bool,
}

/// A channel that is `true` while this replica holds the Lease. kube-lease-manager renews it in
/// the background for as long as the returned receiver lives.
pub async fn elect(client: &kube::Client, lease: &LeaseConfig) -> anyhow::Result<watch::Receiver<bool>> {
    if lease.disabled {
        tracing::warn!("leader election is off: run exactly one replica");
        let (_, rx) = watch::channel(true);
        return Ok(rx);
    }
    let duration = lease.duration.as_secs().max(3);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&lease.identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        .build()
        .await?;
    let (leader, _task) = manager.watch().await;
    Ok(leader)
}
