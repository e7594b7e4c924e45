//! Pruning: the passes that delete published copies whose record names none of their addresses
//! (held for the grace, judged again right before each DELETE), what they ask of a gate, their
//! metrics and watches. `edgegate-pruner` runs them alone; `edgegate-producer --prune` runs them
//! beside its writes, its own memory of each project as the gate.

pub mod gate;
pub mod metrics;
pub mod parts;
pub mod pruner;
pub mod spelling;
