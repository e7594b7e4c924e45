//! Command-line flags, each with an `EDGEGATE_` environment fallback.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use edgegate::CopySelector;
use edgegate::runtime::flags::{HubArgs, LogFormat, parse_duration};

#[derive(Debug, Parser)]
#[command(
    name = "edgegate-pruner",
    version,
    about = "Deletes EndpointSlice copies on the hub whose namespace's EdgeReachability names none of their addresses"
)]
pub struct Args {
    /// Plain-HTTP listener for /healthz, /readyz and /metrics.
    #[arg(long, env = "EDGEGATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub hub: HubArgs,

    /// Re-check every namespace this often, besides the pass each record change triggers.
    #[arg(long, env = "EDGEGATE_RESYNC", value_parser = parse_duration, default_value = "60s")]
    pub resync: Duration,

    /// Log and count what would be deleted; delete nothing.
    #[arg(long, env = "EDGEGATE_DRY_RUN")]
    pub dry_run: bool,

    /// Pace deletions to at most this many per second (0: unpaced). None is dropped, only delayed.
    #[arg(long, env = "EDGEGATE_MAX_DELETES_PER_SECOND", default_value_t = 50.0)]
    pub max_deletes_per_second: f64,

    /// Label selector that identifies copies; nothing else is ever listed, judged or deleted.
    #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = edgegate::core::selector::DEFAULT_COPY_SELECTOR)]
    pub copy_selector: CopySelector,

    /// Only EdgeReachability records with this name count; others are ignored and counted.
    #[arg(long, env = "EDGEGATE_RECORD_NAME", default_value = edgegate::index::store::DEFAULT_RECORD_NAME)]
    pub record_name: String,

    /// Name of the coordination.k8s.io/v1 Lease that elects the one replica that deletes.
    #[arg(long, env = "EDGEGATE_LEASE_NAME", default_value = "edgegate-pruner")]
    pub lease_name: String,

    /// Namespace of the Lease (in a pod: its own namespace, from POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", default_value = "edgegate-system")]
    pub lease_namespace: String,

    /// This replica's identity in the Lease (in a pod: its name, from POD_NAME).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// How long a Lease holds without renewal.
    #[arg(long, env = "EDGEGATE_LEASE_DURATION", value_parser = parse_duration, default_value = "15s")]
    pub lease_duration: Duration,

    /// Run without leader election (a single replica only: two would both delete).
    #[arg(long, env = "EDGEGATE_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,

    /// Log format.
    #[arg(long, env = "EDGEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}
