//! What the binaries share at their edges: flags, the API server client with its timeouts, logs,
//! signals, metrics helpers, the RBAC rules that list every call they make, and the supervision
//! that stops a process which lost a task it needs.

pub mod admin;
pub mod client;
pub mod controller;
pub mod credential;
pub mod flags;
pub mod lease;
pub mod metrics;
pub mod process;
pub mod prune;
pub mod queue;
pub mod rbac;
pub mod shard;
pub mod supervise;
pub mod wakeups;
