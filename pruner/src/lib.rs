//! edgegate-pruner's runtime: watches, the Lease and the deletions around the core's prune plan.
#![forbid(unsafe_code)]

pub mod args;
pub mod gate;
pub mod metrics;
pub mod pruner;
pub mod run;
pub mod spelling;
