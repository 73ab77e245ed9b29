//! GPU knowledge: resource names and DRA device classes, what a pod asks
//! for, the SKU catalog.
mod azure_pools;
pub mod capacity;
pub mod catalog;
pub mod claims;
pub mod dra_devices;
pub mod facts;
pub mod fit;
pub mod health;
pub mod injection;
pub mod mig;
pub mod pools;
pub mod reach;
pub mod relevance;
pub mod request;
pub mod resources;
pub mod selection;
pub mod taints;
pub mod visibility;

pub use dra_devices::DraDevices;
pub use reach::{NoNodes, NodeLookup, NodeSnapshot, StaticNodes};
pub use request::{
    pod_gpu_request, ContainerGpuRequest, ContainerKind, GpuQuantity, PodGpuRequest,
};
pub use resources::{
    GpuResources, ResourcePatternError, DEFAULT_GPU_DEVICE_CLASSES, DEFAULT_GPU_RESOURCES,
};

/// Appends each of `items` that `list` does not hold yet (cloned only then).
pub(crate) fn extend_new<'a, T: PartialEq + Clone + 'a>(
    list: &mut Vec<T>,
    items: impl IntoIterator<Item = &'a T>,
) {
    for item in items {
        if !list.contains(item) {
            list.push(item.clone());
        }
    }
}

/// SKU names in catalog order. Lists that outlive a request (every SKU of
/// the catalog, what a placement profile allows) are shared by the facts
/// of each request that shows them, not copied.
pub type SkuList = std::sync::Arc<[String]>;

/// The newtype name a [`SkuList`] is written under ([`write_sku_list`]).
pub const SKU_LIST: &str = "SkuList";

/// Writes a [`SkuList`] as the newtype struct [`SKU_LIST`] around its
/// names: JSON and YAML write the plain list; the `gpu` variable's
/// conversion recognises the lists that outlive a request, converted once
/// (`cel::SharedLists`).
pub fn write_sku_list<S: serde::Serializer>(list: &SkuList, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_newtype_struct(SKU_LIST, &**list)
}

/// Asserts that `actual` holds each key of the object `want` with its value
/// (a key it lacks reads as `null`).
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_fields(actual: &serde_json::Value, want: serde_json::Value) {
    let got: serde_json::Map<String, serde_json::Value> = (want.as_object().unwrap().keys())
        .map(|k| (k.clone(), actual[k].clone()))
        .collect();
    assert_eq!(serde_json::Value::Object(got), want);
}

/// A pod spec whose required node affinity is `terms`.
#[cfg(test)]
pub(crate) fn with_terms(terms: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}
