//! A process that lost a task it needs stops, so that Kubernetes restarts it. The indexes recover
//! poisoned locks on purpose, so a watch task that died would leave its index frozen and still
//! synced: the pruner deleting and the webhook judging from a view that no longer changes. A
//! panic anywhere, or an [`essential`] task ending while the process is not shutting down, ends
//! the process with [`EXIT_TASK_LOST`] instead.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The exit code of a process a panic or a lost task stopped (`EX_SOFTWARE`).
pub const EXIT_TASK_LOST: i32 = 70;

tokio::task_local! {
    /// The name of the essential task being polled, for the panic's log line.
    static TASK: String;
}

/// Make every panic, on any thread or task, log itself (with the essential task's name, if it
/// is in one) and end the process: a panicking task would otherwise die alone and leave the rest
/// running. Installed by [`process::main`](super::process::main); the release profile's
/// `panic = "abort"` backs it up.
pub fn exit_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        let backtrace = std::backtrace::Backtrace::capture();
        let captured = backtrace.status() == std::backtrace::BacktraceStatus::Captured;
        tracing::error!(
            task = TASK.try_with(Clone::clone).ok(),
            panic = message(info.payload()),
            location = info.location().map(tracing::field::display),
            thread = std::thread::current().name().unwrap_or("unnamed"),
            backtrace = captured.then_some(tracing::field::display(&backtrace)),
            "panicked; exiting so the process is restarted"
        );
        std::process::exit(EXIT_TASK_LOST);
    }));
}

/// What was passed to `panic!`, when it is text.
fn message(payload: &(dyn std::any::Any + Send)) -> &str {
    let text = payload.downcast_ref::<&str>().copied();
    text.or_else(|| payload.downcast_ref::<String>().map(String::as_str)).unwrap_or("(not text)")
}

/// Spawn `task`, named `name` in the logs, which must run until `shutdown` (or for ever): if it
/// returns before `shutdown` is cancelled, or panics, the process exits with [`EXIT_TASK_LOST`].
/// Aborting the returned handle stops it on purpose, and ends nothing else.
pub fn essential<F>(name: impl Into<String>, shutdown: &CancellationToken, task: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let (name, shutdown) = (name.into(), shutdown.clone());
    tokio::spawn(async move {
        // Caught here too, for a process without the panic hook (tests, other embedders).
        let ended = match TASK.scope(name.clone(), AssertUnwindSafe(task).catch_unwind()).await {
            Ok(()) if shutdown.is_cancelled() => return,
            Ok(()) => "returned",
            Err(_) => "panicked",
        };
        tracing::error!(task = name, ended, "a task the process needs ended; exiting so the process is restarted");
        std::process::exit(EXIT_TASK_LOST);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task stopped on purpose, by shutdown or by abort, ends nothing else (this test process
    /// would exit if it did).
    #[tokio::test]
    async fn a_stop_on_purpose_is_no_loss() {
        let shutdown = CancellationToken::new();
        let at_shutdown = essential("ends at shutdown", &shutdown, shutdown.clone().cancelled_owned());
        let forever = essential("runs for ever", &shutdown, std::future::pending());
        forever.abort();
        assert!(forever.await.is_err_and(|e| e.is_cancelled()));
        shutdown.cancel();
        assert!(at_shutdown.await.is_ok());
    }
}
