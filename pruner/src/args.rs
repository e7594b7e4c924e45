//! Command-line flags, each with an `EDGEGATE_` environment fallback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use edgegate::CopySelector;
use edgegate::runtime::flags::{HubArgs, LeaseArgs, LogFormat, parse_duration, parse_period, parse_rate};

#[derive(Debug, Parser)]
#[command(
    name = "edgegate-pruner",
    version = edgegate::VERSION,
    about = "Deletes EndpointSlice copies on the hub whose namespace's EdgeReachability names none of their addresses"
)]
pub struct Args {
    /// Plain-HTTP listener for /healthz, /readyz and /metrics.
    #[arg(long, env = "EDGEGATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub hub: HubArgs,

    /// Re-check every namespace this often, besides the pass each record or copy change triggers.
    #[arg(long, env = "EDGEGATE_RESYNC", value_parser = parse_period, default_value = "60s")]
    pub resync: Duration,

    #[command(flatten)]
    pub deletion: DeletionArgs,

    /// Only EdgeReachability records with this name count; others are ignored and counted.
    #[arg(long, env = "EDGEGATE_RECORD_NAME", default_value = edgegate::index::store::DEFAULT_RECORD_NAME)]
    pub record_name: String,

    /// Removed (the producer prunes itself, `edgegate-producer --prune`): refused with
    /// an error, so a pruner left from an older install deletes nothing on records it no longer
    /// has the producer's word for.
    #[arg(long, env = "EDGEGATE_PRODUCER_LEASE", hide = true)]
    pub producer_lease: Option<String>,

    /// Name of the coordination.k8s.io/v1 Lease that elects the one replica that deletes.
    #[arg(long, env = "EDGEGATE_LEASE_NAME", default_value = "edgegate-pruner")]
    pub lease_name: String,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Log format.
    #[arg(long, env = "EDGEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How copies are deleted: the pruner's, and the producer's with `--prune`.
#[derive(Clone, Debug, clap::Args)]
pub struct DeletionArgs {
    /// Delete a copy only once its record has named none of its addresses for this long without a
    /// break (judged again right before the DELETE), so a record that flaps withdraws nothing.
    /// 0: delete as soon as a pass finds it.
    #[arg(long, env = "EDGEGATE_GRACE", value_parser = parse_duration, default_value = "30s")]
    pub grace: Duration,

    /// Log and count what would be deleted; delete nothing.
    #[arg(long, env = "EDGEGATE_DRY_RUN")]
    pub dry_run: bool,

    /// Pace deletions to at most this many per second (0: unpaced). None is dropped, only delayed.
    #[arg(long, env = "EDGEGATE_MAX_DELETES_PER_SECOND", value_parser = parse_rate, default_value = "50")]
    pub max_deletes_per_second: f64,

    /// Label selector that identifies copies; nothing else is ever listed, judged or deleted.
    #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = edgegate::core::selector::DEFAULT_COPY_SELECTOR)]
    pub copy_selector: CopySelector,

    /// Watch that every record entry and copy address is spelled canonically, every 60 s
    /// (edgegate_prune_noncanonical_addresses, a warning when any is not). Set by
    /// deploy/components/policy (on edgegate-pruner, or edgegate-producer with --prune), whose ValidatingAdmissionPolicy compares addresses as exact
    /// strings where edgegate compares them normalised.
    #[arg(long, env = "EDGEGATE_EXACT_SPELLING")]
    pub exact_spelling: bool,
}
