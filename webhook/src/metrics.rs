//! Prometheus metrics, in the text format on `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use edgegate::RecordSource;
use edgegate::runtime::metrics::{ResultLabels, registered};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    operation: &'static str,
    decision: &'static str,
    dry_run: &'static str,
}

/// Every metric the webhook exports.
pub struct Metrics {
    registry: Registry,
    reviews: Family<ReviewLabels, Counter>,
    refused_busy: Counter,
    duration: Histogram,
    tls_reloads: Family<ResultLabels, Counter>,
    record_file_errors: Counter,
    records: Gauge,
    addresses: Gauge,
    invalid_entries: Gauge,
    ignored_records: Gauge,
    synced: Gauge,
    certificate_expiry: Gauge,
}

impl Metrics {
    /// With the expiry of the hub kubeconfig's token, when it has one.
    pub fn with_hub_token(mut self, hub: &edgegate::runtime::flags::HubArgs) -> Self {
        edgegate::runtime::metrics::register_hub_token_expiry(&mut self.registry, hub);
        self
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgegate");
        edgegate::index::source::follow::register_undecodable(&mut registry);
        let r = &mut registry;
        let reviews =
            registered(r, "admission_reviews", "AdmissionReviews answered, by operation, decision and dryRun");
        let refused_busy = registered(
            r,
            "admission_refused_busy",
            "Requests answered 429 (Retry-After: 1) because the in-flight budget (--max-inflight-bytes) could not spare their body's bytes",
        );
        // 50 µs .. ~0.8 s: reviews are answered from memory, so the interesting range is small.
        let duration = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.000_05, 2.5, 12));
        r.register("admission_duration_seconds", "Time to decode, judge and encode one review", duration.clone());
        let tls_reloads: Family<ResultLabels, Counter> =
            registered(r, "tls_reloads", "Serving certificate reloads after a file change, by result");
        let record_file_errors =
            registered(r, "record_file_errors", "Record files that failed to parse (their last good state was kept)");
        let records = registered(r, "records", "EdgeReachability records in force (one per namespace)");
        let addresses = registered(r, "record_addresses", "Valid addresses named over all records");
        let invalid_entries =
            registered(r, "record_invalid_entries", "Record entries that are no address, skipped for matching");
        let ignored_records =
            registered(r, "records_ignored", "EdgeReachability objects ignored because of their name");
        let synced =
            registered(r, "record_source_synced", "1 once the record source has loaded its first complete view");
        // Named after cert-manager's certmanager_certificate_expiration_timestamp_seconds.
        let certificate_expiry = registered(
            r,
            "tls_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate's leaf, in seconds since the Unix epoch",
        );
        // Both results from the start, at 0: an alert on increase() sees the first failure.
        for result in ["success", "failure"] {
            let _ = tls_reloads.get_or_create(&ResultLabels { result });
        }
        Metrics {
            registry,
            reviews,
            refused_busy,
            duration,
            tls_reloads,
            record_file_errors,
            records,
            addresses,
            invalid_entries,
            ignored_records,
            synced,
            certificate_expiry,
        }
    }

    /// The served leaf's notAfter (Unix seconds).
    pub fn certificate_expiry(&self, not_after: i64) {
        self.certificate_expiry.set(not_after);
    }

    pub fn review(&self, operation: &'static str, decision: &'static str, dry_run: bool, took: Duration) {
        let dry_run = if dry_run { "true" } else { "false" };
        self.reviews.get_or_create(&ReviewLabels { operation, decision, dry_run }).inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// A request refused 429: the in-flight budget could not spare its body's bytes.
    pub fn refused_busy(&self) {
        self.refused_busy.inc();
    }

    pub fn tls_reload(&self, result: &'static str) {
        self.tls_reloads.get_or_create(&ResultLabels { result }).inc();
    }

    /// Set the file-error counter to the source's running total.
    pub fn record_file_errors(&self, total: u64) {
        let seen = self.record_file_errors.get();
        if total > seen {
            self.record_file_errors.inc_by(total - seen);
        }
    }

    /// The text exposition, with gauges read from the record source now.
    pub fn encode(&self, source: &Arc<dyn RecordSource>) -> String {
        let stats = source.stats();
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.records.set(as_i64(stats.records));
        self.addresses.set(as_i64(stats.addresses));
        self.invalid_entries.set(as_i64(stats.invalid_entries));
        self.ignored_records.set(as_i64(stats.ignored_records));
        self.synced.set(i64::from(source.synced()));
        edgegate::runtime::metrics::encode(&self.registry)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
