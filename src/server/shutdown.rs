//! The server's lifecycle: running, draining (readiness false, in-flight
//! requests finish), aborted (exit at once). Signals and tests drive it
//! through a [`ShutdownHandle`].
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Running,
    Draining,
    Aborted,
}

/// Triggers and observes shutdown. Cloning shares the same lifecycle.
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    tx: std::sync::Arc<watch::Sender<Phase>>,
}

impl Default for ShutdownHandle {
    fn default() -> Self {
        ShutdownHandle::new()
    }
}

impl ShutdownHandle {
    pub fn new() -> ShutdownHandle {
        let (tx, _) = watch::channel(Phase::Running);
        ShutdownHandle {
            tx: std::sync::Arc::new(tx),
        }
    }

    /// First call starts draining; a second one aborts.
    pub fn trigger(&self) -> Phase {
        let mut next = Phase::Draining;
        self.tx.send_modify(|phase| {
            *phase = match *phase {
                Phase::Running => Phase::Draining,
                _ => Phase::Aborted,
            };
            next = *phase;
        });
        next
    }

    /// Stops at once, without draining.
    pub fn abort(&self) {
        self.tx.send_replace(Phase::Aborted);
    }

    pub fn phase(&self) -> Phase {
        *self.tx.borrow()
    }

    /// Ready to take traffic: not shutting down.
    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    /// Resolves once the phase is at least `phase`.
    pub async fn reached(&self, phase: Phase) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so the channel cannot close here.
        let _ = rx.wait_for(|p| *p >= phase).await;
    }
}

/// Turns SIGTERM and SIGINT into [`ShutdownHandle::trigger`] calls until
/// the process aborts.
pub async fn forward_signals(handle: ShutdownHandle) {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(err) => {
            tracing::error!("cannot install signal handlers: {err}");
            return;
        }
    };
    while signals.next().await {
        if handle.trigger() == Phase::Draining {
            tracing::info!(
                "shutdown signal received: readiness is now false, draining in-flight requests (send again to exit at once)"
            );
        } else {
            tracing::warn!("second shutdown signal: exiting without draining");
            return;
        }
    }
}

#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> bool {
        tokio::select! {
            s = self.term.recv() => s.is_some(),
            s = self.int.recv() => s.is_some(),
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals)
    }

    async fn next(&mut self) -> bool {
        tokio::signal::ctrl_c().await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_trigger_drains_second_aborts() {
        let h = ShutdownHandle::new();
        assert!(h.is_running());
        let waiter = tokio::spawn({
            let h = h.clone();
            async move { h.reached(Phase::Draining).await }
        });
        assert_eq!(h.trigger(), Phase::Draining);
        waiter.await.unwrap();
        assert!(!h.is_running());
        assert_eq!(h.trigger(), Phase::Aborted);
        h.reached(Phase::Aborted).await;
    }
}
