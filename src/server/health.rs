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
    /// Why it is still closed, when its owner knows more ("retrying: 500
    /// Internal Server Error").
    detail: RwLock<Option<String>>,
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
            detail: RwLock::new(None),
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
            .map(|g| {
                let detail = g.detail.read().unwrap_or_else(|e| e.into_inner());
                match detail.as_deref() {
                    Some(detail) => format!("{}: {detail}\n", g.reason),
                    None => format!("{}\n", g.reason),
                }
            })
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

    /// Says why the gate is still closed, after its reason (one line; none:
    /// the reason alone).
    pub fn say(&self, detail: Option<String>) {
        *self.state.detail.write().unwrap_or_else(|e| e.into_inner()) =
            detail.map(|d| d.replace('\n', " "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why `readiness` is not ready; empty when it is.
    fn reason(readiness: &Readiness) -> String {
        readiness.not_ready_reason().unwrap_or_default()
    }

    #[test]
    fn ready_only_once_every_gate_is_open_first_closed_gate_named() {
        let readiness = Readiness::new();
        let shared = readiness.clone();
        let policies = shared.gate("policies not loaded");
        let namespaces = shared.gate("namespaces not synced");
        assert_eq!(reason(&readiness), "policies not loaded\n");
        namespaces.open();
        assert_eq!(reason(&readiness), "policies not loaded\n");
        policies.open();
        assert_eq!(readiness.not_ready_reason(), None);
        assert!(readiness.is_ready());

        let waiting = Readiness::new();
        waiting.gate("policies not loaded").open();
        let _namespaces = waiting.gate("namespaces not synced");
        assert_eq!(reason(&waiting), "namespaces not synced\n");
        assert!(Readiness::ready().is_ready());

        let claims = Readiness::ready();
        let gate = claims.gate("resource claims not synced");
        assert_eq!(reason(&claims), "resource claims not synced\n");
        gate.say(Some("retrying: 500 Internal\nServer Error".into()));
        assert_eq!(
            reason(&claims),
            "resource claims not synced: retrying: 500 Internal Server Error\n"
        );
        gate.open();
        assert!(claims.is_ready());

        let exceptions = Readiness::ready();
        let gate = exceptions.gate("policy exceptions not synced");
        assert_eq!(reason(&exceptions), "policy exceptions not synced\n");
        gate.clone().open();
        assert!(exceptions.is_ready());
    }
}
