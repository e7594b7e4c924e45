//! The client every binary talks to an API server with: the hub's, or (the producer) a project's.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::flags::HubArgs;

/// A client for the hub: `--kubeconfig` (and `--context`) if given, else in-cluster, else
/// ~/.kube/config.
pub async fn hub_client(hub: &HubArgs) -> anyhow::Result<kube::Client> {
    kube_client(hub.kubeconfig.as_deref(), hub.context.as_deref()).await
}

/// A client from `kubeconfig` (and `context`) if given, else in-cluster, else ~/.kube/config.
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

/// How long a connection to the API server may stay silent while a response is owed before the
/// request fails. Longer than a watch lasts
/// ([`crate::index::source::follow::WATCH_TIMEOUT_SECS`]), so a quiet healthy watch never meets
/// it; short enough that an API server cut off without a reset (a dropped link, a partition) is
/// noticed within seconds rather than the minutes TCP takes, and that a request stuck on such a
/// connection gives way to a new one soon after the link heals.
pub const API_READ_TIMEOUT: Duration = Duration::from_secs(15);
const API_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn with_timeouts(mut config: kube::Config) -> kube::Config {
    config.read_timeout = Some(API_READ_TIMEOUT);
    // Count from when a request is written, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config.connect_timeout = Some(API_CONNECT_TIMEOUT);
    config
}
