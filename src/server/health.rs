//! Readiness: what must be in place before the server takes traffic, as a
//! list of named gates. Whoever owns a start-up condition (the policy
//! load, each watched cache) registers a [`Gate`] and opens it once the
//! condition holds; `/readyz` answers with the first gate still closed, in
//! the order they were registered. The edge never knows what a gate stands
//! for, so adding a cache adds a gate, not a field here. Shutdown turns
//! readiness false on its own, through the
//! [`ShutdownHandle`](super::ShutdownHandle).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// The gates of one server. Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    gates: Arc<RwLock<Vec<Arc<GateState>>>>,
}

#[derive(Debug)]
struct GateState {
    /// What `/readyz` answers while the gate is closed.
    reason: &'static str,
    open: AtomicBool,
}

/// One start-up condition, closed until [`Gate::open`].
#[derive(Clone, Debug)]
pub struct Gate {
    state: Arc<GateState>,
}

impl Readiness {
    /// No gate yet: ready until one is registered.
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// Ready, with nothing to wait for: for a server handed a webhook that
    /// is already loaded and needs no cluster state.
    pub fn ready() -> Readiness {
        Readiness::default()
    }

    /// Registers a closed gate; `/readyz` answers `reason` (one line, e.g.
    /// "nodes not synced") while it is the first gate still closed.
    pub fn gate(&self, reason: &'static str) -> Gate {
        let state = Arc::new(GateState {
            reason,
            open: AtomicBool::new(false),
        });
        self.gates
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(state.clone());
        Gate { state }
    }

    /// Why the server is not ready yet (the first closed gate's reason and
    /// a newline, the text `/readyz` answers), or `None` once it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        let gates = self.gates.read().unwrap_or_else(|e| e.into_inner());
        gates
            .iter()
            .find(|g| !g.open.load(Ordering::Acquire))
            .map(|g| format!("{}\n", g.reason))
    }

    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }
}

impl Gate {
    /// The condition holds: the gate stays open for the life of the server.
    pub fn open(&self) {
        self.state.open.store(true, Ordering::Release);
    }

    /// Opens the gate once `synced` resolves true (a cache's first list);
    /// logs either way, naming the cache `what`. A watch that ends before
    /// its first list leaves the gate closed. The task ends once it knows.
    pub fn open_when(
        self,
        what: &'static str,
        synced: impl std::future::Future<Output = bool> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if synced.await {
                self.open();
                tracing::info!("{what} cache synced");
            } else {
                tracing::error!("{what} watch ended before its first list; staying not ready");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_once_every_gate_is_open_first_closed_gate_named() {
        let readiness = Readiness::new();
        let shared = readiness.clone();
        let policies = shared.gate("policies not loaded");
        let namespaces = shared.gate("namespaces not synced");
        assert_eq!(
            readiness.not_ready_reason().as_deref(),
            Some("policies not loaded\n")
        );
        namespaces.open();
        assert_eq!(
            readiness.not_ready_reason().as_deref(),
            Some("policies not loaded\n")
        );
        policies.open();
        assert_eq!(readiness.not_ready_reason(), None);
        assert!(readiness.is_ready());

        let waiting = Readiness::new();
        waiting.gate("policies not loaded").open();
        let _namespaces = waiting.gate("namespaces not synced");
        assert_eq!(
            waiting.not_ready_reason().as_deref(),
            Some("namespaces not synced\n")
        );
        assert!(Readiness::ready().is_ready());

        let claims = Readiness::ready();
        let gate = claims.gate("resource claims not synced");
        assert_eq!(
            claims.not_ready_reason().as_deref(),
            Some("resource claims not synced\n")
        );
        gate.open();
        assert!(claims.is_ready());

        let exceptions = Readiness::ready();
        let gate = exceptions.gate("policy exceptions not synced");
        assert_eq!(
            exceptions.not_ready_reason().as_deref(),
            Some("policy exceptions not synced\n")
        );
        gate.clone().open();
        assert!(exceptions.is_ready());
    }

    #[tokio::test]
    async fn a_gate_opens_when_its_cache_syncs_and_stays_closed_when_the_watch_ends() {
        let readiness = Readiness::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
        let task = readiness
            .gate("nodes not synced")
            .open_when("node", async move { rx.await.unwrap_or(false) });
        assert!(!readiness.is_ready());
        tx.send(true).unwrap();
        task.await.unwrap();
        assert!(readiness.is_ready());

        let ended = Readiness::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<bool>();
        let task = ended
            .gate("nodes not synced")
            .open_when("node", async move { rx.await.unwrap_or(false) });
        drop(tx);
        task.await.unwrap();
        assert_eq!(
            ended.not_ready_reason().as_deref(),
            Some("nodes not synced\n")
        );
    }
}
