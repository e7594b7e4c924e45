//! What a due deletion needs besides its record's silence for the grace: evidence that the
//! silence is a withdrawal. A record says what its writer knew; a writer that cannot see its
//! project (down, restarting, cut off, a write that failed) leaves a record that is silent about
//! an address served again, and that silence withdraws nothing.
//!
//! The producer, pruning in-process (`edgegate-producer --prune`), is the gate: it answers for
//! each copy from its own memory of that copy's project. `edgegate-pruner` has none: it runs
//! where another writer keeps the records, and takes their silence as it stands.

use std::time::{Duration, Instant};

use crate::core::plan::Deletion;
use crate::core::verdict::Doubt;

/// Evidence that a due deletion's record is a withdrawal, asked right before each DELETE.
pub trait Gate: Send + Sync {
    /// Why `deletion`, due (unnamed for the whole grace) since `due`, may not be carried out at
    /// `now`, if it may not.
    fn doubt(&self, deletion: &Deletion, due: Instant, now: Instant) -> Option<Doubt>;

    /// It may not: the gate passes `namespace` over again when it might (until then the copy
    /// stays). True when the namespace was not waiting already.
    fn wait(&self, namespace: &str) -> bool;

    /// How long deletions have waited for evidence; zero when none waits.
    fn waited_for(&self) -> Duration;

    /// Before the last judgement and the DELETE, after [`doubt`](Gate::doubt): is the evidence
    /// still live (its source answering)? What is known from memory can be stale without knowing
    /// it. It must not wait long: the pruner's passes wait for it.
    fn confirm(&self, _deletion: &Deletion) -> futures::future::BoxFuture<'static, bool> {
        Box::pin(std::future::ready(true))
    }

    /// Right before the DELETE, after every wait: is the copy still this replica's to delete?
    /// (Producers sharing projects: its project's bucket may have moved meanwhile.)
    fn still_ours(&self, _deletion: &Deletion) -> bool {
        true
    }
}
