//! `--exact-spelling`: the ValidatingAdmissionPolicy mode (deploy/components/policy) compares a
//! copy's addresses with its record's entries as exact strings, where edgegate normalises them,
//! so it judges like the webhook only while both are spelled canonically. This keeps counting
//! what is not, for the EdgegateAddressesNotCanonical alert.

use std::sync::Arc;
use std::time::Duration;

use crate::RecordSource;
use crate::index::copies::CopyIndex;
use tokio_util::sync::CancellationToken;

use crate::runtime::prune::metrics::Metrics;

/// How often the spellings are counted: a scan of every record and copy address, and spellings
/// change only with the records and copies themselves.
pub const EVERY: Duration = Duration::from_secs(60);

/// How often the caches are looked at while they are not whole.
const SYNC_POLL: Duration = Duration::from_secs(1);

/// Count the spellings as soon as both caches are whole (so the gauge exists soon after start),
/// then every [`EVERY`], each time on a whole view; until `shutdown`.
pub async fn watch(
    records: Arc<dyn RecordSource>,
    copies: Arc<CopyIndex>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        while !(records.synced() && copies.synced()) {
            if !sleep(SYNC_POLL, &shutdown).await {
                return;
            }
        }
        count(records.as_ref(), &copies, &metrics);
        if !sleep(EVERY, &shutdown).await {
            return;
        }
    }
}

/// Set the gauges, and warn while anything is spelled otherwise.
fn count(records: &dyn RecordSource, copies: &CopyIndex, metrics: &Metrics) {
    let (in_records, in_copies) = (records.noncanonical(), copies.noncanonical());
    metrics.set_noncanonical(in_records, in_copies);
    if in_records > 0 || in_copies > 0 {
        tracing::warn!(
            records = in_records,
            copies = in_copies,
            "addresses not spelled canonically: the ValidatingAdmissionPolicy mode refuses served copies whose \
             record spells an address differently; `edgegate audit` lists them"
        );
    }
}

/// False when `shutdown` came first.
async fn sleep(period: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(period) => true,
        () = shutdown.cancelled() => false,
    }
}
