//! In-memory indexes fed by watches and files: the record store and its sources (record files,
//! the hub's EdgeReachability watch), the pruner's copy index, and the watch follower they share.
//! Each is whole (listed and followed) or known not to be; the core reads them, never the API.

pub mod copies;
pub mod fs_watch;
pub mod hub;
pub mod project;
pub mod prune;
pub mod source;
pub mod store;
