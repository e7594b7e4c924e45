//! In-memory indexes fed by watches and files: the record store and its sources (record files,
//! the hub's EdgeReachability watch), the pruner's copy index, and the watch follower they share.
//! Each is whole (listed and followed) or known not to be; the core reads them, never the API.
//! Also the two time primitives they and every layer above use: the clock the timing rules read
//! (`clock`) and pacing (`pace`), here so that nothing below `runtime` imports it.

pub mod backoff;
pub mod clock;
pub mod copies;
pub mod dirty;
pub mod fs_watch;
pub mod hub;
pub mod pace;
pub mod project;
pub mod prune;
pub mod source;
pub mod store;

/// What changed in an index, for the loop that acts on it (the pruner's passes, the producer's
/// recomputes): one namespace, or everything after a (re-)list.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Change {
    /// Something in this namespace changed: a record, a copy, a project object.
    Namespace(String),
    /// The whole view was (re-)listed.
    All,
}
