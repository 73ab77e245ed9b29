//! gpu-admission: a Kubernetes admission webhook and CEL policy engine for
//! GPU workloads.
//!
//! `k8s` holds Kubernetes semantics and depends on nothing else in the
//! crate. Domain modules (`k8s`, `gpu`, `placement`, `policy`, `cel`) know
//! nothing of HTTP or of the cluster client; `server` knows nothing of
//! GPUs; `cluster` holds every conversation with kube-apiserver and
//! Prometheus; `review` is the single translation point between the
//! AdmissionReview wire format and the domain; `admission` joins placement
//! and policy into the two webhook answers. `tests/layering.rs` holds the
//! table of which module may use which, as docs/architecture.md draws it.
pub mod admission;
pub mod allocator;
pub mod audit;
pub mod authz;
pub mod budgets;
pub mod bundle;
pub mod cel;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod daemon;
pub mod exceptions;
pub mod gpu;
pub mod inventory;
pub mod k8s;
pub mod kueue;
pub mod offline;
pub mod periodic;
pub mod placement;
pub mod policy;
pub mod review;
pub mod server;
pub mod subject;
pub mod testing;
