//! What both binaries share at their edges: duration flags, log set-up and the hub client.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

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

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Structured logs to stderr; the level from `RUST_LOG` (default `info`).
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// A client for the hub: `kubeconfig` (and `context`) if given, else in-cluster, else ~/.kube/config.
pub async fn kube_client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            let options = kube::config::KubeConfigOptions { context: context.map(str::to_owned), ..Default::default() };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(with_timeouts(config))?)
}

/// How long a connection to the hub may stay silent while a response is owed before the request
/// fails. Longer than a watch lasts ([`crate::source::follow::WATCH_TIMEOUT_SECS`]), so a quiet
/// healthy watch never meets it; short enough that a hub cut off without a reset (a dropped link,
/// a partition) is noticed within seconds rather than the minutes TCP takes, and that a request
/// stuck on such a connection gives way to a new one soon after the link heals.
pub const API_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
const API_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn with_timeouts(mut config: kube::Config) -> kube::Config {
    config.read_timeout = Some(API_READ_TIMEOUT);
    // Count from when a request is written, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config.connect_timeout = Some(API_CONNECT_TIMEOUT);
    config
}

/// Returns on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt: shutting down"),
    }
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
