//! The pure core: the record and slice types, address normalisation, the decision, the trim and
//! prune plans, and the producer's answer for a project namespace. No I/O and no API calls: each function maps values to values and is
//! table-tested.

pub mod address;
pub mod audit;
pub mod crd;
pub mod decision;
#[doc(hidden)]
pub mod fixtures;
pub mod plan;
pub mod project;
pub mod reachability;
pub mod record;
pub mod selector;
pub mod slice;
pub mod trim;
