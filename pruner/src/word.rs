//! The producer's word (`--producer-lease`): each write of the producer's Lease says whether the
//! records it writes are current (see `edgegate::runtime::lease::word_given`). A record's silence
//! about an address is a withdrawal only while that holds: a producer that is down, restarting or
//! cut off from its project cannot add an address served again. So a copy that falls due is
//! deleted only once the Lease has been *written* with the word after the copy fell due, and
//! still carries it.
//!
//! Told only by quorum reads of the Lease, made while a deletion waits: a read after the copy fell
//! due, and a later read of another version that carries the word, mean the producer wrote it in
//! between. No watch event's arrival time is taken for when a write happened.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgegate::index::Change;
use edgegate::runtime::lease::word_given;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio::sync::mpsc;

/// How often the Lease is read while a deletion waits (the producer renews every fifth of its
/// lease duration, 3 s by default).
pub const POLL: Duration = Duration::from_secs(1);

/// The latest read must be this recent for its word to count.
const FRESH: Duration = Duration::from_secs(3);

/// The reads kept (at one a second, the last minute).
const KEPT: usize = 64;

#[derive(Debug, Default)]
struct State {
    /// Reads of the Lease: when, its resourceVersion, whether it carried the word.
    reads: VecDeque<(Instant, String, bool)>,
    /// Namespaces with a deletion waiting for the word, and since when.
    waiting: BTreeMap<String, Instant>,
    polling: bool,
}

/// What the pruner knows of the producer's word.
pub struct ProducerWord {
    lease: Api<Lease>,
    name: String,
    state: Mutex<State>,
    /// Where a waiting namespace is sent to be passed over again.
    again: mpsc::UnboundedSender<Change>,
}

impl ProducerWord {
    pub fn new(lease: Api<Lease>, name: String, again: mpsc::UnboundedSender<Change>) -> Self {
        ProducerWord { lease, name, state: Mutex::default(), again }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Was the word written after `due`, and does the Lease, as read within [`FRESH`], still
    /// carry it?
    pub fn given_since(&self, due: Instant, now: Instant) -> bool {
        given_since(&self.state().reads, due, now)
    }

    /// A deletion in `namespace` waits for the word: read the Lease until it is given, then pass
    /// the namespace over again. True the first time the namespace waits.
    pub fn wait(self: &Arc<Self>, namespace: &str) -> bool {
        let mut state = self.state();
        let first = !state.waiting.contains_key(namespace);
        state.waiting.entry(namespace.to_owned()).or_insert_with(Instant::now);
        if !state.polling {
            state.polling = true;
            tokio::spawn(Arc::clone(self).poll());
        }
        first
    }

    /// How long the longest-waiting deletion has waited.
    pub fn longest_wait(&self) -> Duration {
        self.state().waiting.values().min().map(Instant::elapsed).unwrap_or_default()
    }

    /// Read the Lease every [`POLL`] while anything waits; each time the word stands, pass the
    /// waiting namespaces over again (each judges its own copies' due times).
    async fn poll(self: Arc<Self>) {
        loop {
            let read = match self.lease.get_opt(&self.name).await {
                Ok(lease) => lease.map(|l| (l.metadata.resource_version.clone().unwrap_or_default(), word_given(&l))),
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "reading the producer's Lease failed; deletions wait");
                    None
                }
            };
            let now = Instant::now();
            let woken = {
                let mut state = self.state();
                let (version, word) = read.unwrap_or_default();
                state.reads.push_back((now, version, word));
                while state.reads.len() > KEPT {
                    state.reads.pop_front();
                }
                let first = state.waiting.values().min().copied();
                if first.is_some_and(|since| given_since(&state.reads, since, now)) {
                    std::mem::take(&mut state.waiting).into_keys().collect()
                } else {
                    Vec::new()
                }
            };
            for namespace in woken {
                let _ = self.again.send(Change::Namespace(namespace));
            }
            tokio::time::sleep(POLL).await;
            let mut state = self.state();
            if state.waiting.is_empty() {
                state.polling = false;
                return;
            }
        }
    }
}

/// The latest read is fresh and carries the word, and an earlier read made after `due` saw
/// another version: the producer wrote its word after `due`.
fn given_since(reads: &VecDeque<(Instant, String, bool)>, due: Instant, now: Instant) -> bool {
    let Some((latest_at, latest, true)) = reads.back() else { return false };
    if now.saturating_duration_since(*latest_at) > FRESH || latest.is_empty() {
        return false;
    }
    reads.iter().any(|(at, version, _)| *at >= due && version != latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(t0: Instant, list: &[(u64, &str, bool)]) -> VecDeque<(Instant, String, bool)> {
        list.iter().map(|(s, v, w)| (t0 + Duration::from_secs(*s), (*v).to_owned(), *w)).collect()
    }

    #[test]
    fn a_write_after_the_moment_carrying_the_word() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        // Due at 10 s; read at 10 s (version 5), then 11 s (version 6, the word).
        let r = reads(t0, &[(10, "5", true), (11, "6", true)]);
        assert!(given_since(&r, at(10), at(11)));
        // Only reads before the moment: a write seen then may have been before it.
        assert!(!given_since(&r, at(10) + Duration::from_millis(1), at(11)));
        // The same version read again: nothing was written in between.
        assert!(!given_since(&reads(t0, &[(10, "6", true), (11, "6", true)]), at(10), at(11)));
        // Written since, but the latest write takes the word back.
        assert!(!given_since(&reads(t0, &[(10, "5", true), (11, "6", false)]), at(10), at(11)));
        // The latest read too old to stand for now.
        assert!(!given_since(&r, at(10), at(15)));
        // The Lease gone, or not read.
        assert!(!given_since(&reads(t0, &[(10, "5", true), (11, "", true)]), at(10), at(11)));
        assert!(!given_since(&VecDeque::new(), at(10), at(11)));
    }
}
