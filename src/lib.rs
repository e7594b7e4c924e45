//! edgegate's core: which EndpointSlice copies a federation hub carries.
//!
//! Pure logic only — the record type, address normalisation, the decision, the trim and prune
//! plans, and the record store with the sources that feed it. The webhook and pruner binaries move
//! data to these functions and back.
#![forbid(unsafe_code)]

pub mod address;
pub mod cli;
pub mod copies;
pub mod crd;
pub mod decision;
#[doc(hidden)]
pub mod fixtures;
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
pub mod plan;
pub mod rbac;
pub mod record;
pub mod selector;
pub mod slice;
pub mod source;
pub mod store;
pub mod trim;
pub mod watch;

pub use crate::crd::{EdgeReachability, EdgeReachabilitySpec};
pub use crate::decision::{Allowed, Decision, Denial, decide};
pub use crate::record::{Record, RecordState};
pub use crate::selector::CopySelector;
pub use crate::slice::Slice;
pub use crate::store::{RecordSource, RecordStore};
