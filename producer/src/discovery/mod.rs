//! How the producer finds its projects (`--milo-kubeconfig`: [`milo`]; `--projects-dir`:
//! [`directory`]; `--project-kubeconfig`: one, known at start), and how that goes: [`Discovery`].

pub mod directory;
pub mod milo;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use edgegate::runtime::supervise::essential;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio_util::sync::CancellationToken;

use crate::args::Args;
use crate::engaged::Engaged;
use crate::metrics::{Metrics, SourceLabels};

/// Start finding the projects from where `args` says, into `engaged`; how that goes. `stop`
/// stops the process as SIGTERM does (a changed credential is taken up by starting again).
pub async fn start(
    args: &Args,
    engaged: &Engaged,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    stop: CancellationToken,
) -> anyhow::Result<Discovery> {
    Ok(match (&args.project_kubeconfig, &args.projects_dir, &args.milo_kubeconfig) {
        (Some(file), _, _) => {
            let name = args.project_name.clone().unwrap_or_else(|| directory::stem(file));
            engaged.engage(&name, edgegate::runtime::client::project_client(file).await?);
            engaged.discovered();
            let discovery = Discovery::new("kubeconfig", metrics);
            discovery.listed();
            discovery
        }
        (None, Some(dir), _) => {
            let discovery = Discovery::new("directory", metrics);
            let (engaged, dir, found) = (engaged.clone(), dir.clone(), discovery.clone());
            essential("projects directory watch", shutdown, async move {
                directory::follow_projects_dir(&dir, &engaged, &found).await;
            });
            discovery
        }
        (None, None, Some(milo)) => {
            // What the clients are made from, read before they are.
            let first = edgegate::runtime::credential::read(milo);
            let clients = edgegate::runtime::client::PathClients::new(Some(milo), None)
                .await
                .with_context(|| format!("Milo's kubeconfig {}", milo.display()))?;
            // Its certificates are read once, here: a rotated one (a Secret updated, a CSI
            // driver's renewal) is taken up by starting again, as SIGTERM stops (a sharing
            // replica hands its buckets over), said in the log. After a wait of its own, so
            // replicas that mount the same Secret do not all stop at once. A token file needs
            // none: each client reads it again as it changes.
            let file = milo.clone();
            essential("Milo's credential files", shutdown, async move {
                let changed = edgegate::runtime::credential::changed(&file, first).await;
                let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let wait = std::time::Duration::from_millis(u64::from(nanos.subsec_nanos()) % 30_000);
                tracing::warn!(file = %changed.display(), ?wait, "Milo's kubeconfig or a file it names changed; stopping, to start again with it");
                tokio::time::sleep(wait).await;
                stop.cancel();
                std::future::pending::<()>().await;
            });
            let discovery = Discovery::new("milo", metrics);
            let (engaged, found) = (engaged.clone(), discovery.clone());
            essential("Milo project watch", shutdown, async move {
                if let Err(error) = milo::follow_milo(clients, engaged, found).await {
                    tracing::error!(error = format!("{error:#}"), "following Milo's projects");
                }
            });
            discovery
        }
        (None, None, None) => anyhow::bail!("give --project-kubeconfig, --projects-dir or --milo-kubeconfig"),
    })
}

/// How discovery goes, for readiness and the metrics. Readiness waits for the first whole list:
/// before it no project is known, and a replica engaging none would look healthy while writing
/// nothing (a bad credential from the start). After it, a failure does not make the replica
/// unready: a Milo outage would take every replica out of its Service at once and stall
/// rollouts while the projects already engaged are still served; the synced gauge and its alert
/// say it instead.
#[derive(Clone)]
pub struct Discovery(Arc<State>);

struct State {
    /// What the producer discovers from: `milo`, `directory` or `kubeconfig`.
    source: &'static str,
    listed_once: AtomicBool,
    /// The last failure since the last whole list.
    failure: Mutex<Option<String>>,
    synced: Gauge,
    failures: Counter,
    listed_at: Family<SourceLabels, Gauge>,
}

impl Discovery {
    /// Discovery from `source`, counted in `metrics`' series for it.
    pub fn new(source: &'static str, metrics: &crate::metrics::Metrics) -> Self {
        let (synced, failures, listed_at) = metrics.discovery(source);
        Discovery(Arc::new(State {
            source,
            listed_once: AtomicBool::new(false),
            failure: Mutex::new(None),
            synced,
            listed_at,
            failures,
        }))
    }

    /// Every project listed, whole.
    pub fn listed(&self) {
        let state = &self.0;
        if !state.listed_once.swap(true, Ordering::AcqRel) {
            tracing::info!(source = state.source, "projects discovered");
        }
        if let Some(error) = state.failure.lock().take() {
            tracing::info!(source = state.source, after = error, "projects listed again");
        }
        state.synced.set(1);
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        state.listed_at.get_or_create(&SourceLabels { source: state.source }).set(now);
    }

    /// Listing failed: the projects engaged stay as they are until it lists again. Logged when
    /// the error is not the last one's (a source down is retried every second or so).
    pub fn failed(&self, error: &str) {
        let state = &self.0;
        state.synced.set(0);
        state.failures.inc();
        let mut failure = state.failure.lock();
        if failure.as_deref() != Some(error) {
            tracing::warn!(
                source = state.source,
                error,
                "discovering projects failed; every project engaged stays as it is until they are listed again"
            );
        }
        *failure = Some(error.to_owned());
    }

    /// `Err(why)` until every project has been listed once.
    pub fn ready(&self) -> Result<(), String> {
        let state = &self.0;
        if state.listed_once.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(match state.failure.lock().as_deref() {
            Some(error) => format!("projects not discovered yet ({}): {error}", state.source),
            None => format!("projects not discovered yet ({})", state.source),
        })
    }
}
