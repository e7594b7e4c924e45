//! edgegate-webhook's runtime: HTTP and TLS around the core's decision. A library so that the
//! benchmarks drive the same review path the server does.
#![forbid(unsafe_code)]

pub mod admission;
pub mod args;
pub mod ca_bundle;
pub mod inflight;
pub mod metrics;
pub mod run;
pub mod server;
pub mod tls;
