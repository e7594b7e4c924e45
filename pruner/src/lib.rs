//! edgegate-pruner: its flags and wiring over the library's pruning (`edgegate::runtime::prune`).
#![forbid(unsafe_code)]

pub mod args;
pub mod run;
