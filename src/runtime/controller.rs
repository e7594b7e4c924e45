//! The life every controller binary (the pruner, the producer) shares around its loop: the
//! crypto provider and the hub client, SIGTERM, the Lease, the admin listener, Events, and at the
//! end the Lease handed back.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use kube::runtime::events::{Recorder, Reporter};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::admin::Probes;
use super::flags::HubArgs;
use super::lease::{Leadership, LeaseConfig, elect};

/// A started controller: what its loop needs, and the election to end when the loop is done.
pub struct Controller {
    pub hub: kube::Client,
    /// The name this replica holds the Lease and posts Events under.
    pub identity: String,
    pub leader: Leadership,
    /// Cancelled on SIGTERM or Ctrl-C, once what [`Controller::drain_with`] gave has ended: the
    /// loop stops at it.
    pub shutdown: CancellationToken,
    /// Run between the signal and `shutdown`, if given.
    drain: Arc<parking_lot::Mutex<Option<futures::future::BoxFuture<'static, ()>>>>,
    /// Cancelled to stop as SIGTERM stops: drain, then `shutdown` ([`Controller::stopper`]).
    asked: CancellationToken,
    election: (CancellationToken, JoinHandle<()>),
}

impl Controller {
    /// Connect to the hub, hear SIGTERM, and start electing on `lease`.
    pub async fn start(hub: &HubArgs, lease: &LeaseConfig) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = super::client::hub_client(hub).await?;
        let shutdown = CancellationToken::new();
        let drain: Arc<parking_lot::Mutex<Option<futures::future::BoxFuture<'static, ()>>>> = Arc::default();
        let (then, draining) = (shutdown.clone(), Arc::clone(&drain));
        let asked = CancellationToken::new();
        let stopping = asked.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = super::process::shutdown_signal() => {}
                () = stopping.cancelled() => {}
            }
            let drain = draining.lock().take();
            if let Some(drain) = drain {
                drain.await;
            }
            then.cancel();
        });
        let stop = CancellationToken::new();
        let (leader, task) = elect(&client, lease, stop.clone());
        let identity = lease.identity.clone();
        Ok(Controller { hub: client, identity, leader, shutdown, drain, asked, election: (stop, task) })
    }

    /// A token that, cancelled, stops the process as SIGTERM does (its drain first): for a
    /// process that must start again to take something up.
    pub fn stopper(&self) -> CancellationToken {
        self.asked.clone()
    }

    /// On SIGTERM, run `drain` (bounded by the caller) before the loop is told to stop: a
    /// sharing producer hands its buckets over meanwhile.
    pub fn drain_with(&self, drain: futures::future::BoxFuture<'static, ()>) {
        *self.drain.lock() = Some(drain);
    }

    /// Serve `/healthz`, `/readyz` and `/metrics` from `probes` on `listen` until shutdown.
    pub async fn serve_admin(&self, listen: SocketAddr, probes: Arc<dyn Probes>) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
        tracing::info!(listen = %listener.local_addr()?, identity = %self.identity, "serving probes and metrics");
        super::admin::serve(listener, probes, self.shutdown.clone());
        Ok(())
    }

    /// Events posted as `controller`, this replica the instance.
    pub fn recorder(&self, controller: &str) -> Recorder {
        Recorder::new(
            self.hub.clone(),
            Reporter { controller: controller.to_owned(), instance: Some(self.identity.clone()) },
        )
    }

    /// The loop has ended: hand the Lease over now rather than let it expire.
    pub async fn stopped(self) {
        let (stop, task) = self.election;
        stop.cancel();
        let _ = task.await;
        tracing::info!("stopped");
    }
}
