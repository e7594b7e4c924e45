//! Command-line flags, each with an `EDGEGATE_` environment fallback.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use edgegate::CopySelector;
use edgegate::runtime::flags::{HubArgs, LogFormat, parse_duration};

#[derive(Debug, Parser)]
#[command(
    name = "edgegate-webhook",
    version = edgegate::VERSION,
    about = "Admits EndpointSlice copies to a federation hub only where their namespace's EdgeReachability names one of their addresses"
)]
pub struct Args {
    /// Address the HTTPS listener binds (admission, probes and metrics).
    #[arg(long, env = "EDGEGATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Serving certificate (PEM, leaf first). Re-read when the file changes.
    #[arg(long, env = "EDGEGATE_TLS_CERT", requires = "tls_key", conflicts_with = "self_signed")]
    pub tls_cert: Option<PathBuf>,

    /// Private key of the serving certificate (PEM). Re-read when the file changes.
    #[arg(long, env = "EDGEGATE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Make (or reuse) a dev CA and a serving certificate for localhost, 127.0.0.1 and ::1 in DIR:
    /// ca.crt, tls.crt, tls.key. The default when no --tls-cert is given.
    #[arg(long, env = "EDGEGATE_SELF_SIGNED", value_name = "DIR", default_value = ".edgegate/tls")]
    pub self_signed: PathBuf,

    /// Read records from EdgeReachability manifests in DIR (YAML or JSON), watched for changes.
    /// The default record source; --kubernetes reads them from the hub instead.
    #[arg(long, env = "EDGEGATE_RECORDS_DIR", value_name = "DIR", default_value = "records")]
    pub records_dir: PathBuf,

    /// Read records from the hub's API server (in-cluster config, or --kubeconfig) instead of files.
    #[arg(long, env = "EDGEGATE_KUBERNETES")]
    pub kubernetes: bool,

    /// With --kubernetes: while the record watch is broken, keep answering from the last synced
    /// records for at most this long; after it, refuse to judge copies (503) and report not ready
    /// until the records are listed again.
    #[arg(long, env = "EDGEGATE_MAX_STALENESS", value_parser = parse_duration, default_value = "5m")]
    pub max_staleness: Duration,

    #[command(flatten)]
    pub hub: HubArgs,

    /// Keep the caBundle of this ValidatingWebhookConfiguration, and of the MutatingWebhookConfiguration
    /// of this name if there is one (on the cluster --kubeconfig names), equal to the CA of the
    /// served certificate, at start and around every rotation. For API servers no CA injector
    /// watches, such as a Karmada hub's, and for rotating the CA without refusing admissions.
    #[arg(long, env = "EDGEGATE_CA_BUNDLE_FOR", value_name = "NAME", requires = "tls_cert")]
    pub ca_bundle_for: Option<String>,

    /// The CA of the served certificate, with --ca-bundle-for. Default: ca.crt beside --tls-cert
    /// (where cert-manager puts it).
    #[arg(long, env = "EDGEGATE_CA_FILE")]
    pub ca_file: Option<PathBuf>,

    /// With --ca-bundle-for: how long a new CA sits in the bundle before the new leaf is served,
    /// for the API server to take the changed configuration.
    #[arg(long, env = "EDGEGATE_CA_BUNDLE_SETTLE", value_parser = parse_duration, default_value = "5s")]
    pub ca_bundle_settle: Duration,

    /// With --ca-bundle-for: how long the old CA stays in the bundle after a rotation, for the other
    /// replicas to pick up the new certificate (a kubelet delivers a changed Secret to each Pod
    /// on its own schedule, a minute or two apart). Trusting the old CA longer costs nothing.
    #[arg(long, env = "EDGEGATE_CA_BUNDLE_KEEP_OLD", value_parser = parse_duration, default_value = "10m")]
    pub ca_bundle_keep_old: Duration,

    /// Only EdgeReachability records with this name count; others are ignored and counted.
    #[arg(long, env = "EDGEGATE_RECORD_NAME", default_value = edgegate::index::store::DEFAULT_RECORD_NAME)]
    pub record_name: String,

    /// Label selector that identifies copies; every other EndpointSlice passes unjudged.
    #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = edgegate::core::selector::DEFAULT_COPY_SELECTOR)]
    pub copy_selector: CopySelector,

    /// deny: refuse unserved copies. warn: admit them with a warning (for a first rollout).
    #[arg(long, env = "EDGEGATE_MODE", value_enum, default_value_t = Mode::Deny)]
    pub mode: Mode,

    /// Largest request body accepted; larger ones get 413.
    #[arg(long, env = "EDGEGATE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Bytes of request bodies held at once, across every connection, while they are read and
    /// decoded; beyond it a request is answered 429 with Retry-After: 1. An eighth (at least
    /// 4 MiB) is kept for small reviews. Must leave room for one body of --max-body-bytes.
    #[arg(long, env = "EDGEGATE_MAX_INFLIGHT_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_inflight_bytes: usize,

    /// Also serve /healthz, /readyz and /metrics over plain HTTP on this address.
    #[arg(long, env = "EDGEGATE_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,

    /// On SIGTERM, how long in-flight requests may take to finish.
    #[arg(long, env = "EDGEGATE_SHUTDOWN_GRACE", value_parser = parse_duration, default_value = "10s")]
    pub shutdown_grace: Duration,

    /// Log format.
    #[arg(long, env = "EDGEGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Deny,
    Warn,
}
