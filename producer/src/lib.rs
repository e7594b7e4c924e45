//! edgegate-producer's runtime: project watches, hub watches, the Lease, and the writes it decides
//! from the core's answer.
#![forbid(unsafe_code)]

pub mod args;
pub mod discovery;
pub mod evidence;
pub mod metrics;
pub mod producer;
pub mod run;
