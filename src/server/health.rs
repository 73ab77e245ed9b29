//! Readiness: what must be in place before the server takes traffic. The
//! policy bundle must be loaded and, in a cluster, the Namespace cache must
//! have synced its first list (before that, `namespaceSelector` would see
//! no labels and give wrong answers), and so must the ResourceClaim cache
//! when the cluster serves `resource.k8s.io` (before that, pods claiming
//! devices would be judged as claiming nothing), and so must the Node cache
//! when it is on (before that, no pod could be told to reach a GPU node),
//! and so must the policy exception cache when it is on (before that, an
//! excepted object would be denied). Shutdown turns readiness false on its
//! own, through the [`ShutdownHandle`](super::ShutdownHandle).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Start-up conditions, each flipped once by whoever establishes it.
/// Cloning shares the same conditions.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<Conditions>,
}

#[derive(Debug)]
struct Conditions {
    policies_loaded: AtomicBool,
    namespaces_synced: AtomicBool,
    /// True unless [`Readiness::wait_for_resource_claims`] asked to wait.
    resource_claims_synced: AtomicBool,
    /// True unless [`Readiness::wait_for_nodes`] asked to wait.
    nodes_synced: AtomicBool,
    /// True unless [`Readiness::wait_for_exceptions`] asked to wait.
    exceptions_synced: AtomicBool,
}

impl Readiness {
    /// Nothing established yet.
    pub fn new() -> Readiness {
        Readiness::with(false, false)
    }

    /// Everything established: for a server handed a webhook that is
    /// already loaded and needs no cluster state.
    pub fn ready() -> Readiness {
        Readiness::with(true, true)
    }

    fn with(policies_loaded: bool, namespaces_synced: bool) -> Readiness {
        Readiness {
            inner: Arc::new(Conditions {
                policies_loaded: AtomicBool::new(policies_loaded),
                namespaces_synced: AtomicBool::new(namespaces_synced),
                resource_claims_synced: AtomicBool::new(true),
                nodes_synced: AtomicBool::new(true),
                exceptions_synced: AtomicBool::new(true),
            }),
        }
    }

    /// The policy bundle is loaded.
    pub fn set_policies_loaded(&self) {
        self.inner.policies_loaded.store(true, Ordering::Release);
    }

    /// The Namespace cache has its first full list, or none is needed
    /// (outside a cluster).
    pub fn set_namespaces_synced(&self) {
        self.inner.namespaces_synced.store(true, Ordering::Release);
    }

    /// Readiness now also waits for the ResourceClaim cache's first list
    /// ([`Readiness::set_resource_claims_synced`]).
    pub fn wait_for_resource_claims(&self) {
        self.inner
            .resource_claims_synced
            .store(false, Ordering::Release);
    }

    /// The ResourceClaim cache has its first full list.
    pub fn set_resource_claims_synced(&self) {
        self.inner
            .resource_claims_synced
            .store(true, Ordering::Release);
    }

    /// Readiness now also waits for the Node cache's first list
    /// ([`Readiness::set_nodes_synced`]).
    pub fn wait_for_nodes(&self) {
        self.inner.nodes_synced.store(false, Ordering::Release);
    }

    /// The Node cache has its first full list.
    pub fn set_nodes_synced(&self) {
        self.inner.nodes_synced.store(true, Ordering::Release);
    }

    /// Readiness now also waits for the policy exception cache's first
    /// list ([`Readiness::set_exceptions_synced`]).
    pub fn wait_for_exceptions(&self) {
        self.inner.exceptions_synced.store(false, Ordering::Release);
    }

    /// The policy exception cache has its first full list (or knows the
    /// cluster serves none).
    pub fn set_exceptions_synced(&self) {
        self.inner.exceptions_synced.store(true, Ordering::Release);
    }

    /// Why the server is not ready yet, or `None` once it is. The reason
    /// is the short text `/readyz` answers with.
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        if !self.inner.policies_loaded.load(Ordering::Acquire) {
            Some("policies not loaded\n")
        } else if !self.inner.namespaces_synced.load(Ordering::Acquire) {
            Some("namespaces not synced\n")
        } else if !self.inner.resource_claims_synced.load(Ordering::Acquire) {
            Some("resource claims not synced\n")
        } else if !self.inner.nodes_synced.load(Ordering::Acquire) {
            Some("nodes not synced\n")
        } else if !self.inner.exceptions_synced.load(Ordering::Acquire) {
            Some("policy exceptions not synced\n")
        } else {
            None
        }
    }

    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_once_every_condition_holds() {
        let readiness = Readiness::new();
        let shared = readiness.clone();
        assert_eq!(readiness.not_ready_reason(), Some("policies not loaded\n"));
        shared.set_namespaces_synced();
        assert_eq!(readiness.not_ready_reason(), Some("policies not loaded\n"));
        shared.set_policies_loaded();
        assert_eq!(readiness.not_ready_reason(), None);
        assert!(readiness.is_ready());

        let waiting = Readiness::new();
        waiting.set_policies_loaded();
        assert_eq!(waiting.not_ready_reason(), Some("namespaces not synced\n"));
        assert!(Readiness::ready().is_ready());

        let claims = Readiness::ready();
        claims.wait_for_resource_claims();
        assert_eq!(
            claims.not_ready_reason(),
            Some("resource claims not synced\n")
        );
        claims.set_resource_claims_synced();
        assert!(claims.is_ready());

        let exceptions = Readiness::ready();
        exceptions.wait_for_exceptions();
        assert_eq!(
            exceptions.not_ready_reason(),
            Some("policy exceptions not synced\n")
        );
        exceptions.set_exceptions_synced();
        assert!(exceptions.is_ready());
    }
}
