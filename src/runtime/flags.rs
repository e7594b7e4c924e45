//! Flags the binaries share: duration values, the hub's kubeconfig, the log format.

use std::path::PathBuf;
use std::time::Duration;

/// `500ms`, `10s`, `2m`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((s, "s"), |i| s.split_at(i));
    let value: f64 = number.parse().map_err(|_| format!("{s:?} is not a duration like 500ms, 10s or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{s:?}: {e}"))
}

/// `--kubeconfig` and `--context`: which API server is the hub.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct HubArgs {
    /// Kubeconfig for the hub. Without it: in-cluster config, then ~/.kube/config.
    #[arg(long, env = "EDGEGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use, with --kubeconfig.
    #[arg(long, env = "EDGEGATE_CONTEXT")]
    pub context: Option<String>,
}

/// The Lease flags of a binary with one writer among its replicas (`--lease-name` stays each
/// binary's own, for its default).
#[derive(Clone, Debug, clap::Args)]
pub struct LeaseArgs {
    /// Namespace of the Lease (in a pod: its own namespace, from POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", default_value = "edgegate-system")]
    pub lease_namespace: String,

    /// This replica's identity in the Lease (in a pod: its name, from POD_NAME).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// How long a Lease holds without renewal.
    #[arg(long, env = "EDGEGATE_LEASE_DURATION", value_parser = parse_duration, default_value = "15s")]
    pub lease_duration: Duration,

    /// Run without leader election (a single replica only: two would both write).
    #[arg(long, env = "EDGEGATE_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
}

impl LeaseArgs {
    /// The Lease `name`; this replica is `--identity`, or `<binary>-<pid>`.
    pub fn config(&self, name: &str, binary: &str) -> super::lease::LeaseConfig {
        super::lease::LeaseConfig {
            name: name.to_owned(),
            namespace: self.lease_namespace.clone(),
            identity: self.identity.clone().unwrap_or_else(|| format!("{binary}-{}", std::process::id())),
            duration: self.lease_duration,
            disabled: self.no_leader_election,
        }
    }
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5h").is_err());
    }
}
