//! `/readyz` on both listeners follows the server's start-up conditions:
//! 503 with the reason until the policies are loaded and the Namespace
//! cache has synced, 200 after, 503 again once shutdown begins.
use crate::common;

use axum::http::StatusCode;
use common::http::{client_config, Client};
use common::{plain_get, status};
use gpu_admission::server::{Metrics, Readiness, Server, ShutdownHandle};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

async fn readyz_tls(addr: SocketAddr, ca: &str) -> (StatusCode, String) {
    let mut client = Client::connect(addr, client_config(ca, &[b"http/1.1"]), "localhost")
        .await
        .expect("connects");
    let response = client.request("GET", "/readyz", b"").await.unwrap();
    (status(&response), response.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_policies_and_namespaces() {
    let tmp = tempfile::tempdir().unwrap();
    let config = gpu_admission::server::ServeConfig {
        certs_dir: tmp.path().join("certs"),
        ..common::config()
    };
    let readiness = Readiness::new();
    let policies = readiness.gate("policies not loaded");
    let namespaces = readiness.gate("namespaces not synced");
    let shutdown = ShutdownHandle::new();
    let server = Server::bind_with_readiness(
        config,
        Arc::new(common::empty_admission()),
        Metrics::new(),
        shutdown.clone(),
        readiness.clone(),
    )
    .await
    .expect("server binds");
    let addr = server.local_addr();
    let metrics_addr = server.metrics_addr().expect("metrics listener");
    let ca = std::fs::read_to_string(tmp.path().join("certs/ca.crt")).unwrap();
    let task = tokio::spawn(server.run());

    let both = |expected: (StatusCode, &'static str)| {
        let ca = ca.clone();
        async move {
            assert_eq!(readyz_tls(addr, &ca).await, (expected.0, expected.1.into()));
            assert_eq!(
                plain_get(metrics_addr, "/readyz").await,
                (expected.0, expected.1.into())
            );
        }
    };
    both((StatusCode::SERVICE_UNAVAILABLE, "policies not loaded\n")).await;
    policies.open();
    both((StatusCode::SERVICE_UNAVAILABLE, "namespaces not synced\n")).await;
    namespaces.open();
    both((StatusCode::OK, "ok\n")).await;
    // Liveness never depended on any of it.
    assert_eq!(plain_get(metrics_addr, "/healthz").await.0, StatusCode::OK);

    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("server stops")
        .unwrap()
        .unwrap();
}
