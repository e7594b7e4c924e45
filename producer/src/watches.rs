//! The watches the producer follows: the hub's Namespaces and EdgeReachabilities, and the
//! follower every project's watch runs in, stopping the process if one ends.

use std::sync::Arc;

use edgegate::EdgeReachability;
use edgegate::core::project::NamespaceMeta;
use edgegate::index::Change;
use edgegate::index::dirty::Dirty;
use edgegate::index::hub::{HubView, HubWriter};
use edgegate::index::source::budget::ListBudget;
use edgegate::index::source::follow::{WATCH_TIMEOUT_SECS, WatchSink, Whole, follow_within};
use edgegate::runtime::supervise::essential;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::producer::Trigger;

/// The hub's Namespaces and EdgeReachabilities, into `view`; what appears or goes is a trigger.
pub fn start_hub_watches(hub: &Client, view: &Arc<HubView>, triggers: &Dirty<Trigger>, shutdown: &CancellationToken) {
    let tx = Dirty::default();
    forward(tx.clone(), triggers.clone(), Trigger::Hub, shutdown);
    let namespaces = Whole::new(HubWriter::new(Arc::clone(view), tx.clone()));
    spawn_follow::<NamespaceMeta, _>("hub", Api::all(hub.clone()), namespaces, WATCH_TIMEOUT_SECS, None, shutdown);
    let records = Whole::new(HubWriter::new(Arc::clone(view), tx));
    spawn_follow::<EdgeReachability, _>("hub", Api::all(hub.clone()), records, WATCH_TIMEOUT_SECS, None, shutdown);
}

/// Follow `api` into `sink` for as long as the process runs, or until the handle is aborted: a
/// watch that died would leave its index frozen and still synced, so one that ends stops the
/// process ([`essential`]). `of` names whose watch it is in the logs.
pub(crate) fn spawn_follow<K, S>(
    of: &str,
    api: Api<kube::core::DeserializeGuard<K>>,
    mut sink: S,
    timeout: u32,
    budget: Option<Arc<ListBudget>>,
    shutdown: &CancellationToken,
) -> JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    S: WatchSink<K> + Send + 'static,
{
    let name = format!("{of} {} watch", K::kind(&K::DynamicType::default()));
    let span = tracing::info_span!("watch", of, kind = %K::kind(&K::DynamicType::default()));
    // A streaming list where the API server offers one: one request per (re-)list, not two.
    let config = watcher::Config::default().timeout(timeout).streaming_lists();
    let watch = async move { follow_within(api, config, &mut sink, budget).await };
    essential(name, shutdown, tracing::Instrument::instrument(watch, span))
}

/// Tag each change marked on `from` with `wrap` and mark it on `to`, until `shutdown`.
pub(crate) fn forward(
    from: Dirty<Change>,
    to: Dirty<Trigger>,
    wrap: impl Fn(Change) -> Trigger + Send + 'static,
    shutdown: &CancellationToken,
) {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changes = from.next() => changes.into_iter().for_each(|c| to.mark(wrap(c))),
            }
        }
    });
}
