//! edgegate-producer's runtime: project watches, hub watches, the Lease, and the writes it decides
//! from the core's answer.
#![forbid(unsafe_code)]

pub mod admin;
pub mod args;
pub mod discovery;
pub mod engaged;
pub mod evidence;
pub mod memory;
pub mod metrics;
pub mod outcome;
pub mod producer;
pub mod projects;
pub mod run;
pub mod watches;
