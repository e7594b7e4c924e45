//! edgegate: which EndpointSlice copies a federation hub carries.
//!
//! Three layers, each importing only the ones above it:
//! - [`core`]: pure types and functions (the record, addresses, the decision, the plans);
//! - [`index`]: in-memory indexes fed by watches and files, which the core reads;
//! - [`runtime`]: what the binaries share at their edges (flags, API client, logs, signals).
//!
//! The binaries (`webhook/`, `pruner/`) move data between the API server, the indexes and the core.
#![forbid(unsafe_code)]

pub mod core;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod runtime;

/// This build's version, with the git revision it was built from where known: what every
/// binary's `--version` prints.
pub const VERSION: &str = env!("EDGEGATE_VERSION");

pub use crate::core::crd::{EdgeReachability, EdgeReachabilitySpec};
pub use crate::core::decision::{Allowed, Decision, Denial, decide};
pub use crate::core::record::{Record, RecordState};
pub use crate::core::selector::CopySelector;
pub use crate::core::slice::Slice;
pub use crate::index::store::{RecordSource, RecordStore};
