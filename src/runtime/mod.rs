//! What the binaries share at their edges: flags, the API server client with its timeouts, logs,
//! signals, metrics helpers, and the RBAC rules that list every call they make.

pub mod admin;
pub mod client;
pub mod controller;
pub mod flags;
pub mod lease;
pub mod metrics;
pub mod process;
pub mod rbac;
pub mod wakeups;
