//! Flags the binaries share: duration values, the hub's kubeconfig, the log format.

use std::path::PathBuf;
use std::time::Duration;

/// A duration as people write them (`500ms`, `10s`, `1m30s`, `1h`), or a bare number of seconds
/// (`60`, `0.5`). Zero is a value: where it means "off", the flag says so.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(seconds) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{s:?}: {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 500ms, 10s, 1m30s or 1h: {e}"))
}

/// [`parse_duration`] for what must take some time: a period, a timeout, a lease.
pub fn parse_period(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be longer than zero")),
        d => Ok(d),
    }
}

/// A rate a second: 0 (unpaced), or from one every 1,000 s to a million a second. What pacing
/// can take without overflowing its interval, and what an operator means.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(rate) if rate == 0.0 || (0.001..=1_000_000.0).contains(&rate) => Ok(rate),
        Ok(_) => Err(format!("{s:?}: 0 (unpaced), or from 0.001 to 1000000 a second")),
        Err(e) => Err(format!("{s:?} is not a number a second: {e}")),
    }
}

/// A Lease's duration: whole seconds, as the Lease records it, and at least 2 s (the leader
/// renews five times a lease).
pub fn parse_lease_duration(s: &str) -> Result<Duration, String> {
    let d = parse_period(s)?;
    if d < Duration::from_secs(2) || d.subsec_nanos() != 0 {
        return Err(format!("{s:?}: a lease lasts whole seconds, 2 s or more"));
    }
    Ok(d)
}

/// `--kubeconfig` and `--context`: which API server is the hub.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct HubArgs {
    /// Kubeconfig for the hub. Without it: in-cluster config, then ~/.kube/config.
    #[arg(long, env = "EDGEGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use: of --kubeconfig, or without it of the kubeconfig kubectl reads
    /// ($KUBECONFIG, ~/.kube/config), never in-cluster.
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
    #[arg(long, env = "EDGEGATE_LEASE_DURATION", value_parser = parse_lease_duration, default_value = "15s")]
    pub lease_duration: Duration,

    /// Run without leader election (a single replica only: two would both write).
    #[arg(long, env = "EDGEGATE_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
}

impl LeaseArgs {
    /// The Lease `name`; this replica is `--identity` (in a pod, its name), or
    /// `<binary>-<hostname>-<pid>`: never empty, and two containers' pid 1 stay apart.
    pub fn config(&self, name: &str, binary: &str) -> super::lease::LeaseConfig {
        let identity = self.identity.clone().filter(|i| !i.trim().is_empty()).unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{binary}-{}-{}", host.trim(), std::process::id())
        });
        super::lease::LeaseConfig {
            name: name.to_owned(),
            namespace: self.lease_namespace.clone(),
            identity,
            duration: self.lease_duration,
            disabled: self.no_leader_election,
            renewals: 5,
            annotations: None,
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
        assert_eq!(parse_duration("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_period("15s"), Ok(Duration::from_secs(15)));
        assert!(parse_period("0").is_err_and(|e| e.contains("longer than zero")));
        assert!(parse_period("0s").is_err());
        assert_eq!(parse_lease_duration("15s"), Ok(Duration::from_secs(15)));
        assert!(parse_lease_duration("1s").is_err() && parse_lease_duration("2.5").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50"), Ok(50.0));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
        assert_eq!(parse_rate("0"), Ok(0.0));
        for bad in ["-1", "1e-30", "NaN", "inf", "fast", "1e9"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }
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
    #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = crate::core::selector::DEFAULT_COPY_SELECTOR)]
    pub copy_selector: crate::CopySelector,

    /// Watch that every record entry and copy address is spelled canonically, every 60 s
    /// (edgegate_prune_noncanonical_addresses, a warning when any is not). Set by
    /// deploy/components/policy (on edgegate-pruner, or edgegate-producer with --prune), whose ValidatingAdmissionPolicy compares addresses as exact
    /// strings where edgegate compares them normalised.
    #[arg(long, env = "EDGEGATE_EXACT_SPELLING")]
    pub exact_spelling: bool,
}
