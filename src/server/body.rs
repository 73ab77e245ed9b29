//! Reading request bodies within the in-flight memory budget.
use super::budget::{MemoryPool, Reserved};
use axum::body::{Body, Bytes};
use http_body_util::BodyExt;

/// Largest body read: an UPDATE carries two objects of up to ~1.5 MiB each.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;
/// An oversized body is read and discarded up to this size so the client
/// sees the 413 instead of a reset connection; beyond it the connection
/// is simply closed.
const DISCARD_LIMIT_BYTES: usize = 32 * 1024 * 1024;

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request body is larger than {} MiB", MAX_BODY_BYTES / (1024 * 1024))]
    TooLarge,
    #[error("request body not received in time")]
    Slow,
    #[error("cannot read request body: {0}")]
    Read(String),
}

/// Reads the whole body with its memory reserved from `pool` in one wait:
/// the declared length (kube-apiserver always declares it), or else the
/// largest body allowed, of which the surplus goes back once the body is
/// read. No reader holds part of the pool while it waits for more, so large
/// bodies arriving together queue for the pool and all finish, instead of
/// each holding a slice and waiting for the others' (a deadlock until their
/// deadlines).
pub(crate) async fn read_body(
    mut body: Body,
    declared: Option<usize>,
    limit: usize,
    pool: &MemoryPool,
) -> Result<(Bytes, Reserved), BodyError> {
    let expected = match declared {
        Some(length) if length > limit => {
            discard(body, DISCARD_LIMIT_BYTES.saturating_sub(length)).await;
            return Err(BodyError::TooLarge);
        }
        Some(length) => length,
        None => limit,
    };
    let mut reserved = pool
        .reserve(expected)
        .await
        .map_err(|_| BodyError::TooLarge)?;
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // hyper stops a body at its declared length; the limit covers the
        // undeclared ones.
        if buf.len() + data.len() > expected {
            discard(
                body,
                DISCARD_LIMIT_BYTES.saturating_sub(buf.len() + data.len()),
            )
            .await;
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&data);
    }
    buf.shrink_to_fit();
    reserved.shrink_to(buf.capacity());
    Ok((Bytes::from(buf), reserved))
}

async fn discard(mut body: Body, mut remaining: usize) {
    while let Some(Ok(frame)) = body.frame().await {
        let len = frame.data_ref().map_or(0, |d| d.len());
        if len > remaining {
            return;
        }
        remaining -= len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::metrics::Metrics;
    use std::time::Duration;

    #[tokio::test]
    async fn body_limit() {
        let pool = MemoryPool::new("body", 1 << 20, Metrics::new());
        let (small, reserved) = read_body(Body::from(vec![b'x'; 10]), None, 10, &pool)
            .await
            .unwrap();
        assert_eq!(small.len(), 10);
        assert_eq!(reserved.bytes(), 1024, "what was read, in whole KiB");
        let big = read_body(Body::from(vec![b'x'; 11]), None, 10, &pool).await;
        assert!(matches!(big, Err(BodyError::TooLarge)));
    }

    /// A body of unknown length holds the largest allowed size while it is
    /// read, then keeps only what it used; another body waits meanwhile.
    #[tokio::test]
    async fn an_undeclared_body_reserves_the_limit_then_gives_back_the_surplus() {
        let limit = 512 * 1024;
        let pool = MemoryPool::new("body", 768 * 1024, Metrics::new());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Bytes, std::io::Error>>();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let first = tokio::spawn({
            let pool = pool.clone();
            async move { read_body(Body::from_stream(stream), None, limit, &pool).await }
        });
        tx.send(Ok(Bytes::from(vec![b'x'; 100_000]))).unwrap();
        while pool.in_use() < limit {
            tokio::task::yield_now().await;
        }
        assert_eq!(pool.in_use(), limit, "the whole limit while reading");
        let second = tokio::spawn({
            let pool = pool.clone();
            async move { read_body(Body::from(vec![b'y'; 10]), None, limit, &pool).await }
        });
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert!(
            !second.is_finished(),
            "a second limit does not fit beside it"
        );
        tx.send(Ok(Bytes::from(vec![b'x'; 100_000]))).unwrap();
        drop(tx);
        let (bytes, reserved) = first.await.unwrap().unwrap();
        assert_eq!(bytes.len(), 200_000);
        assert_eq!(reserved.bytes(), 200_000_usize.div_ceil(1024) * 1024);
        let (small, small_reserved) = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("served once the surplus is back")
            .unwrap()
            .unwrap();
        assert_eq!(small.len(), 10);
        assert_eq!(small_reserved.bytes(), 1024);
    }

    /// Six 160 KB bodies arrive together, in interleaved 16 KB chunks,
    /// through a 300 KiB pool. Reserving as they grow, each would take a
    /// first slice and then wait for more that the others hold: none would
    /// finish. Reserving each declared body whole, they queue and all finish.
    #[tokio::test]
    async fn declared_bodies_queue_for_the_pool_and_all_finish() {
        const BODIES: usize = 6;
        const LENGTH: usize = 160_000;
        let pool = MemoryPool::new("body", 300 * 1024, Metrics::new());
        let mut readers = Vec::new();
        let mut feeds = Vec::new();
        for _ in 0..BODIES {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Bytes, std::io::Error>>();
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            let pool = pool.clone();
            readers.push(tokio::spawn(async move {
                read_body(
                    Body::from_stream(stream),
                    Some(LENGTH),
                    MAX_BODY_BYTES,
                    &pool,
                )
                .await
            }));
            feeds.push(tx);
        }
        for _ in 0..LENGTH.div_ceil(16_000) {
            for feed in &feeds {
                let _ = feed.send(Ok(Bytes::from(vec![b'x'; 16_000])));
            }
        }
        drop(feeds);
        for reader in readers {
            let (body, reserved) = tokio::time::timeout(Duration::from_secs(10), reader)
                .await
                .expect("every body finishes")
                .unwrap()
                .unwrap();
            assert_eq!(body.len(), LENGTH);
            assert!(reserved.bytes() <= 300 * 1024);
        }
        assert_eq!(pool.in_use(), 0, "every reservation returned");
    }

    #[tokio::test]
    async fn a_declared_body_over_the_limit_is_refused_before_reading() {
        let pool = MemoryPool::new("body", 1 << 20, Metrics::new());
        let refused = read_body(Body::from(vec![b'x'; 10]), Some(11), 10, &pool).await;
        assert!(matches!(refused, Err(BodyError::TooLarge)));
        assert_eq!(pool.in_use(), 0);
    }
}
