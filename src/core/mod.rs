//! The pure core: the record and slice types, address normalisation, the decision, the trim and
//! prune plans, and the producer's answer for a project namespace. No I/O and no API calls: each function maps values to values and is
//! table-tested.

/// `kube::Resource` for a lean type with a `metadata: ObjectMeta` (possibly boxed) field and a
/// fixed group, version, kind and plural, so it can be listed and watched as it is.
macro_rules! static_resource {
    ($type:ty, $scope:ty, $group:expr, $version:expr, $kind:expr, $plural:expr) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod address;
pub mod audit;
pub mod crd;
pub mod decision;
#[doc(hidden)]
pub mod fixtures;
pub mod hold;
pub mod milo;
pub mod plan;
pub mod policy;
pub mod project;
pub mod propagation;
pub mod reachability;
pub mod record;
pub mod selector;
pub mod shard;
pub mod sighting;
pub mod slice;
pub mod trim;
pub mod unwritten;
pub mod verdict;
pub mod write;
