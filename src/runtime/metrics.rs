//! Prometheus helpers both binaries use: registration in one line, a `result` label, encoding.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::{Metric, Registry};

/// `{result="..."}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// A new metric of type `M`, registered under `name` (after the registry's prefix).
pub fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// A work queue's `<name>_queue_depth`, `<name>_queue_oldest_seconds` and
/// `<name>_queue_retries_total`, brought up to date from the queue before each scrape.
pub struct QueueMetrics {
    depth: prometheus_client::metrics::gauge::Gauge,
    oldest: prometheus_client::metrics::gauge::Gauge,
    retries: prometheus_client::metrics::counter::Counter,
    /// The queue's retries when last brought up to date: the counter moves by the difference.
    seen: parking_lot::Mutex<u64>,
}

impl QueueMetrics {
    /// Registered as `<name>_queue_…`, of what waits to be `worked` ("written", "passed over").
    pub fn register(registry: &mut Registry, name: &str, keys: &str, worked: &str) -> Self {
        let depth = registered(
            registry,
            &format!("{name}_queue_depth"),
            &format!(
                "{keys} waiting to be {worked} (now, at a later instant, or once more after the work under way): at most the distinct {keys}"
            ),
        );
        let oldest = registered(
            registry,
            &format!("{name}_queue_oldest_seconds"),
            &format!("How long the one of the {keys} waiting longest to be {worked} now has waited"),
        );
        let retries = registered(
            registry,
            &format!("{name}_queue_retries"),
            &format!("How many times one of the {keys} was put back after failed work, each after its own backoff"),
        );
        QueueMetrics { depth, oldest, retries, seen: parking_lot::Mutex::new(0) }
    }

    pub fn set<K: Clone + Eq + std::hash::Hash + Send + 'static>(&self, queue: &super::queue::WorkQueue<K>) {
        self.depth.set(i64::try_from(queue.depth()).unwrap_or(i64::MAX));
        self.oldest.set(i64::try_from(queue.oldest().as_secs()).unwrap_or(i64::MAX));
        let retries = queue.retries();
        let mut seen = self.seen.lock();
        self.retries.inc_by(retries.saturating_sub(*seen));
        *seen = (*seen).max(retries);
    }
}

/// `edgegate_hub_token_expiry_timestamp_seconds`, when the hub's kubeconfig has a token that
/// expires (see [`super::credential::hub_token_expiry`]); an alert fires weeks before.
pub fn register_hub_token_expiry(registry: &mut Registry, hub: &super::flags::HubArgs) {
    if let Some(expiry) = super::credential::hub_token_expiry(hub) {
        let gauge: prometheus_client::metrics::gauge::Gauge = registered(
            registry,
            "hub_token_expiry_timestamp_seconds",
            "When the bearer token of the hub kubeconfig expires, in seconds since the Unix epoch",
        );
        gauge.set(expiry);
    }
}

/// The text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    encode_all(&[registry])
}

/// One text exposition of the families of every registry in `registries` (names must not repeat
/// across them): each registry's families, one `# EOF` at the end.
pub fn encode_all(registries: &[&Registry]) -> String {
    let mut text = String::new();
    for registry in registries {
        if let Err(e) = prometheus_client::encoding::text::encode_registry(&mut text, registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
    }
    if let Err(e) = prometheus_client::encoding::text::encode_eof(&mut text) {
        tracing::warn!(error = %e, "encoding metrics failed");
    }
    text
}
