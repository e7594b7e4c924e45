//! Command-line flags, each with an `EDGEGATE_` environment fallback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use edgegate::runtime::flags::{HubArgs, LeaseArgs, LogFormat, parse_period};

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
    pub deletion: edgegate::runtime::flags::DeletionArgs,

    /// Namespaces passed over at once: each by one worker at a time, so one namespace whose
    /// DELETEs hang holds up its own copies only.
    #[arg(long, env = "EDGEGATE_WORKERS", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,

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
