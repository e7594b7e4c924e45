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

/// The text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::warn!(error = %e, "encoding metrics failed");
    }
    text
}
