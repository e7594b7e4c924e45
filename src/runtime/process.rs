//! A binary's life: logs set up, panics made fatal, run, a failure logged with its context chain,
//! SIGTERM heard.

use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;

use super::flags::LogFormat;

/// Set up logs in `format`, start the async runtime, run `run` on it, and turn its result into the
/// exit code, logging a failure with its whole context chain. A panic anywhere ends the process
/// ([`supervise::exit_on_panic`](super::supervise::exit_on_panic)). Each binary's `main` parses
/// its flags and then makes this one call: `--help`, `--version` and a bad flag answer before any
/// thread starts (Debian 12's qemu-user, which runs the arm64 builds in a release, never returns
/// from starting this runtime's threads).
pub fn main(name: &str, format: LogFormat, run: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    init_tracing(format);
    super::supervise::exit_on_panic();
    raise_open_files();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "{name} cannot start its async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "{name} failed");
            ExitCode::FAILURE
        }
    }
}

/// The open-file soft limit raised to the hard one: a producer with a thousand projects holds a
/// few sockets each, past the usual soft limit of 1,024, and a refused socket is a project that
/// cannot be read.
fn raise_open_files() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "could not raise the open-file limit"),
    }
}

/// Structured logs to stderr; the level from `RUST_LOG` (default `info`). Colour only when stderr
/// is a terminal: `2> file` and `kubectl logs` get plain text.
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
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
