//! The producer's word (`--producer-lease`): the producer's Lease carries, on each renewal, whether
//! the records it writes are current (it sees the hub and every project whole, and has written
//! what it saw). A record's silence about an address is a withdrawal only while that holds: a
//! producer that is down, restarting or cut off from its project cannot add an address served
//! again. So a copy that falls due is deleted only once the word has been given *after* it fell
//! due; until then it waits, and its namespace is passed over again at the next word.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use edgegate::index::Change;
use edgegate::runtime::lease::CURRENT_ANNOTATION;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::mpsc;

#[derive(Debug, Default)]
struct State {
    /// The Lease's resourceVersion as last seen, and when.
    seen: Option<(String, Instant)>,
    /// The latest moment the word is known to have been given at or after.
    given: Option<Instant>,
    /// Namespaces with a deletion waiting for the word.
    waiting: BTreeSet<String>,
}

/// What the pruner knows of the producer's word.
#[derive(Debug, Default)]
pub struct ProducerWord {
    state: Mutex<State>,
    /// Where a waiting namespace is sent to be passed over again.
    again: Option<mpsc::UnboundedSender<Change>>,
}

impl ProducerWord {
    pub fn new(again: mpsc::UnboundedSender<Change>) -> Self {
        ProducerWord { state: Mutex::default(), again: Some(again) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Has the producer said its records are current at some moment after `at`?
    pub fn given_since(&self, at: Instant) -> bool {
        self.state().given.is_some_and(|given| given > at)
    }

    /// `namespace` has a deletion waiting for the word; true the first time it is told so.
    pub fn wait(&self, namespace: &str) -> bool {
        self.state().waiting.insert(namespace.to_owned())
    }

    /// A write of the Lease seen at `now`. A watch delivers it as it happens (`as_it_happens`);
    /// after a re-list, a changed Lease was written at some moment since it was last seen, which
    /// is all that may be assumed. A Lease seen for the first time says nothing of when.
    pub fn observe(&self, lease: &Lease, now: Instant, as_it_happens: bool) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let mut state = self.state();
        let before = state.seen.replace((version.clone(), now));
        let written_at = match before {
            Some((seen, _)) if seen == version => return,
            Some((_, seen_at)) if !as_it_happens => seen_at,
            _ if as_it_happens => now,
            _ => return,
        };
        let held = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).is_some_and(|h| !h.is_empty());
        let current = lease.metadata.annotations.as_ref().and_then(|a| a.get(CURRENT_ANNOTATION)).map(String::as_str)
            == Some("true");
        if !(held && current) {
            return;
        }
        state.given = Some(state.given.map_or(written_at, |g| g.max(written_at)));
        let waiting = std::mem::take(&mut state.waiting);
        drop(state);
        if let Some(again) = &self.again {
            for namespace in waiting {
                let _ = again.send(Change::Namespace(namespace));
            }
        }
    }

    /// The Lease gone: whatever is seen next is new.
    fn forget(&self) {
        self.state().seen = None;
    }
}

/// Follow the Lease `name` in `namespace` until the process ends.
pub async fn follow(word: Arc<ProducerWord>, client: Client, namespace: String, name: String) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(lease)) => word.observe(&lease, Instant::now(), true),
            Ok(Event::InitApply(lease)) => word.observe(&lease, Instant::now(), false),
            Ok(Event::Delete(_)) => word.forget(),
            Ok(Event::Init | Event::InitDone) => {}
            Err(error) => tracing::warn!(lease = %name, %error, "watching the producer's Lease failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Duration;

    fn lease(version: &str, holder: Option<&str>, current: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.to_owned()),
                annotations: Some([(CURRENT_ANNOTATION.to_owned(), current.to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec { holder_identity: holder.map(str::to_owned), ..LeaseSpec::default() }),
        }
    }

    #[test]
    fn only_a_renewal_seen_after_the_moment_counts() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let word = ProducerWord::new(tx);
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        // Listed at start: written some time before, nobody knows when.
        word.observe(&lease("1", Some("p"), "true"), s(0), false);
        assert!(!word.given_since(t0 - Duration::from_secs(1)));
        assert!(word.wait("ns-a") && !word.wait("ns-a"));
        // The same version again (a re-list) is no renewal.
        word.observe(&lease("1", Some("p"), "true"), s(2), false);
        assert!(!word.given_since(t0 - Duration::from_secs(1)));
        // A renewal as it happens: given at 3 s, and the waiting namespace passed over again.
        word.observe(&lease("2", Some("p"), "true"), s(3), true);
        assert!(word.given_since(s(2)) && !word.given_since(s(3)));
        assert_eq!(rx.try_recv().ok(), Some(Change::Namespace("ns-a".to_owned())));
        // Changed across a re-list: written some time after it was last seen (3 s), no later.
        word.observe(&lease("3", Some("p"), "true"), s(9), false);
        assert!(word.given_since(s(2)) && !word.given_since(s(3)));
    }

    #[test]
    fn no_word_from_a_holder_that_is_not_current_or_gone() {
        let word = ProducerWord::default();
        let t0 = Instant::now();
        word.observe(&lease("1", Some("p"), "false"), t0, true);
        word.observe(&lease("2", None, "true"), t0 + Duration::from_secs(1), true);
        word.observe(&lease("3", Some(""), "true"), t0 + Duration::from_secs(2), true);
        assert!(!word.given_since(t0 - Duration::from_secs(1)));
    }
}
