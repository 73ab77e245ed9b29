//! CEL environment: Kubernetes libraries, GPU extensions, cost limits.
