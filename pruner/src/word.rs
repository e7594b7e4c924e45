//! The producer's word (`--producer-lease`): a write of the producer's Lease may say that the
//! records it writes are current (see `edgegate::runtime::lease::word_given`). A record's silence
//! about an address is a withdrawal only while that holds: a producer that is down, restarting or
//! cut off from its project cannot add an address served again. So a copy that falls due is
//! deleted only once the producer has *written* its word after the copy fell due, recently, and
//! the Lease still carries it.
//!
//! Told only by this process's own reads of the Lease, made while a deletion waits, each stamped
//! with when it was sent: a read sent after the copy fell due, and a later one showing another
//! `renewTime` with the word, mean the producer renewed in between. A failed read tells nothing.
//!
//! The word also says for how long the records have named everything served: a producer that
//! has only just started watching its projects (or watches again after a break) cannot know what
//! served before. A deletion also waits until that covers its grace, so an address that served
//! while nobody watched is withdrawn no sooner than one the producer saw stop serving.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use edgegate::index::Change;
use edgegate::runtime::clock;
use edgegate::runtime::lease::{word_complete_for, word_given};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// How often the Lease is read while a deletion waits (the producer renews every fifth of its
/// lease duration, 3 s by default).
pub const POLL: Duration = Duration::from_secs(1);

/// Reads go on this long after the last wait, so a deletion's second look (after its turn in the
/// pace) finds a recent read.
const LINGER: Duration = Duration::from_secs(5);

/// The reads kept (at one a second, the last minute).
const KEPT: usize = 64;

/// One read of the Lease that was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Read {
    /// When the GET was sent: the state it saw is at least this recent.
    sent: Instant,
    /// When its answer came: the state it saw is no more recent than this.
    received: Instant,
    /// `renewTime` as written (empty: none, or no Lease).
    renewed: String,
    word: bool,
    /// The producer's renewal period (a fifth of `leaseDurationSeconds`).
    renew_every: Duration,
    /// With the word: for how long before that renewal the records named everything served.
    complete_for: Option<Duration>,
}

#[derive(Debug, Default)]
struct State {
    reads: VecDeque<Read>,
    /// Namespaces to pass over again when the word stands.
    waiting: BTreeSet<String>,
    /// Since when some deletion has waited without the word standing (for the gauge).
    held_since: Option<Instant>,
    last_wait: Option<Instant>,
    polling: bool,
}

/// What the pruner knows of the producer's word.
pub struct ProducerWord {
    lease: Api<Lease>,
    name: String,
    /// The pruner's `--grace`: how long before a deletion the records must have been complete.
    grace: Duration,
    state: Mutex<State>,
    /// Where a waiting namespace is sent to be passed over again.
    again: mpsc::UnboundedSender<Change>,
}

impl ProducerWord {
    pub fn new(lease: Api<Lease>, name: String, grace: Duration, again: mpsc::UnboundedSender<Change>) -> Self {
        ProducerWord { lease, name, grace, state: Mutex::default(), again }
    }

    /// Has the producer renewed with its word since `due`, recently, does the Lease still carry
    /// it, and have its records been complete for the grace?
    pub fn given_since(&self, due: Instant, now: Instant) -> bool {
        given_since(&self.state.lock().reads, due, now, self.grace)
    }

    /// A deletion in `namespace` waits for the word: read the Lease until it stands, then pass
    /// the namespace over again. True when the namespace was not waiting already.
    pub fn wait(self: &Arc<Self>, namespace: &str) -> bool {
        let mut state = self.state.lock();
        let now = clock::now();
        state.last_wait = Some(now);
        state.held_since.get_or_insert(now);
        let first = state.waiting.insert(namespace.to_owned());
        if !state.polling {
            state.polling = true;
            tokio::spawn(Arc::clone(self).poll());
        }
        first
    }

    /// How long deletions have waited without the word standing; zero when none waits.
    pub fn held_for(&self) -> Duration {
        self.state.lock().held_since.map(clock::since).unwrap_or_default()
    }

    /// Read the Lease every [`POLL`] while anything waits (and [`LINGER`] after); each time the
    /// word stands, pass the waiting namespaces over again (each judges its own copies' times).
    async fn poll(self: Arc<Self>) {
        loop {
            let sent = clock::now();
            let read = match self.lease.get_opt(&self.name).await {
                Ok(lease) => Some(read(sent, clock::now(), lease.as_ref())),
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "reading the producer's Lease failed; deletions wait");
                    None
                }
            };
            let woken: Vec<String> = {
                let mut state = self.state.lock();
                if let Some(read) = read {
                    state.reads.push_back(read);
                    while state.reads.len() > KEPT {
                        state.reads.pop_front();
                    }
                }
                // The word stands for whatever fell due before the first read of this wait.
                let stands = state
                    .reads
                    .iter()
                    .find(|r| state.held_since.is_some_and(|h| r.sent >= h))
                    .is_some_and(|first| given_since(&state.reads, first.sent, clock::now(), self.grace));
                if stands {
                    state.held_since = None;
                    std::mem::take(&mut state.waiting).into_iter().collect()
                } else {
                    Vec::new()
                }
            };
            for namespace in woken {
                let _ = self.again.send(Change::Namespace(namespace));
            }
            tokio::time::sleep(POLL).await;
            let mut state = self.state.lock();
            if state.waiting.is_empty() && state.last_wait.is_none_or(|at| clock::since(at) > LINGER) {
                state.polling = false;
                state.held_since = None;
                return;
            }
        }
    }
}

fn read(sent: Instant, received: Instant, lease: Option<&Lease>) -> Read {
    let spec = lease.and_then(|l| l.spec.as_ref());
    let renewed = spec
        .and_then(|s| s.renew_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let seconds = spec.and_then(|s| s.lease_duration_seconds).and_then(|s| u64::try_from(s).ok()).unwrap_or(15);
    Read {
        sent,
        received,
        renewed,
        word: lease.is_some_and(word_given),
        renew_every: Duration::from_secs(seconds) / 5,
        complete_for: lease.and_then(word_complete_for),
    }
}

/// The word stands for `due`: the latest read carries it and is recent; its renewal was first
/// read recently (within a renewal period and two reads: a producer that stopped renewing gives
/// no word, however often the same Lease is read); a read sent after `due` showed another
/// renewal, so the producer renewed after `due`; and the records have been complete for `grace`
/// by now (that renewal was written before the first answer showing it came, so counting from
/// that answer says no more than is so). A producer that does not say how long (an older one) is
/// taken at its word as before.
fn given_since(reads: &VecDeque<Read>, due: Instant, now: Instant, grace: Duration) -> bool {
    let Some(latest) = reads.back() else { return false };
    if !latest.word || latest.renewed.is_empty() {
        return false;
    }
    let Some(first) = reads.iter().find(|r| r.renewed == latest.renewed) else { return false };
    let (first_seen, first_answered) = (first.sent, first.received);
    let recent = latest.renew_every + 2 * POLL + Duration::from_secs(1);
    if now.saturating_duration_since(latest.sent) > recent || now.saturating_duration_since(first_seen) > recent {
        return false;
    }
    let complete = latest
        .complete_for
        .is_none_or(|complete| grace.saturating_sub(now.saturating_duration_since(first_answered)) <= complete);
    complete && reads.iter().any(|r| r.sent >= due && r.renewed != latest.renewed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(t0: Instant, list: &[(u64, &str, bool)]) -> VecDeque<Read> {
        list.iter()
            .map(|(s, renewed, word)| Read {
                sent: t0 + Duration::from_secs(*s),
                received: t0 + Duration::from_secs(*s),
                renewed: (*renewed).to_owned(),
                word: *word,
                renew_every: Duration::from_secs(3),
                complete_for: None,
            })
            .collect()
    }

    #[test]
    fn a_renewal_after_the_moment_carrying_the_word() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        // Due at 10 s; read at 10 s (renewed a), then 11 s (renewed b, with the word).
        let r = reads(t0, &[(10, "a", true), (11, "b", true)]);
        assert!(given_since(&r, at(10), at(11), Duration::ZERO));
        // Only reads sent before the moment: the renewal seen may have been before it.
        assert!(!given_since(&r, at(10) + Duration::from_millis(1), at(11), Duration::ZERO));
        // The same renewal read again (a label or annotation changed, a read retried).
        assert!(!given_since(&reads(t0, &[(10, "b", true), (11, "b", true)]), at(10), at(11), Duration::ZERO));
        // Renewed since, but that renewal takes the word back.
        assert!(!given_since(&reads(t0, &[(10, "a", true), (11, "b", false)]), at(10), at(11), Duration::ZERO));
        // The latest read too old to stand for now (renewal period 3 s, two reads, a second).
        assert!(!given_since(&r, at(10), at(18), Duration::ZERO));
        // The Lease gone, or never read.
        assert!(!given_since(&reads(t0, &[(10, "a", true), (11, "", false)]), at(10), at(11), Duration::ZERO));
        assert!(!given_since(&VecDeque::new(), at(10), at(11), Duration::ZERO));
    }

    #[test]
    fn the_records_must_have_been_complete_for_the_grace() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let grace = Duration::from_secs(5);
        // A producer watching again since shortly before: renewed b, first read at 11 s, saying
        // its records have been complete for 2 s. What served before that it cannot know: the
        // word stands for a grace only from 11 − 2 + 5 = 14 s.
        let mut r = reads(t0, &[(10, "a", true), (11, "b", true)]);
        r.iter_mut().for_each(|read| read.complete_for = Some(Duration::from_secs(2)));
        assert!(!given_since(&r, at(10), at(11), grace));
        assert!(!given_since(&r, at(10), at(13), grace));
        r.push_back(Read { sent: at(14), received: at(14), ..r[1].clone() });
        assert!(given_since(&r, at(10), at(14), grace));
        // Complete for long: at once, as before.
        r.iter_mut().for_each(|read| read.complete_for = Some(Duration::from_secs(3600)));
        assert!(given_since(&r, at(10), at(11), grace));
    }

    #[test]
    fn a_producer_that_stopped_renewing_gives_no_word() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        // Renewed with the word at 11 s, then nothing: read again and again up to 30 s.
        let list: Vec<(u64, &str, bool)> =
            [(10, "a", true)].into_iter().chain((11..=30).map(|s| (s, "b", true))).collect();
        let r = reads(t0, &list);
        assert!(!given_since(&r, at(10), at(30), Duration::ZERO), "b was first read at 11 s: no renewal since");
    }
}
