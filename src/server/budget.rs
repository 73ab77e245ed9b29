//! What the server holds for requests in progress, bounded process-wide:
//! memory for bodies being read, memory for decoded requests, and
//! evaluation slots, separately for `/mutate` and `/validate` so that a flood
//! of slow validations never delays placement.
//!
//! Memory is reserved in two pools taken in a fixed order (body, then
//! decoded, then a slot), each reservation whole in one wait, and nobody
//! holding a later one waits for an earlier one, so requests can wait on
//! each other but never deadlock.
use super::metrics::Metrics;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Memory is counted in KiB: semaphores count in `u32`.
const UNIT: usize = 1024;

/// The default process-wide in-flight memory budget: its two thirds for
/// decoded requests hold the largest one, an UPDATE carrying two objects of
/// the default 48 MiB each.
pub const DEFAULT_IN_FLIGHT_BYTES: usize = 160 << 20;

/// A pool of memory that requests reserve before using it.
#[derive(Clone)]
pub(crate) struct MemoryPool {
    name: &'static str,
    semaphore: Arc<Semaphore>,
    units: usize,
    metrics: Metrics,
}

/// Memory reserved from a [`MemoryPool`]; returned when dropped.
pub(crate) struct Reserved {
    permit: OwnedSemaphorePermit,
    pool: &'static str,
    metrics: Metrics,
}

/// The reservation can never be granted: it is larger than the pool.
#[derive(Debug, thiserror::Error)]
#[error("{wanted_mib} MiB is more than the whole in-flight budget for {pool} ({total_mib} MiB)")]
pub(crate) struct TooBig {
    pool: &'static str,
    wanted_mib: usize,
    total_mib: usize,
}

impl MemoryPool {
    pub fn new(name: &'static str, bytes: usize, metrics: Metrics) -> MemoryPool {
        let units = (bytes / UNIT).clamp(1, u32::MAX as usize);
        MemoryPool {
            name,
            semaphore: Arc::new(Semaphore::new(units)),
            units,
            metrics,
        }
    }

    /// Bytes in the pool.
    pub fn capacity(&self) -> usize {
        self.units * UNIT
    }

    /// Bytes reserved now, by everyone.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        (self.units - self.semaphore.available_permits()) * UNIT
    }

    /// Waits until `bytes` are free and reserves them, all at once: a
    /// request never holds part of a pool while it waits for more.
    pub async fn reserve(&self, bytes: usize) -> Result<Reserved, TooBig> {
        let units = bytes.div_ceil(UNIT);
        if units > self.units {
            return Err(TooBig {
                pool: self.name,
                wanted_mib: (units * UNIT) >> 20,
                total_mib: self.capacity() >> 20,
            });
        }
        // Never closed, and `units` fits in u32 since the pool does.
        let Ok(permit) = self
            .semaphore
            .clone()
            .acquire_many_owned(units as u32)
            .await
        else {
            unreachable!("memory pools are never closed")
        };
        self.metrics
            .add_memory_reserved(self.name, (units * UNIT) as i64);
        Ok(Reserved {
            permit,
            pool: self.name,
            metrics: self.metrics.clone(),
        })
    }
}

impl Reserved {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.permit.num_permits() * UNIT
    }

    /// Gives back what is held beyond `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        let keep = bytes.div_ceil(UNIT);
        let surplus = self.permit.num_permits().saturating_sub(keep);
        if surplus > 0 {
            // Dropping the split-off part returns it to the pool.
            drop(self.permit.split(surplus));
            self.metrics
                .add_memory_reserved(self.pool, -((surplus * UNIT) as i64));
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let bytes = self.bytes();
        if bytes > 0 {
            self.metrics.add_memory_reserved(self.pool, -(bytes as i64));
        }
    }
}

/// Evaluation slots of one endpoint.
#[derive(Clone)]
pub(crate) struct Slots {
    endpoint: &'static str,
    semaphore: Arc<Semaphore>,
    metrics: Metrics,
}

/// A slot held while a request is evaluated.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    endpoint: &'static str,
    metrics: Metrics,
}

impl Slots {
    pub fn new(endpoint: &'static str, n: usize, metrics: Metrics) -> Slots {
        Slots {
            endpoint,
            semaphore: Arc::new(Semaphore::new(n.max(1))),
            metrics,
        }
    }

    /// Slots not held.
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// Waits for a free slot.
    pub async fn acquire(&self) -> Slot {
        let Ok(permit) = self.semaphore.clone().acquire_owned().await else {
            unreachable!("slot semaphores are never closed")
        };
        self.metrics.add_slots_in_use(self.endpoint, 1);
        Slot {
            _permit: permit,
            endpoint: self.endpoint,
            metrics: self.metrics.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.add_slots_in_use(self.endpoint, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn reservations_wait_for_memory_and_return_it_when_dropped() {
        let pool = MemoryPool::new("body", 100 * UNIT, Metrics::new());
        let first = pool.reserve(60 * UNIT).await.unwrap();
        assert_eq!(first.bytes(), 60 * UNIT);
        // Only 40 KiB are free: a reservation that is free to run (it would
        // finish on its first poll) is still waiting after many turns.
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.reserve(50 * UNIT).await.map(|r| r.bytes()) }
        });
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "only 40 KiB are free");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting);
        assert_eq!(second.await.unwrap().unwrap().unwrap(), 50 * UNIT);
    }

    #[tokio::test]
    async fn a_reservation_is_rounded_to_whole_kib_and_never_exceeds_the_pool() {
        let pool = MemoryPool::new("body", 100 * UNIT, Metrics::new());
        let reserved = pool.reserve(30 * UNIT + 1).await.unwrap();
        assert_eq!(reserved.bytes(), 31 * UNIT, "rounded up to whole KiB");
        let err = pool
            .reserve(101 * UNIT)
            .await
            .err()
            .expect("larger than the pool");
        assert!(err.to_string().contains("more than the whole"), "{err}");
    }

    #[tokio::test]
    async fn a_reservation_shrinks_back_to_what_is_used() {
        let metrics = Metrics::new();
        let pool = MemoryPool::new("body", 100 * UNIT, metrics.clone());
        let mut reserved = pool.reserve(80 * UNIT).await.unwrap();
        reserved.shrink_to(10 * UNIT + 1);
        assert_eq!(reserved.bytes(), 11 * UNIT);
        assert_eq!(pool.in_use(), 11 * UNIT);
        assert!(metrics.encode().contains(&format!(
            r#"gpu_admission_memory_reserved_bytes{{pool="body"}} {}"#,
            11 * UNIT
        )));
        drop(reserved);
        assert_eq!(pool.in_use(), 0);
    }

    #[tokio::test]
    async fn reserved_memory_and_slots_show_in_metrics() {
        let metrics = Metrics::new();
        let pool = MemoryPool::new("decoded", 1 << 20, metrics.clone());
        let slots = Slots::new("mutate", 2, metrics.clone());
        let reserved = pool.reserve(10 * UNIT).await.unwrap();
        let slot = slots.acquire().await;
        let text = metrics.encode();
        assert!(
            text.contains(r#"gpu_admission_memory_reserved_bytes{pool="decoded"} 10240"#),
            "{text}"
        );
        assert!(
            text.contains(r#"gpu_admission_evaluation_slots_in_use{endpoint="mutate"} 1"#),
            "{text}"
        );
        drop((reserved, slot));
        let text = metrics.encode();
        assert!(text.contains(r#"gpu_admission_memory_reserved_bytes{pool="decoded"} 0"#));
        assert!(text.contains(r#"gpu_admission_evaluation_slots_in_use{endpoint="mutate"} 0"#));
    }
}
