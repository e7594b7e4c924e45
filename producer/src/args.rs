//! Command-line flags, each with an `EDGEGATE_` environment fallback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use edgegate::runtime::flags::{HubArgs, LeaseArgs, LogFormat, parse_duration, parse_period, parse_rate};

#[derive(Debug, Parser)]
#[command(group(clap::ArgGroup::new("projects").required(true).args(["project_kubeconfig", "projects_dir", "milo_kubeconfig"])))]
#[command(
    name = "edgegate-producer",
    version = edgegate::VERSION,
    about = "Writes each project namespace's EdgeReachability on the hub from the addresses its HTTPProxies serve"
)]
pub struct Args {
    /// Plain-HTTP listener for /healthz, /readyz and /metrics.
    #[arg(long, env = "EDGEGATE_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub hub: HubArgs,

    /// One project control plane's kubeconfig.
    #[arg(long, env = "EDGEGATE_PROJECT_KUBECONFIG")]
    pub project_kubeconfig: Option<PathBuf>,

    /// With --project-kubeconfig: the project's name (default: the file's stem).
    #[arg(long, env = "EDGEGATE_PROJECT_NAME", requires = "project_kubeconfig")]
    pub project_name: Option<String>,

    /// A directory of project kubeconfigs (`*.kubeconfig`, `*.yaml`; each one project, named by its
    /// stem), watched: a file added engages a project, a file removed disengages it (its records
    /// stay as they are).
    #[arg(long, env = "EDGEGATE_PROJECTS_DIR")]
    pub projects_dir: Option<PathBuf>,

    /// Datum's Milo: every `Project` at its root (resourcemanager.miloapis.com/v1alpha1) is
    /// discovered and, while Ready and neither suspended nor being deleted, engaged, its control
    /// plane reached on the same host and credentials under
    /// /apis/resourcemanager.miloapis.com/v1alpha1/projects/<name>/control-plane. A project left
    /// keeps its records and its copies.
    #[arg(long, env = "EDGEGATE_MILO_KUBECONFIG")]
    pub milo_kubeconfig: Option<PathBuf>,

    /// At most this many lists of project objects in flight at once, for every project together
    /// (a cold start of a thousand projects, a failover, Milo coming back). Enough that lists
    /// taking 400 ms each (an API server busy with a cold start) keep the pace below.
    #[arg(long, env = "EDGEGATE_PROJECT_LISTS_IN_FLIGHT", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub project_lists_in_flight: u16,

    /// Start at most this many lists of project objects a second, for every project together:
    /// a cold start's requests a second, as a streaming list is one request that goes on as the
    /// watch (a LIST and a WATCH where the server has no streaming lists). 70 lists 10,000
    /// projects (26,000 watches) in about 6 minutes, under 100 requests a second with what else
    /// the producer asks. 0: unpaced.
    #[arg(long, env = "EDGEGATE_PROJECT_LISTS_PER_SECOND", value_parser = parse_rate, default_value = "70")]
    pub project_lists_per_second: f64,

    /// Write at most this many records a second (0: unpaced): a catch-up after a hub restart, or a
    /// thousand projects engaged at once, comes at a pace the hub is sized for. A record waits at
    /// most its place in line (20 ms a record ahead of it at 50/s).
    #[arg(long, env = "EDGEGATE_MAX_WRITES_PER_SECOND", value_parser = parse_rate, default_value = "50")]
    pub max_writes_per_second: f64,

    /// Re-derive every namespace this often, repairing records edited or deleted by hand.
    #[arg(long, env = "EDGEGATE_RESYNC", value_parser = parse_period, default_value = "60s")]
    pub resync: Duration,

    /// Remove an address from a record only once the answer has lacked it for this long without a
    /// break, so a project passing through a state nobody meant (a selector edited before the
    /// interfaces are relabelled) withdraws nothing. Additions are written at once. 0: write
    /// every answer as it is.
    #[arg(long, env = "EDGEGATE_WITHDRAW_AFTER", value_parser = parse_duration, default_value = "15s")]
    pub withdraw_after: Duration,

    /// Name of the record in each hub namespace.
    #[arg(long, env = "EDGEGATE_RECORD_NAME", default_value = edgegate::index::store::DEFAULT_RECORD_NAME)]
    pub record_name: String,

    /// Take `spec.addresses` over from another field manager (the Go reconciler) instead of
    /// reporting the conflict and leaving the record alone.
    #[arg(long, env = "EDGEGATE_FORCE_OWNERSHIP")]
    pub force_ownership: bool,

    /// Also delete the hub's copies whose records name none of their addresses, as
    /// edgegate-pruner does, under this process's Lease, each copy only on the evidence of its own
    /// project: that project seen whole for --withdraw-after + --grace, its record's last write
    /// done, none of the copy's addresses served now. A project that cannot be read holds its own
    /// copies and nobody else's. Set by deploy/components/producer (no edgegate-pruner runs there).
    #[arg(long, env = "EDGEGATE_PRUNE")]
    pub prune: bool,

    /// With --prune: how copies are deleted (as edgegate-pruner's flags of the same names).
    #[command(flatten)]
    pub deletion: edgegate::runtime::flags::DeletionArgs,

    /// Share the projects across replicas (docs/sharding.md): each renews a member Lease
    /// `<lease-name>-member-<identity>`, holds the buckets whose fence Leases
    /// `<lease-name>-bucket-<n>` name it, and watches, writes and deletes for their projects only.
    #[arg(long, env = "EDGEGATE_SHARD", conflicts_with = "no_leader_election")]
    pub shard: bool,

    /// For the auditor's own test only (tests/system/tests/sharding.rs): sharing, write and
    /// delete for every bucket ever taken, ignoring the deadline and the fences. Compiled in only
    /// with the cargo feature `test-only-break-the-fence`, which no release build enables.
    #[cfg(feature = "test-only-break-the-fence")]
    #[arg(long, requires = "shard")]
    pub test_only_break_the_fence: bool,

    /// For the soak's own test only (tests/system/tests/soak.rs): prune with no grace at all, so a
    /// copy goes `--withdraw-after` after its address stopped serving, too early: the soak's
    /// checker must say so. Compiled in only with the cargo feature `test-only-skip-the-grace`,
    /// which no release build enables.
    #[cfg(feature = "test-only-skip-the-grace")]
    #[arg(long, requires = "prune")]
    pub test_only_skip_the_grace: bool,

    /// Hub namespaces written at once: each by one worker at a time, so one slow write holds up
    /// its own namespace only.
    #[arg(long, env = "EDGEGATE_WORKERS", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,

    /// Name of the coordination.k8s.io/v1 Lease that elects the one replica that writes.
    #[arg(long, env = "EDGEGATE_LEASE_NAME", default_value = "edgegate-producer")]
    pub lease_name: String,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Log format.
    #[arg(long, env = "EDGEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Args {
    /// Is the fence broken on purpose (`--test-only-break-the-fence`)? Never in a release build.
    pub fn breaks_the_fence(&self) -> bool {
        #[cfg(feature = "test-only-break-the-fence")]
        return self.test_only_break_the_fence;
        #[cfg(not(feature = "test-only-break-the-fence"))]
        false
    }

    /// The grace pruning waits: `--grace`, or none when skipped on purpose
    /// (`--test-only-skip-the-grace`). Never skipped in a release build.
    pub fn grace(&self) -> std::time::Duration {
        #[cfg(feature = "test-only-skip-the-grace")]
        if self.test_only_skip_the_grace {
            return std::time::Duration::ZERO;
        }
        self.deletion.grace
    }
}
