//! Kubernetes semantics, one model each: label selectors, node selectors,
//! taints and tolerations, the pod templates of controllers, namespaces,
//! the ResourceClaims of Dynamic Resource Allocation, image references,
//! JSON field helpers, the JSON patch builder and server-side-apply merge;
//! the lookup traits (namespaces, claims, nodes) whose cluster-backed
//! implementations live in `cluster`.
//!
//! A leaf module: it depends on nothing else in the crate, and knows
//! nothing of GPUs, policies or HTTP. Readers come in two kinds: lenient
//! ones for objects under admission (a field of the wrong shape reads as
//! absent: the apiserver validates its own objects) and strict ones for the
//! project's own documents (every mistake is an error naming its field).
pub mod apply;
pub mod claims;
pub mod doc;
pub mod images;
pub mod json;
pub mod labels;
pub mod namespaces;
pub mod node_info;
pub mod nodes;
pub mod patch;
pub mod taints;
pub mod template_sources;
pub mod workloads;

pub use claims::{ClaimLookup, NoClaims, StaticClaims};
pub use json::FieldError;
pub use labels::{LabelRequirement, LabelSelector, SelectorOp};
pub use namespaces::{NamespaceLookup, StaticNamespaces};
pub use node_info::{NodeCondition, NodeInfo};
pub use nodes::{NodeSelection, NodeSelectorOperator, NodeSelectorRequirement, NodeSelectorTerm};
pub use patch::{Patch, ShapeError};
pub use taints::{Taint, Toleration, TolerationOperator};
pub use template_sources::{FoundTemplate, TemplateSource, TemplateSources};
