//! Following a watch into an in-memory index: one list, then watch events, with kube-runtime's
//! watcher. On an error the watcher is dropped and, after a backoff, started again from a fresh
//! list, so an index is only ever whole (listed and followed) or known not to be.

use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;

/// What an index does with a watch's events, one at a time, the (re-)list included: for an index
/// that turns each object into something smaller as it arrives (the record store, the copy index),
/// so the list is never held whole. An index that wants each list whole implements
/// [`SnapshotSink`] behind [`Whole`] instead.
pub trait WatchSink<K> {
    /// A (re-)list begins: gather what follows aside.
    fn relist_started(&mut self);
    /// One object of the (re-)list.
    fn listed(&mut self, object: K);
    /// The (re-)list is complete: swap it in.
    fn relist_done(&mut self);
    /// An object was added or changed.
    fn applied(&mut self, object: K);
    /// An object was deleted.
    fn deleted(&mut self, object: K);
    /// The watch failed; it will be listed again after a backoff.
    fn failed(&mut self, error: &watcher::Error);
}

/// An index that takes each (re-)list whole, as one snapshot; [`Whole`] gathers the list for it,
/// so the index never sees half of one.
pub trait SnapshotSink<K> {
    /// A complete (re-)list: what the index holds from now on.
    fn replace(&mut self, all: Vec<K>);
    /// An object was added or changed.
    fn applied(&mut self, object: K);
    /// An object was deleted.
    fn deleted(&mut self, object: K);
    /// The watch failed; it will be listed again after a backoff.
    fn failed(&mut self, error: &watcher::Error);
}

/// A [`WatchSink`] that gathers each (re-)list aside and hands it to `sink` once it is complete;
/// a watch error drops what was gathered.
pub struct Whole<S, K> {
    pub sink: S,
    relisting: Option<Vec<K>>,
}

impl<S, K> Whole<S, K> {
    pub fn new(sink: S) -> Self {
        Whole { sink, relisting: None }
    }
}

impl<K, S: SnapshotSink<K>> WatchSink<K> for Whole<S, K> {
    fn relist_started(&mut self) {
        self.relisting = Some(Vec::new());
    }
    fn listed(&mut self, object: K) {
        if let Some(list) = self.relisting.as_mut() {
            list.push(object);
        }
    }
    fn relist_done(&mut self) {
        if let Some(all) = self.relisting.take() {
            self.sink.replace(all);
        }
    }
    fn applied(&mut self, object: K) {
        self.sink.applied(object);
    }
    fn deleted(&mut self, object: K) {
        self.sink.deleted(object);
    }
    fn failed(&mut self, error: &watcher::Error) {
        self.relisting = None;
        self.sink.failed(error);
    }
}

/// How long one watch request lasts before the API server ends it and the watcher starts the
/// next one from where it was (no re-list). Shorter than the client's read timeout
/// ([`crate::runtime::client::API_READ_TIMEOUT`]), so only a dead connection is ever timed out.
pub const WATCH_TIMEOUT_SECS: u32 = 10;

const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Short enough that an index is whole again within seconds of the API server coming back.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Feed `sink` from `api` until the task is dropped. Each watch request lasts
/// [`WATCH_TIMEOUT_SECS`], whatever `config` says.
pub async fn follow<K, S>(api: Api<K>, config: watcher::Config, sink: &mut S)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    S: WatchSink<K>,
{
    let mut backoff = FIRST_BACKOFF;
    let config = config.timeout(WATCH_TIMEOUT_SECS);
    loop {
        let events = watcher(api.clone(), config.clone());
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => sink.relist_started(),
                Ok(Event::InitApply(object)) => sink.listed(object),
                Ok(Event::InitDone) => {
                    backoff = FIRST_BACKOFF;
                    sink.relist_done();
                }
                Ok(Event::Apply(object)) => sink.applied(object),
                Ok(Event::Delete(object)) => sink.deleted(object),
                Err(error) => {
                    sink.failed(&error);
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
