//! gpu-admission: a Kubernetes admission webhook and CEL policy engine for
//! GPU workloads.
//!
//! `k8s` holds Kubernetes semantics and depends on nothing else in the
//! crate. Domain modules (`k8s`, `gpu`, `placement`, `policy`, `cel`) know
//! nothing of HTTP; `server` knows nothing of GPUs; `review` is the single translation
//! point between the AdmissionReview wire format and the domain; `admission`
//! joins placement and policy into the two webhook answers.
pub mod admission;
pub mod allocator;
pub mod audit;
pub mod authz;
pub mod bundle;
pub mod cel;
pub mod certs;
pub mod cli;
pub mod exceptions;
pub mod gpu;
pub mod inventory;
pub mod k8s;
pub mod kueue;
pub mod offline;
pub mod placement;
pub mod policy;
pub mod prometheus;
pub mod report;
pub mod review;
pub mod server;
pub mod subject;
pub mod testing;
