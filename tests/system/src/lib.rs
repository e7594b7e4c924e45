//! Support for the whole-system suites in `tests/`: a real control plane (etcd and
//! kube-apiserver built from their Go modules) and the helpers that start edgegate's binaries
//! against it.

pub mod cert_manager;
pub mod control_plane;
pub mod docs;
pub mod fence_audit;
pub mod fences;
pub mod helpers;
pub mod milo;
pub mod netns;
pub mod pod;
pub mod secret_volume;
pub mod shipped;
pub mod soak;
