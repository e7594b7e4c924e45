//! Following a watch into an in-memory index: one list, then watch events, with kube-runtime's
//! watcher. On an error the watcher is dropped and, after a backoff, started again from a fresh
//! list, so an index is only ever whole (listed and followed) or known not to be.
//!
//! A config asking for streaming lists (the list as a watch's first events, one request instead
//! of two) gets them where the API server offers them and a LIST where it does not: a server
//! whose WatchList is off refuses the request (422, or 400; whenever it does, a LIST follows),
//! and one too old to know it sends the objects
//! but never says the list has ended, so a watch's first streaming list that brings nothing for
//! [`STREAM_END_WAIT`] without having ended, or whose answer ends before the list does, is done
//! as a LIST too; either way, from then on for that watch. Once a streaming list has ended, the
//! server offers them: a later one that stalls is waited for as a stalled LIST is.

use std::time::Duration;

use std::sync::LazyLock;

use futures::StreamExt;
use kube::Api;
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::watcher::{self, Event, watcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::de::DeserializeOwned;

/// `{kind="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Objects delivered that could not be decoded, by kind, for the whole process (every watch
/// counts here): each binary registers it ([`register_undecodable`]).
static UNDECODABLE: LazyLock<Family<KindLabels, Counter>> = LazyLock::new(Family::default);

/// `edgegate_undecodable_objects_total{kind}`: objects the process's watches delivered that
/// could not be decoded, and were skipped.
pub fn register_undecodable(registry: &mut prometheus_client::registry::Registry) {
    registry.register(
        "undecodable_objects",
        "Objects a watch delivered that could not be decoded (skipped; where they matter, their namespace is unreadable)",
        UNDECODABLE.clone(),
    );
}

/// How many objects of `kind` could not be decoded so far.
pub fn undecodable(kind: &str) -> u64 {
    UNDECODABLE.get_or_create(&KindLabels { kind: kind.to_owned() }).get()
}

/// Where an object that could not be decoded was delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// In a (re-)list.
    Listed,
    /// Added or changed.
    Applied,
    /// Deleted: whatever it made unreadable is readable again.
    Deleted,
}

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
    /// An object that could not be decoded (a field of the wrong type: a CRD that is someone
    /// else's, a version served without conversion, a kind another team evolves). Already logged
    /// and counted; by default skipped. An index whose answer such an object could change makes
    /// its namespace unreadable until it is deleted or decodes, while every other goes on.
    fn undecodable(&mut self, _object: &InvalidObject, _phase: Phase) {}
}

/// An index that takes each (re-)list whole, as one snapshot; [`Whole`] gathers the list for it,
/// so the index never sees half of one.
pub trait SnapshotSink<K> {
    /// A complete (re-)list: what the index holds from now on, and the objects of it that could
    /// not be decoded (see [`WatchSink::undecodable`]).
    fn replace(&mut self, all: Vec<K>, undecodable: Vec<InvalidObject>);
    /// An object was added or changed.
    fn applied(&mut self, object: K);
    /// An object was deleted.
    fn deleted(&mut self, object: K);
    /// The watch failed; it will be listed again after a backoff.
    fn failed(&mut self, error: &watcher::Error);
    /// An object that could not be decoded was added, changed or deleted (`gone`), outside a
    /// list; by default skipped.
    fn undecodable(&mut self, _object: &InvalidObject, _gone: bool) {}
}

/// A [`WatchSink`] that gathers each (re-)list aside and hands it to `sink` once it is complete;
/// a watch error drops what was gathered.
pub struct Whole<S, K> {
    pub sink: S,
    relisting: Option<(Vec<K>, Vec<InvalidObject>)>,
}

impl<S, K> Whole<S, K> {
    pub fn new(sink: S) -> Self {
        Whole { sink, relisting: None }
    }
}

impl<K, S: SnapshotSink<K>> WatchSink<K> for Whole<S, K> {
    fn relist_started(&mut self) {
        self.relisting = Some((Vec::new(), Vec::new()));
    }
    fn listed(&mut self, object: K) {
        if let Some((list, _)) = self.relisting.as_mut() {
            list.push(object);
        }
    }
    fn relist_done(&mut self) {
        if let Some((all, undecodable)) = self.relisting.take() {
            self.sink.replace(all, undecodable);
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
    fn undecodable(&mut self, object: &InvalidObject, phase: Phase) {
        match (phase, self.relisting.as_mut()) {
            (Phase::Listed, Some((_, undecodable))) => undecodable.push(object.clone()),
            (Phase::Listed, None) => {}
            (Phase::Applied, _) => self.sink.undecodable(object, false),
            (Phase::Deleted, _) => self.sink.undecodable(object, true),
        }
    }
}

/// How long one watch request lasts before the API server ends it and the watcher starts the
/// next one from where it was (no re-list). Shorter than the client's read timeout
/// (`runtime::client::API_READ_TIMEOUT`), so only a dead connection is ever timed out.
pub const WATCH_TIMEOUT_SECS: u32 = 10;

/// A failed watch lists again after 250 ms to 500 ms, then twice as long, up to 1 s to 2 s
/// ([`crate::index::backoff`]): short enough that an index is whole again within seconds of the
/// API server coming back.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a failed watch lists again, jitter included.
#[cfg(test)]
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// How long a list may hold its turn in a [`super::budget::ListBudget`] without bringing
/// anything: a list's pages come within a few hundred milliseconds; one that brings nothing for
/// longer goes on, but no longer counts against the budget.
pub const LIST_TURN: Duration = Duration::from_secs(10);

/// How long a streaming list may bring nothing before it has ended, before the watch lists instead:
/// a server that sends the end at all sends it right after the last object.
pub const STREAM_END_WAIT: Duration = Duration::from_secs(10);

/// Whether the start of a streaming list failed because the server does not take one (its
/// WatchList off: 422; a request it cannot parse: 400), so that a LIST would do.
fn streaming_refused(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(status)) if [400, 422].contains(&status.code))
}

/// `config` listing with a LIST from now on, said once.
fn list_instead(config: &watcher::Config, kind: &str, why: &'static str) -> watcher::Config {
    tracing::info!(kind, why, "no streaming list here: listing instead");
    let mut config = config.clone();
    config.initial_list_strategy = watcher::InitialListStrategy::ListWatch;
    config
}

fn streaming(config: &watcher::Config) -> bool {
    config.initial_list_strategy == watcher::InitialListStrategy::StreamingList
}

/// How long one watch request of a project's lasts: drawn once per watch between these (10 to 20
/// minutes), so an idle project costs Milo (or its API server) a request per watch every quarter
/// of an hour on average, and watches started together (a cold start, a failover, Milo coming
/// back) renew spread over ten minutes, never as a wave. Renewals are not paced by a
/// [`super::budget::ListBudget`] (they resume from where the watch was, no list): ten minutes is
/// longer than 10,000 projects take to list at its pace, so a cold start of that size sees none.
/// client-go's reflectors draw 5 to 10 minutes, a kube-apiserver left to choose 30 to 60; length
/// costs nothing here: the client's read timeout (`runtime::client::PROJECT_READ_TIMEOUT`) is
/// longer than the API server's watch bookmarks come (about every minute), so a quiet watch is
/// never timed out, and a project cut off silently is noticed within that read timeout (only that
/// project becomes incomplete).
pub const PROJECT_WATCH_TIMEOUT_SECS: std::ops::Range<u32> = 600..1200;

/// A project watch's length, drawn from [`PROJECT_WATCH_TIMEOUT_SECS`].
pub fn project_watch_timeout() -> u32 {
    fastrand::u32(PROJECT_WATCH_TIMEOUT_SECS)
}

/// Feed `sink` from `api` until the task is dropped. Each watch request lasts `config`'s timeout,
/// or [`WATCH_TIMEOUT_SECS`] if it sets none. Each object is decoded on its own: one that
/// cannot be is logged, counted and handed to [`WatchSink::undecodable`], and the rest of the
/// list goes on (decoded whole, one bad object would fail the list, and the index would never
/// sync).
pub async fn follow<K, S>(api: Api<DeserializeGuard<K>>, config: watcher::Config, sink: &mut S)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    S: WatchSink<K>,
{
    follow_within(api, config, sink, None).await;
}

/// [`follow`], each (re-)list started within `budget`: its turn taken before the watch starts,
/// held until the list is whole or fails, or brings nothing for [`LIST_TURN`].
pub async fn follow_within<K, S>(
    api: Api<DeserializeGuard<K>>,
    config: watcher::Config,
    sink: &mut S,
    budget: Option<std::sync::Arc<super::budget::ListBudget>>,
) where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
    S: WatchSink<K>,
{
    let mut backoff = crate::index::backoff::backoff(FIRST_BACKOFF, MAX_BACKOFF);
    let timeout = config.timeout.unwrap_or(WATCH_TIMEOUT_SECS);
    let mut config = config.timeout(timeout);
    // Whether a streaming list of this watch has ended: the server offers them.
    let mut streamed = false;
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let deliver = |sink: &mut S, object: DeserializeGuard<K>, phase: Phase| match (object.0, phase) {
        (Ok(object), Phase::Listed) => sink.listed(object),
        (Ok(object), Phase::Applied) => sink.applied(object),
        (Ok(object), Phase::Deleted) => sink.deleted(object),
        (Err(bad), phase) => {
            let (namespace, name) = (bad.metadata.namespace.as_deref(), bad.metadata.name.as_deref());
            if phase != Phase::Deleted {
                UNDECODABLE.get_or_create(&KindLabels { kind: kind.clone() }).inc();
            }
            tracing::warn!(kind, namespace, name, error = %bad.error, ?phase, "object cannot be decoded; skipped, its namespace unreadable where it matters");
            sink.undecodable(&bad, phase);
        }
    };
    loop {
        let mut turn = match &budget {
            Some(budget) => budget.take().await,
            None => None,
        };
        let mut turn_ends = tokio::time::Instant::now() + LIST_TURN;
        // While this watch's first streaming list has not ended: when it must bring something by.
        let mut stream_ends: Option<tokio::time::Instant> = None;
        // Whether a list has begun and not ended under this watcher: it begins one again on its
        // own when the stream ends, which must not hide a streaming list that never ends.
        let mut begun = false;
        // The watcher (and any answer it holds open) is gone before the backoff.
        {
            let events = watcher(api.clone(), config.clone());
            futures::pin_mut!(events);
            loop {
                let event = tokio::select! {
                    event = events.next() => {
                        // Coming along: the turn is kept while the list makes progress.
                        turn_ends = tokio::time::Instant::now() + LIST_TURN;
                        if let Some(ends) = stream_ends.as_mut() {
                            *ends = tokio::time::Instant::now() + STREAM_END_WAIT;
                        }
                        event
                    }
                    () = tokio::time::sleep_until(turn_ends), if turn.is_some() => {
                        // A list that brings nothing for this long (a project that does not
                        // answer) must not keep others' from starting: it goes on outside the
                        // budget.
                        drop(turn.take());
                        continue;
                    }
                    () = tokio::time::sleep_until(stream_ends.unwrap_or(turn_ends)), if stream_ends.is_some() => {
                        config = list_instead(&config, &kind, "a streaming list brought nothing and did not end");
                        break;
                    }
                };
                let Some(event) = event else { break };
                match event {
                    Ok(Event::Init) => {
                        if streaming(&config) && !streamed {
                            if begun {
                                config = list_instead(&config, &kind, "a streaming list ended before its end");
                                break;
                            }
                            stream_ends = Some(tokio::time::Instant::now() + STREAM_END_WAIT);
                        }
                        begun = true;
                        sink.relist_started();
                    }
                    Ok(Event::InitApply(object)) => deliver(sink, object, Phase::Listed),
                    Ok(Event::InitDone) => {
                        backoff = crate::index::backoff::backoff(FIRST_BACKOFF, MAX_BACKOFF);
                        streamed |= streaming(&config);
                        (begun, stream_ends) = (false, None);
                        drop(turn.take()); // the list is whole: the next one may start
                        sink.relist_done();
                    }
                    Ok(Event::Apply(object)) => deliver(sink, object, Phase::Applied),
                    Ok(Event::Delete(object)) => deliver(sink, object, Phase::Deleted),
                    // Refused before anything came: a LIST is as good, whenever it happens (a
                    // server of another version behind the same address).
                    Err(error) if streaming(&config) && streaming_refused(&error) => {
                        config = list_instead(&config, &kind, "the API server refused a streaming list");
                        break;
                    }
                    Err(error) => {
                        sink.failed(&error);
                        break;
                    }
                }
            }
        }
        // Not held through the backoff: a project failing over and over would keep a turn that
        // others need.
        drop(turn);
        tokio::time::sleep(backoff.next().unwrap_or(MAX_BACKOFF)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::source::budget::ListBudget;
    use http::{Request, Response};
    use k8s_openapi::api::core::v1::Namespace;
    use kube::client::Body;

    struct Nothing;
    impl WatchSink<Namespace> for Nothing {
        fn listed(&mut self, _: Namespace) {}
        fn applied(&mut self, _: Namespace) {}
        fn deleted(&mut self, _: Namespace) {}
        fn undecodable(&mut self, _: &InvalidObject, _: Phase) {}
        fn relist_started(&mut self) {}
        fn relist_done(&mut self) {}
        fn failed(&mut self, _: &watcher::Error) {}
    }

    /// A watch of `client`'s namespaces within `budget`, as a task.
    fn follower(client: kube::Client, budget: &std::sync::Arc<ListBudget>) -> tokio::task::JoinHandle<()> {
        let budget = std::sync::Arc::clone(budget);
        tokio::spawn(async move {
            follow_within::<Namespace, _>(Api::all(client), watcher::Config::default(), &mut Nothing, Some(budget))
                .await;
        })
    }

    /// One list in flight: a project whose lists fail at once, and one whose list hangs, do not
    /// keep a healthy project's list from starting (failed on the old code: the failing one held
    /// its turn through each backoff, the hanging one for as long as it hung).
    #[tokio::test(start_paused = true)]
    async fn a_failing_or_hanging_list_gives_its_turn_up() {
        let budget = ListBudget::new(1, 0.0);
        let started = tokio::time::Instant::now();
        // Failing at once, again and again.
        let (mock, mut failing) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let a = follower(kube::Client::new(mock, "default"), &budget);
        let (_, send) = failing.next_request().await.expect("a's list");
        send.send_error(std::io::Error::other("refused"));
        // The healthy one asks during a's backoff, and gets its turn at once.
        let (mock, mut healthy) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let b = follower(kube::Client::new(mock, "default"), &budget);
        let (request, _hold) = healthy.next_request().await.expect("b's list");
        assert!(!request.uri().to_string().contains("watch=true"), "a list");
        let waited = started.elapsed();
        assert!(waited < Duration::from_millis(100), "b's list started {waited:?} after a's failed");
        // b's list now hangs; a's next list starts once b's turn ends.
        let next = tokio::time::timeout(Duration::from_secs(60), failing.next_request()).await;
        let (_, _hold_a) = next.expect("a's next list within 60 s").expect("a's second list");
        let waited = started.elapsed();
        println!("a's next list started {waited:?} in, b's list hanging");
        // Not before b's turn ran out (the budget holds), and not long after.
        assert!(waited >= LIST_TURN - Duration::from_millis(100), "the budget did not hold: {waited:?}");
        assert!(waited <= LIST_TURN + Duration::from_millis(100), "{waited:?}");
        a.abort();
        b.abort();
    }

    type Server = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    /// A watch of namespaces asking for streaming lists, as a task, and its mock API server.
    fn streaming_follower() -> (Server, tokio::task::JoinHandle<()>) {
        let (mock, server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(mock, "default");
        let task = tokio::spawn(async move {
            let config = watcher::Config::default().streaming_lists();
            follow_within::<Namespace, _>(Api::all(client), config, &mut Nothing, None).await;
        });
        (server, task)
    }

    /// One namespace added, then the answer ends (no end of the list).
    fn one_added() -> Response<Body> {
        let added = r#"{"type":"ADDED","object":{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}}"#;
        Response::builder().body(Body::from(format!("{added}\n").into_bytes())).expect("events")
    }

    fn is_streaming_list(request: &Request<Body>) -> bool {
        let uri = request.uri().to_string();
        uri.contains("watch=true") && uri.contains("sendInitialEvents=true")
    }

    /// A server whose WatchList is off refuses a streaming list (422): the watch lists instead,
    /// and keeps to it.
    #[tokio::test(start_paused = true)]
    async fn a_refused_streaming_list_lists_instead() {
        let (mut server, task) = streaming_follower();
        let (request, send) = server.next_request().await.expect("the first request");
        assert!(is_streaming_list(&request), "a streaming list first: {}", request.uri());
        let refusal = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,
            "message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}"#;
        send.send_response(Response::builder().status(422).body(Body::from(refusal.as_bytes().to_vec())).expect("422"));
        let (request, send) = server.next_request().await.expect("the next request");
        assert!(!request.uri().to_string().contains("watch=true"), "a LIST after the refusal: {}", request.uri());
        let list = r#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#;
        send.send_response(Response::builder().body(Body::from(list.as_bytes().to_vec())).expect("list"));
        let (request, _hold) = server.next_request().await.expect("the watch");
        let uri = request.uri().to_string();
        assert!(uri.contains("watch=true") && !uri.contains("sendInitialEvents"), "a watch from the list: {uri}");
        task.abort();
    }

    /// A server too old to know streaming lists sends the objects and never the list's end: the
    /// watch lists instead once nothing has come for [`STREAM_END_WAIT`], not before.
    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_that_never_ends_lists_instead() {
        let (mut server, task) = streaming_follower();
        let (request, send) = server.next_request().await.expect("the first request");
        assert!(is_streaming_list(&request), "a streaming list first: {}", request.uri());
        send.send_response(one_added());
        // The stream ended without the end of the list: the watcher asks again, and is not answered.
        let (request, _hold) = server.next_request().await.expect("the second request");
        assert!(is_streaming_list(&request), "a streaming list again: {}", request.uri());
        let asked = tokio::time::Instant::now();
        let (request, _hold) = server.next_request().await.expect("the third request");
        let waited = asked.elapsed();
        println!("listed instead {waited:?} after the streaming list went quiet");
        assert!(!request.uri().to_string().contains("watch=true"), "a LIST: {}", request.uri());
        assert!(waited >= STREAM_END_WAIT, "gave up on the streaming list after {waited:?}");
        assert!(waited <= STREAM_END_WAIT + LONGEST_WAIT + Duration::from_millis(100), "{waited:?}");
        task.abort();
    }

    /// A server that ignores the request and ends each answer (its watch timeout) before any end
    /// of the list: the watcher would begin the list again and again; the second begins a LIST.
    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_whose_answers_end_first_lists_instead() {
        let (mut server, task) = streaming_follower();
        for n in 1..=2 {
            let (request, send) = server.next_request().await.expect("a request");
            assert!(is_streaming_list(&request), "streaming list {n}: {}", request.uri());
            send.send_response(one_added());
        }
        let asked = tokio::time::Instant::now();
        let (request, _hold) = server.next_request().await.expect("the third request");
        assert!(!request.uri().to_string().contains("watch=true"), "a LIST: {}", request.uri());
        assert!(asked.elapsed() <= LONGEST_WAIT, "listed {:?} after the second answer", asked.elapsed());
        task.abort();
    }
}
